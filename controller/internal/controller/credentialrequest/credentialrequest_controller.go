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
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/credential"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=taloscredentialrequests,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=taloscredentialrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller and its Events.
const ControllerName = "credentialrequest"

// DefaultRetention is how long an answered request stays after it expired or was denied.
const DefaultRetention = time.Hour

// Condition reasons.
const (
	ReasonIssued          = "Issued"
	ReasonUnknownCluster  = "UnknownCluster"
	ReasonBundleMissing   = "BundleUnavailable"
	ReasonBadPublicKey    = "BadPublicKey"
	ReasonNotSupported    = "NotSupported"
	ReasonSigningFailed   = "SigningFailed"
	ReasonUnknownPurpose  = "UnknownPurpose"
	reasonDeniedCondition = "NotDenied"
)

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
	// Now is the clock; nil means time.Now.
	Now func() time.Time
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

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCredentialRequest{}).
		Complete(r)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}

	return time.Now()
}

func (r *Reconciler) retention() time.Duration {
	if r.Retention > 0 {
		return r.Retention
	}

	return DefaultRetention
}

// Reconcile signs a new request, or deletes an answered one once its retention is over.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tcr := &ichorv1alpha1.TalosCredentialRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, tcr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	if !tcr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	if until, answered := r.answeredUntil(tcr); answered {
		if wait := until.Sub(r.now()); wait > 0 {
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

	return r.answer(ctx, tcr)
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

func (r *Reconciler) answer(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest) (ctrl.Result, error) {
	// Who asked is what the mutating webhook stamped at admission, the only
	// place the requester is known; without the webhooks nobody is named.
	tcr.Status.RequestedBy = tcr.Annotations[ichorv1alpha1.RequestedByAnnotation]

	cert, err := r.sign(ctx, tcr)

	var d *denial

	switch {
	case errors.As(err, &d):
		return r.deny(ctx, tcr, d)
	case err != nil:
		// transient (the API server, a conflict): retried with backoff
		return ctrl.Result{}, err
	}

	now := r.now()
	expires := metav1.NewTime(cert.NotAfter)

	tcr.Status.ObservedGeneration = tcr.Generation
	tcr.Status.Role = string(cert.Role)
	tcr.Status.Certificate = string(cert.PEM)
	tcr.Status.CA = string(cert.CA)
	tcr.Status.ExpiresAt = &expires
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionTrue, Reason: ReasonIssued,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now),
		Message: fmt.Sprintf("signed for %s until %s", cert.Role, cert.NotAfter.UTC().Format(time.RFC3339)),
	})
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.DeniedCondition, Status: metav1.ConditionFalse, Reason: reasonDeniedCondition,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now), Message: "the request was signed",
	})

	if err := r.Client.Status().Update(ctx, tcr); err != nil {
		// A conflict means someone else wrote the status meanwhile; look again.
		return ctrl.Result{}, err
	}

	r.Recorder.Eventf(tcr, nil, corev1.EventTypeNormal, ReasonIssued, "Sign",
		"signed a %s certificate (%s) for TalosCluster %s, valid until %s",
		cert.Role, tcr.Spec.Purpose, tcr.Spec.ClusterName, cert.NotAfter.UTC().Format(time.RFC3339))
	logf.FromContext(ctx).Info("signed a Talos client certificate", "purpose", tcr.Spec.Purpose, "role", cert.Role, "expiresAt", cert.NotAfter.UTC())

	return ctrl.Result{RequeueAfter: cert.NotAfter.Add(r.retention()).Sub(now)}, nil
}

// sign returns the certificate, a *denial for a request that can never be
// signed as it is, or a transient error.
func (r *Reconciler) sign(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest) (*credential.Certificate, error) {
	tr, err := credential.Role(tcr.Spec.Purpose)
	if err != nil {
		reason := ReasonUnknownPurpose
		if errors.Is(err, credential.ErrNotSupported) {
			reason = ReasonNotSupported
		}

		return nil, &denial{reason, err.Error()}
	}

	pub, err := credential.ParsePublicKey(tcr.Spec.PublicKey)
	if err != nil {
		return nil, &denial{ReasonBadPublicKey, err.Error() + "; create a new request"}
	}

	cl := &ichorv1alpha1.TalosCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tcr.Namespace, Name: tcr.Spec.ClusterName}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &denial{ReasonUnknownCluster, fmt.Sprintf(
				"TalosCluster %q not found in namespace %q: name an existing cluster in spec.clusterName and create a new request",
				tcr.Spec.ClusterName, tcr.Namespace)}
		}

		return nil, err
	}

	b, err := machinestate.LoadBundle(ctx, r.APIReader, cl)
	if err != nil {
		if machinestate.IsStalled(err) {
			// the message names the Secret and key, never the content
			return nil, &denial{ReasonBundleMissing, fmt.Sprintf(
				"the secrets bundle of TalosCluster %q cannot be used: %v; restore it (ichor secrets push) and create a new request",
				cl.Name, err)}
		}

		return nil, err
	}

	cert, err := credential.Sign(b, pub, tr, commonName(tcr), r.now(), credential.Duration(tcr.Spec))
	if err != nil {
		return nil, &denial{ReasonSigningFailed, err.Error()}
	}

	return cert, nil
}

// commonName names the certificate's holder: Talos ignores it (roles come
// from the Organization) but it shows in the nodes' logs.
func commonName(tcr *ichorv1alpha1.TalosCredentialRequest) string {
	if tcr.Status.RequestedBy != "" {
		return tcr.Status.RequestedBy
	}

	return fmt.Sprintf("ichor:%s:%s/%s", tcr.Spec.Purpose, tcr.Namespace, tcr.Name)
}

func (r *Reconciler) deny(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest, d *denial) (ctrl.Result, error) {
	now := r.now()

	tcr.Status.ObservedGeneration = tcr.Generation
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.DeniedCondition, Status: metav1.ConditionTrue, Reason: d.reason,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now), Message: d.msg,
	})
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionFalse, Reason: d.reason,
		ObservedGeneration: tcr.Generation, LastTransitionTime: metav1.NewTime(now), Message: "not signed: see the Denied condition",
	})

	if err := r.Client.Status().Update(ctx, tcr); err != nil {
		return ctrl.Result{}, err
	}

	r.Recorder.Eventf(tcr, nil, corev1.EventTypeWarning, d.reason, "Sign", "%s", d.msg)
	logf.FromContext(ctx).Info("denied a credential request", "reason", d.reason, "purpose", tcr.Spec.Purpose)

	return ctrl.Result{RequeueAfter: r.retention()}, nil
}
