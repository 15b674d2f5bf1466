// Package credentialrequest holds the TalosCredentialRequest reconciler: the
// controller, the only holder of the Talos API CA key, signs the request's
// public key as a short-lived client certificate for the least Talos role
// its purpose needs (architecture, "Trust"). The validating webhook has
// already checked the requester's Kubernetes permission and the duration.
//
// A request is answered once: Issued (status holds the certificate, the CA,
// the role and the expiry: public material only) or Denied with a message
// saying what to fix; neither is retried. Answered requests are deleted
// Retention after they expired (Issued) or were denied, so they do not pile up.
package credentialrequest

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/credential"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=taloscredentialrequests,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=taloscredentialrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller and its Events.
const ControllerName = "credentialrequest"

// DefaultRetention is how long an answered request stays after it expired or was denied.
const DefaultRetention = time.Hour

// Reconciler reconciles TalosCredentialRequests.
type Reconciler struct {
	Client client.Client
	// APIReader reads the bundle Secret uncached: the controller gets the
	// Secrets it is pointed at and never caches every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Retention is how long an answered request is kept after it expired or
	// was denied; zero means DefaultRetention.
	Retention time.Duration
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCredentialRequest]
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCredentialRequest{}).
		Watches(&ichorv1alpha1.TalosCluster{}, reconcile.ClusterMembers(mgr.GetClient(), &ichorv1alpha1.TalosCredentialRequestList{})).
		Complete(r)
}

// controller is the reconciler on the skeleton: it owns the Issued, Denied
// and Paused conditions and the certificate fields of the status.
func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosCredentialRequest] {
	return &reconcile.Controller[*ichorv1alpha1.TalosCredentialRequest]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader, Clock: r.Clock,
		New:     func() *ichorv1alpha1.TalosCredentialRequest { return &ichorv1alpha1.TalosCredentialRequest{} },
		Owned:   []string{ichorv1alpha1.IssuedCondition, ichorv1alpha1.DeniedCondition},
		Primary: true,
		OwnStatus: func(dst, src *ichorv1alpha1.TalosCredentialRequest) {
			dst.Status.RequestedBy, dst.Status.Role, dst.Status.Certificate = src.Status.RequestedBy, src.Status.Role, src.Status.Certificate
			dst.Status.CA, dst.Status.ExpiresAt = src.Status.CA, src.Status.ExpiresAt
			dst.Status.KubernetesCertificate, dst.Status.KubernetesCA = src.Status.KubernetesCertificate, src.Status.KubernetesCA
		},
		Phases: []reconcile.Phase[*ichorv1alpha1.TalosCredentialRequest]{r.reconcileRequest},
	}
}

func (r *Reconciler) retention() time.Duration {
	if r.Retention > 0 {
		return r.Retention
	}

	return DefaultRetention
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// reconcileRequest signs a new request, or deletes an answered one once its retention is over.
func (r *Reconciler) reconcileRequest(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCredentialRequest]) (ctrl.Result, error) {
	tcr := s.Object

	if until, answered := r.answeredUntil(tcr); answered {
		if wait := until.Sub(s.Now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}

		// Optimistic: delete only the request this decision was made for.
		err := r.Client.Delete(ctx, tcr, client.Preconditions{UID: &tcr.UID, ResourceVersion: &tcr.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return ctrl.Result{}, err
		}

		logf.FromContext(ctx).Info("deleted an answered credential request after its retention", "retention", r.retention())

		return ctrl.Result{}, nil
	}

	return r.answer(ctx, s)
}

// answeredUntil reports whether the request was answered and until when it is kept.
func (r *Reconciler) answeredUntil(tcr *ichorv1alpha1.TalosCredentialRequest) (time.Time, bool) {
	if c := apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition); c != nil && c.Status == metav1.ConditionTrue {
		expires := c.LastTransitionTime.Time
		if tcr.Status.ExpiresAt != nil {
			expires = tcr.Status.ExpiresAt.Time
		}

		return expires.Add(r.retention()), true
	}

	if c := apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.DeniedCondition); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Add(r.retention()), true
	}

	return time.Time{}, false
}

// denial is a request the controller refuses for good: its message says what to fix.
type denial struct{ reason, msg string }

func (d *denial) Error() string { return d.msg }

func (r *Reconciler) answer(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCredentialRequest]) (ctrl.Result, error) {
	tcr := s.Object
	// Who asked is what the mutating webhook stamped at admission, the only
	// place the requester is known; without the webhooks nobody is named.
	tcr.Status.RequestedBy = tcr.Annotations[ichorv1alpha1.RequestedByAnnotation]

	cert, cl, err := r.sign(ctx, tcr, s.Now)

	var d *denial

	switch {
	case errors.As(err, &d):
		return r.deny(ctx, s, d)
	case err != nil:
		// transient (the API server, a conflict): retried with backoff
		return ctrl.Result{}, err
	}

	now := s.Now
	expires := metav1.NewTime(cert.NotAfter)

	tcr.Status.Role = string(cert.Role)
	tcr.Status.Certificate = string(cert.PEM)
	tcr.Status.CA = string(cert.CA)
	tcr.Status.ExpiresAt = &expires
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.IssuedReason,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now),
		Message: fmt.Sprintf("signed for %s until %s", cert.Role, cert.NotAfter.UTC().Format(time.RFC3339)),
	})
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.DeniedCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.NotDeniedReason,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now), Message: "the request was signed",
	})

	// The skeleton writes the status when the phase returns; the Event goes
	// first (a failed write re-signs on the next reconcile, at the cost of a
	// second Event).

	r.Recorder.Eventf(tcr, nil, corev1.EventTypeNormal, ichorv1alpha1.IssuedReason, "Sign",
		"signed a %s certificate (%s) for TalosCluster %s%s, valid until %s",
		cert.Role, tcr.Spec.Purpose, tcr.Spec.ClusterName, requester(tcr), cert.NotAfter.UTC().Format(time.RFC3339))
	if tcr.Spec.Purpose == ichorv1alpha1.PurposeTalosconfigReader {
		// A person's talosconfig outlives this request's answer: the
		// cluster's Events say who holds one and until when, as the node
		// downloads do (the CLI and the console write no Event of their own).
		who := tcr.Status.RequestedBy
		if who == "" {
			who = "an unnamed requester (no admission webhook stamped the request)"
		}

		r.Recorder.Eventf(cl, tcr, corev1.EventTypeWarning, download.EventReason, "Download", "%s",
			download.TalosconfigEventMessage(who, cl.Name, cert.NotAfter))
	}

	logf.FromContext(ctx).Info("signed a Talos client certificate", "purpose", tcr.Spec.Purpose, "role", cert.Role, "expiresAt", cert.NotAfter.UTC())

	return ctrl.Result{RequeueAfter: cert.NotAfter.Add(r.retention()).Sub(now)}, nil
}

// sign returns the certificate, a *denial for a request that can never be
// signed as it is, or a transient error.
func (r *Reconciler) sign(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest, now time.Time) (*credential.Certificate, *ichorv1alpha1.TalosCluster, error) {
	tr, err := credential.Role(tcr.Spec.Purpose)
	if err != nil {
		reason := ichorv1alpha1.UnknownPurposeReason
		if errors.Is(err, credential.ErrNotSupported) {
			reason = ichorv1alpha1.NotSupportedReason
		}

		return nil, nil, &denial{reason, err.Error()}
	}

	pub, err := credential.ParsePublicKey(tcr.Spec.PublicKey)
	if err != nil {
		return nil, nil, &denial{ichorv1alpha1.BadPublicKeyReason, err.Error() + "; create a new request"}
	}

	cl := &ichorv1alpha1.TalosCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tcr.Namespace, Name: tcr.Spec.ClusterName}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &denial{ichorv1alpha1.UnknownClusterReason, fmt.Sprintf(
				"TalosCluster %q not found in namespace %q: name an existing cluster in spec.clusterName and create a new request",
				tcr.Spec.ClusterName, tcr.Namespace)}
		}

		return nil, nil, err
	}

	if tcr.Spec.Purpose == ichorv1alpha1.PurposeRotationCredentials {
		return r.signRotation(ctx, tcr, cl, pub, tr, now)
	}

	b, accepted, err := machinestate.LoadTrust(ctx, r.APIReader, cl)
	if err != nil {
		if machinestate.IsStalled(err) {
			// the message names the Secret and key, never the content
			return nil, nil, &denial{ichorv1alpha1.BundleUnavailableReason, fmt.Sprintf(
				"the secrets bundle of TalosCluster %q cannot be used: %v; restore it (ichor secrets push) and create a new request",
				cl.Name, err)}
		}

		return nil, nil, err
	}

	cert, err := credential.Sign(b, pub, tr, commonName(tcr), now, credential.Duration(tcr.Spec))
	if err != nil {
		return nil, nil, &denial{ichorv1alpha1.SigningFailedReason, err.Error()}
	}

	// While a CA rotation runs, a node presents a certificate of the bundle's
	// CA or of the one accepted beside it: the holder trusts both.
	cert.CA = accepted.TalosPEM(cert.CA)
	tcr.Status.KubernetesCertificate, tcr.Status.KubernetesCA = "", ""

	return cert, cl, nil
}

// requester is " to <user>" when the webhook named who asked.
func requester(tcr *ichorv1alpha1.TalosCredentialRequest) string {
	if tcr.Status.RequestedBy == "" {
		return ""
	}

	return " to " + tcr.Status.RequestedBy
}

// commonName names the certificate's holder: Talos ignores it (roles come
// from the Organization) but it shows in the nodes' logs.
func commonName(tcr *ichorv1alpha1.TalosCredentialRequest) string {
	if tcr.Status.RequestedBy != "" {
		return tcr.Status.RequestedBy
	}

	return fmt.Sprintf("ichor:%s:%s/%s", tcr.Spec.Purpose, tcr.Namespace, tcr.Name)
}

func (r *Reconciler) deny(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCredentialRequest], d *denial) (ctrl.Result, error) {
	tcr, now := s.Object, s.Now

	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.DeniedCondition, Status: metav1.ConditionTrue, Reason: d.reason,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now), Message: d.msg,
	})
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionFalse, Reason: d.reason,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now), Message: "not signed: see the Denied condition",
	})

	r.Recorder.Eventf(tcr, nil, corev1.EventTypeWarning, d.reason, "Sign", "%s", d.msg)
	logf.FromContext(ctx).Info("denied a credential request", "reason", d.reason, "purpose", tcr.Spec.Purpose)

	return ctrl.Result{RequeueAfter: r.retention()}, nil
}

// signRotation signs the credentials of a CA rotation waiting in
// AwaitingCredentials (or past it, not completed): an os:admin Talos client
// certificate of the new Talos API CA and a system:masters Kubernetes client
// certificate of the new Kubernetes CA, both for the request's public key,
// with the CA bundles (new and old) to trust while both are in use. Once
// signed, the operation is marked (CredentialsIssuedAnnotation) and goes on;
// the cluster gets a Warning Event naming who holds them.
func (r *Reconciler) signRotation(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest, cl *ichorv1alpha1.TalosCluster,
	pub crypto.PublicKey, tr role.Role, now time.Time,
) (*credential.Certificate, *ichorv1alpha1.TalosCluster, error) {
	op := &ichorv1alpha1.TalosOperation{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: tcr.Namespace, Name: tcr.Spec.OperationName}, op); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &denial{ichorv1alpha1.UnknownOperationReason, fmt.Sprintf(
				"TalosOperation %q not found in namespace %q: name the ca-rotation operation in spec.operationName and create a new request", tcr.Spec.OperationName, tcr.Namespace)}
		}

		return nil, nil, err
	}

	if op.Spec.Type != ichorv1alpha1.OperationCARotation || op.Spec.ClusterName != cl.Name {
		return nil, nil, &denial{ichorv1alpha1.UnknownOperationReason, fmt.Sprintf(
			"TalosOperation %s is not a ca-rotation of TalosCluster %s: name the cluster's ca-rotation operation and create a new request", op.Name, cl.Name)}
	}

	if op.Status.CompletedAt != nil || op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed {
		return nil, nil, &denial{ichorv1alpha1.NotSupportedReason, fmt.Sprintf(
			"the CA rotation %s has ended; the cluster's CAs are the bundle's: use `ichor cluster talosconfig` or an admin kubeconfig instead", op.Name)}
	}

	switch op.Status.Step {
	case "", "select", "prepare", "accept":
		return nil, nil, &denial{ichorv1alpha1.NotSupportedReason, fmt.Sprintf(
			"the CA rotation %s is at stage %q: its credentials are handed out once every node accepts the new CAs (phase AwaitingCredentials); create a new request then",
			op.Name, op.Status.Step)}
	}

	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: cl.Spec.SecretsBundleRef.Name}, sec); err != nil {
		return nil, nil, err
	}

	next, err := bundle.LoadNext(sec, cl)
	if err != nil {
		return nil, nil, &denial{ichorv1alpha1.BundleUnavailableReason, err.Error()}
	}

	accepted, err := bundle.LoadAccepted(sec)
	if err != nil {
		return nil, nil, &denial{ichorv1alpha1.BundleUnavailableReason, err.Error()}
	}

	ttl := credential.Duration(tcr.Spec)

	cert, err := credential.Sign(next, pub, tr, commonName(tcr), now, ttl)
	if err != nil {
		return nil, nil, &denial{ichorv1alpha1.SigningFailedReason, err.Error()}
	}

	kubeCert, _, err := credential.SignKubernetes(next, pub, commonName(tcr), now, ttl)
	if err != nil {
		return nil, nil, &denial{ichorv1alpha1.SigningFailedReason, err.Error()}
	}

	// Trust the new CAs and, while they are in use, the old ones: before the
	// issue stage the accepted ones are the new, after it the old.
	cert.CA = accepted.TalosPEM(next.Certs.OS.Crt)
	if prev, err := bundle.LoadPrevious(sec, cl); err == nil && prev != nil {
		cert.CA = bundle.Accepted{Talos: []string{string(prev.Certs.OS.Crt)}}.TalosPEM(cert.CA)
		tcr.Status.KubernetesCA = string(bundle.Accepted{Kubernetes: []string{string(prev.Certs.K8s.Crt)}}.KubernetesPEM(next.Certs.K8s.Crt))
	} else {
		cur, err := bundle.LoadForCluster(sec, cl)
		if err != nil {
			return nil, nil, &denial{ichorv1alpha1.BundleUnavailableReason, err.Error()}
		}

		cert.CA = bundle.Accepted{Talos: []string{string(cur.Certs.OS.Crt)}}.TalosPEM(cert.CA)
		tcr.Status.KubernetesCA = string(bundle.Accepted{Kubernetes: []string{string(cur.Certs.K8s.Crt)}}.KubernetesPEM(next.Certs.K8s.Crt))
	}

	tcr.Status.KubernetesCertificate = string(kubeCert)

	who := tcr.Status.RequestedBy
	if who == "" {
		who = "an unnamed requester (no admission webhook stamped the request)"
	}

	// The Warning comes before the credentials leave (architecture, "Trust").
	r.Recorder.Eventf(cl, tcr, corev1.EventTypeWarning, download.EventReason, "Download",
		"%s was handed admin credentials (talosconfig and kubeconfig) of the new CAs of CA rotation %s, valid until %s",
		who, op.Name, cert.NotAfter.UTC().Format(time.RFC3339))

	if op.Annotations[ichorv1alpha1.CredentialsIssuedAnnotation] == "" {
		patch := client.MergeFrom(op.DeepCopy())
		if op.Annotations == nil {
			op.Annotations = map[string]string{}
		}

		op.Annotations[ichorv1alpha1.CredentialsIssuedAnnotation] = tcr.Name

		if err := r.Client.Patch(ctx, op, patch); err != nil {
			return nil, nil, err
		}
	}

	return cert, cl, nil
}
