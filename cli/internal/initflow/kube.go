package initflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/kube"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// FieldOwner is init's field manager.
const FieldOwner = "ichor-init"

// writeRetry is how long a write is retried on a transient error
// (architecture, "Bootstrap": every write retried for a few minutes).
const writeRetry = 4 * time.Minute

func objectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}

type kubeSteps struct {
	s    *state
	conn *kube.Conn
}

func (k *kubeSteps) c() client.WithWatch { return k.conn.Client }

// connect builds a client from the admin kubeconfig and waits for the API server.
func (k *kubeSteps) connect(ctx context.Context) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(k.s.kubeconfig)
	if err != nil {
		return errors.New("the admin kubeconfig does not parse")
	}

	cfg.WarningHandler = nil
	cfg.Timeout = 30 * time.Second
	// client-go's discovery logs through klog while the API server starts;
	// the step shows the error itself, once.
	klog.SetLogger(logr.Discard())

	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return fmt.Errorf("building a client for %s: %w", cfg.Host, err)
	}

	k.conn = &kube.Conn{Client: c, Config: cfg, Namespace: k.s.o.Namespace}

	var last error

	err = poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		last = c.List(ctx, &corev1.NamespaceList{}, client.Limit(1))
		if last != nil {
			k.s.p.Detailf("waiting for the API server: %s", shortErr(last))
		}

		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the Kubernetes API at %s did not answer within 5m (last: %v); check the node, then run init again to continue", cfg.Host, shortErr(last))
	}

	return nil
}

func (k *kubeSteps) installTitle() string {
	if k.s.o.Install == InstallNone {
		return "Ichor's namespace, CRDs and user roles (--install=none: the controller runs elsewhere)"
	}

	return "Ichor installed by the installer Job (" + k.installerImage() + ")"
}

func (k *kubeSteps) installerImage() string {
	if k.s.o.InstallerImage != "" {
		return k.s.o.InstallerImage
	}

	return install.InstallerImage(k.s.env.Version)
}

// install installs Ichor: with --install=manifest the installer Job does
// (installJob); with none, init server-side applies the namespace, the CRDs
// and the users' roles itself and waits for the CRDs to be served.
func (k *kubeSteps) install(ctx context.Context) error {
	if k.s.o.Install != InstallNone {
		return k.installJob(ctx)
	}

	all, err := install.ParseIn(install.Manifest(), k.s.o.Namespace)
	if err != nil {
		return err
	}

	objs := crdsOf(all)

	for i, o := range objs {
		k.s.p.Detailf("%d/%d %s %s", i+1, len(objs), o.GetKind(), o.GetName())

		if err := k.apply(ctx, o); err != nil {
			return err
		}
	}

	return k.waitCRDs(ctx)
}

// crdsOf is what install.CRDs selects, of objects already in the namespace.
func crdsOf(all []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured

	for _, o := range all {
		switch o.GetKind() {
		case "CustomResourceDefinition", "Namespace":
			out = append(out, o)
		case "ClusterRole", "ClusterRoleBinding":
			if slices.Contains(install.UserRoles, o.GetName()) {
				out = append(out, o)
			}
		}
	}

	return out
}

func (k *kubeSteps) apply(ctx context.Context, o *unstructured.Unstructured, opts ...client.ApplyOption) error {
	err := k.retry(ctx, func(ctx context.Context) error {
		return k.c().Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), append([]client.ApplyOption{client.FieldOwner(FieldOwner), client.ForceOwnership}, opts...)...)
	})
	if err != nil {
		return k.conn.Explain(err, fmt.Sprintf("applying %s %s", o.GetKind(), o.GetName()))
	}

	return nil
}

// waitCRDs waits until the API serves the custom resources init writes next.
func (k *kubeSteps) waitCRDs(ctx context.Context) error {
	return k.retry(ctx, func(ctx context.Context) error {
		return k.c().List(ctx, &ichorv1alpha1.TalosClusterList{}, client.InNamespace(k.s.o.Namespace), client.Limit(1))
	})
}

// installJob installs Ichor the way upgrades do (architecture, "Upgrades"):
// a server-side dry run of the whole manifest first (the API server's
// refusals show before anything is written), then the namespace and the
// installer's RBAC applied as the admin, then the installer Job (the image
// of this release), followed until it ends. A failed Job's log is shown; a
// completed one must have recorded this version in the IchorInstallation.
// A Job left by an earlier run is followed if it runs or completed, and
// started again if it failed.
func (k *kubeSteps) installJob(ctx context.Context) error {
	s := k.s

	all, err := install.ParseIn(install.Manifest(), s.o.Namespace)
	if err != nil {
		return err
	}

	rbac := install.ByStep(all, install.StepInstallerRBAC)

	// The namespace must exist for the namespaced objects' dry run.
	for _, o := range rbac {
		if o.GetKind() == "Namespace" {
			if err := k.apply(ctx, o); err != nil {
				return err
			}
		}
	}

	for i, o := range all {
		s.p.Detailf("dry run %d/%d %s %s", i+1, len(all), o.GetKind(), o.GetName())

		if err := k.apply(ctx, o, client.DryRunAll); err != nil {
			return fmt.Errorf("the API server refuses Ichor's install manifest (nothing of it was installed): %w", err)
		}
	}

	for _, o := range rbac {
		s.p.Detailf("%s %s", o.GetKind(), o.GetName())

		if err := k.apply(ctx, o); err != nil {
			return err
		}
	}

	name := install.JobName(s.env.Version)
	var args []string
	if s.o.UIURL != "" {
		// The installer records it and installs ichor-ui as the issuer at it.
		args = append(args, "--ui-url="+s.o.UIURL)
	}

	job := install.InstallerJob(s.o.Namespace, name, k.installerImage(), args...)

	if err := k.startJob(ctx, job); err != nil {
		return err
	}

	cs, err := kubernetes.NewForConfig(k.conn.Config)
	if err != nil {
		return err
	}

	res, err := install.WaitJob(ctx, k.c(), cs, s.o.Namespace, name, install.JobDeadline, func(state string) { s.p.Detailf("%s", state) })
	if err != nil {
		return err
	}

	if !res.Succeeded {
		s.p.Notef("The installer Job %s/%s failed (%s). Its log:\n%s", s.o.Namespace, name, res.Reason, res.Log)

		return fmt.Errorf("the installer Job %s/%s failed: its log is above (again with `kubectl logs -n %s job/%s`); "+
			"`kubectl get ichorinstallation ichor -o yaml` shows the reason too. Fix the cause, then run init again: it starts the Job again",
			s.o.Namespace, name, s.o.Namespace, name)
	}

	if err := install.CheckInstalled(ctx, k.c(), s.env.Version); err != nil {
		return fmt.Errorf("%w; read the Job's log with `kubectl logs -n %s job/%s`", err, s.o.Namespace, name)
	}

	return k.waitCRDs(ctx)
}

// startJob creates the installer Job, or keeps the one an earlier run left
// unless it failed, which is deleted and created again.
func (k *kubeSteps) startJob(ctx context.Context, job *batchv1.Job) error {
	for {
		cur := &batchv1.Job{}

		err := k.c().Get(ctx, client.ObjectKeyFromObject(job), cur)
		if apierrors.IsNotFound(err) {
			k.s.p.Detailf("creating Job %s", job.Name)

			err := k.retry(ctx, func(ctx context.Context) error {
				err := k.c().Create(ctx, job.DeepCopy(), client.FieldOwner(FieldOwner))
				if apierrors.IsAlreadyExists(err) {
					return nil
				}

				return err
			})
			if err != nil {
				return k.conn.Explain(err, "creating the installer Job "+job.Name)
			}

			return nil
		}

		if err != nil {
			return k.conn.Explain(err, "reading the installer Job "+job.Name)
		}

		if !jobFailed(cur) {
			k.s.p.Notef("The installer Job %s of an earlier run is there; following it.", job.Name)

			return nil
		}

		k.s.p.Notef("The installer Job %s of an earlier run failed; starting it again.", job.Name)

		if err := k.c().Delete(ctx, cur, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil && !apierrors.IsNotFound(err) {
			return k.conn.Explain(err, "deleting the failed installer Job "+job.Name)
		}

		if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
			err := k.c().Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{})

			return apierrors.IsNotFound(err), nil
		}); err != nil {
			return fmt.Errorf("the failed installer Job %s was not deleted within 2m; delete it (kubectl delete job -n %s %s) and run init again",
				job.Name, job.Namespace, job.Name)
		}
	}
}

func jobFailed(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}

	return false
}

// resources writes the bundle Secret, the TalosCluster, the first
// TalosMachine (approved, its status saying the configuration was sent, so
// the controller follows it instead of sending again) and the
// IchorInstallation. What exists is left as it is.
func (k *kubeSteps) resources(ctx context.Context) error {
	s := k.s
	ref := s.cluster.Spec.SecretsBundleRef

	sec, err := bundle.Secret(s.o.Namespace, ref, s.bundle)
	if err != nil {
		return err
	}

	// The Secret holds the YAML the store holds, byte for byte.
	sec.Data[bundle.Key(ref)] = s.bundleYAML
	sec.Labels = map[string]string{ichorv1alpha1.ClusterLabel: s.o.Cluster}

	if err := k.create(ctx, sec, func(existing client.Object) error {
		have := existing.(*corev1.Secret).Data[bundle.Key(ref)]
		if !bytes.Equal(have, s.bundleYAML) {
			return fmt.Errorf("the Secret %s/%s exists and holds another secrets bundle than %s: it belongs to another cluster; "+
				"pick another --cluster name, or delete that Secret if it is a leftover", s.o.Namespace, ref.Name, k.s.env.Store.Dir)
		}

		return nil
	}); err != nil {
		return err
	}

	k.s.p.Detailf("Secret %s", ref.Name)

	if err := k.create(ctx, s.cluster.DeepCopy(), nil); err != nil {
		return err
	}

	k.s.p.Detailf("TalosCluster %s", s.cluster.Name)

	if err := k.firstMachine(ctx); err != nil {
		return err
	}

	inst := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: releaseVersion(s.env.Version)},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: ichorv1alpha1.ManagerIchor},
		},
	}

	if s.o.UIURL != "" {
		inst.Annotations = map[string]string{install.UIURLAnnotation: s.o.UIURL}
	}

	if err := k.create(ctx, inst, nil); err != nil {
		return err
	}

	// The installer Job created it first (--install=manifest): --ui-url goes on as an annotation.
	if s.o.UIURL != "" {
		if err := k.retry(ctx, func(ctx context.Context) error {
			cur := &ichorv1alpha1.IchorInstallation{}
			if err := k.c().Get(ctx, client.ObjectKeyFromObject(inst), cur); err != nil {
				return err
			}

			if cur.Annotations[install.UIURLAnnotation] == s.o.UIURL {
				return nil
			}

			before := cur.DeepCopy()
			metav1.SetMetaDataAnnotation(&cur.ObjectMeta, install.UIURLAnnotation, s.o.UIURL)

			return k.c().Patch(ctx, cur, client.MergeFrom(before), client.FieldOwner(FieldOwner))
		}); err != nil {
			return k.conn.Explain(err, "annotating IchorInstallation "+inst.Name+" with --ui-url")
		}
	}

	k.s.p.Detailf("IchorInstallation %s", inst.Name)

	return nil
}

func (k *kubeSteps) firstMachine(ctx context.Context) error {
	s := k.s
	m := s.machine.DeepCopy()

	who, err := k.conn.WhoAmI(ctx)
	if err != nil {
		who = "ichor-init"
	}

	now := metav1.Now()
	m.Spec.Approval.DecidedBy, m.Spec.Approval.DecidedAt = who, &now
	// The machine is created held, so that a running controller does not
	// provision it before its status says init did (a create cannot carry
	// status); the hold is lifted once the status is written.
	m.Annotations = map[string]string{ichorv1alpha1.HoldApplyAnnotation: FieldOwner}

	if err := k.create(ctx, m, nil); err != nil {
		return err
	}

	k.s.p.Detailf("TalosMachine %s (approved by %s)", m.Name, m.Spec.Approval.DecidedBy)

	// The status says what init did, as the controller's own provisioning
	// would have recorded it (lifecycle markSent): the configuration was sent,
	// under this maintenance certificate. The controller then follows the
	// node to Provisioned instead of sending again.
	if err := k.retry(ctx, func(ctx context.Context) error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := k.c().Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}

		if cur.Status.ConfigSentAt != nil || apimeta.IsStatusConditionTrue(cur.Status.Conditions, ichorv1alpha1.ProvisionedCondition) {
			return nil
		}

		before := cur.DeepCopy()
		sent := metav1.NewTime(s.sentAt)

		if s.sentAt.IsZero() {
			sent = now
		}

		cur.Status.ConfigSentAt = &sent
		cur.Status.Stage = ichorv1alpha1.StageRunning
		cur.Status.TalosVersion = s.node.TalosVersion
		cur.Status.Hardware = s.node.Hardware

		if s.node.Fingerprint != "" {
			cur.Status.MaintenanceFingerprint = s.node.Fingerprint
			apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
				Type: ichorv1alpha1.FingerprintTrustedCondition, Status: metav1.ConditionTrue, Reason: "Pinned",
				Message: "ichor init sent the configuration with the maintenance certificate pinned", ObservedGeneration: cur.Generation,
			})
		}

		if s.rendered != nil {
			cur.Status.AppliedConfigHash = s.rendered.Hash
			cur.Status.RenderVersion = render.Version
		}

		apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.JoiningReason,
			Message:            "ichor init sent the configuration and bootstrapped etcd; waiting for the controller to confirm the etcd member and the Ready Node",
			ObservedGeneration: cur.Generation,
		})
		// Ready is the summary of the others, decided in one place.
		ichorv1alpha1.SummarizeTalosMachine(cur)

		return k.c().Status().Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	}); err != nil {
		return k.conn.Explain(err, "writing the status of TalosMachine "+m.Name)
	}

	// Lift init's own hold (a hold a person set is theirs: its value differs).
	return k.retry(ctx, func(ctx context.Context) error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := k.c().Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}

		if cur.Annotations[ichorv1alpha1.HoldApplyAnnotation] != FieldOwner {
			return nil
		}

		before := cur.DeepCopy()
		delete(cur.Annotations, ichorv1alpha1.HoldApplyAnnotation)

		return k.c().Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

// create creates obj, retrying transient errors; an existing object is
// checked by same (nil: left as it is).
func (k *kubeSteps) create(ctx context.Context, obj client.Object, same func(existing client.Object) error) error {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]

	err := k.retry(ctx, func(ctx context.Context) error {
		err := k.c().Create(ctx, obj.DeepCopyObject().(client.Object), client.FieldOwner(FieldOwner))
		if apierrors.IsAlreadyExists(err) {
			if same == nil {
				return nil
			}

			existing := obj.DeepCopyObject().(client.Object)
			if err := k.c().Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
				return err
			}

			return permanent{same(existing)}
		}

		return err
	})

	var p permanent
	if errors.As(err, &p) {
		return p.err
	}

	if err != nil {
		return k.conn.Explain(err, "creating "+kind+" "+obj.GetName())
	}

	return nil
}

// permanent carries an error the retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string {
	if p.err == nil {
		return ""
	}

	return p.err.Error()
}

func (p permanent) Unwrap() error { return p.err }

// retry runs f until it succeeds, fails for good, or writeRetry passes,
// showing the transient error it waits out.
func (k *kubeSteps) retry(ctx context.Context, f func(context.Context) error) error {
	var last error

	err := poll(ctx, writeRetry, func(ctx context.Context) (bool, error) {
		err := f(ctx)

		var p permanent

		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &p):
			if p.err == nil {
				return true, nil
			}

			return false, err
		case Transient(err):
			last = err
			k.s.p.Detailf("retrying: %s", shortErr(err))

			return false, nil
		default:
			return false, err
		}
	})
	if errors.Is(err, context.DeadlineExceeded) && last != nil {
		return fmt.Errorf("still failing after %s: %w", writeRetry, last)
	}

	return err
}

// Transient reports an error worth retrying: the API server or a webhook not
// reachable or not ready yet, a kind not served yet, throttling, a conflict.
func Transient(err error) bool {
	if err == nil {
		return false
	}

	switch {
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsConflict(err),
		apimeta.IsNoMatchError(err), apierrors.IsNotFound(err) && strings.Contains(err.Error(), "the server could not find the requested resource"):
		return true
	}

	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}

	var netErr net.Error
	var urlErr *url.Error

	return errors.As(err, &netErr) || errors.As(err, &urlErr)
}

func shortErr(err error) string {
	if err == nil {
		return ""
	}

	msg := err.Error()
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}

	return msg
}

// wait follows the first machine until the controller reports it
// Provisioned and Ready, showing each change of its conditions and the
// cluster's; when the time runs out it says the last reason.
func (k *kubeSteps) wait(ctx context.Context) error {
	s := k.s
	key := client.ObjectKey{Namespace: s.o.Namespace, Name: s.machine.Name}
	last := "the controller has not looked at the machine yet: is ichor-controller running?"

	err := poll(ctx, s.o.Timeout, func(ctx context.Context) (bool, error) {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k.c().Get(ctx, key, m); err != nil {
			if !Transient(err) {
				last = shortErr(err)
			}

			return false, nil
		}

		prov := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition)
		ready := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ReadyCondition)

		if len(m.Finalizers) > 0 && ready != nil {
			last = fmt.Sprintf("%s: %s", ready.Reason, ready.Message)
		}

		s.p.Detailf("%s", last)

		c := &ichorv1alpha1.TalosCluster{}
		if err := k.c().Get(ctx, client.ObjectKey{Namespace: s.o.Namespace, Name: s.o.Cluster}, c); err == nil {
			if h := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition); h != nil && h.Status != metav1.ConditionTrue {
				s.p.Detailf("CNIHandover %s: %s", h.Reason, h.Message)

				return false, nil
			}
		}

		return prov != nil && prov.Status == metav1.ConditionTrue && ready != nil && ready.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		return fmt.Errorf("the wait for the controller ran out after %s; last: %s. The cluster exists and the controller keeps working: "+
			"follow it with `ichor machine get %s`", s.o.Timeout, last, s.machine.Name)
	}

	return nil
}

// releaseVersion drops semver build metadata (v0.0.0-dev+abc1234 → v0.0.0-dev):
// the IchorInstallation's version names a release, and build metadata does
// not take part in version precedence.
func releaseVersion(v string) string {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		return v[:i]
	}

	return v
}

// InstallInto installs Ichor into the cluster the admin kubeconfig reaches,
// as init's install step does (o.Install: manifest runs the installer Job,
// none applies the namespace, the CRDs and the users' roles); o needs only
// Namespace, Install and InstallerImage. The full-loss recovery calls it once
// the recovered API answers.
func InstallInto(ctx context.Context, kubeconfig []byte, o Options, env Env) error {
	if o.Install == "" {
		o.Install = InstallManifest
	}

	s := &state{o: o, env: env, p: env.Progress, kubeconfig: kubeconfig}
	k := &kubeSteps{s: s}

	if err := k.connect(ctx); err != nil {
		return err
	}

	return k.install(ctx)
}

// InstallTitle names what InstallInto does for o.
func InstallTitle(o Options, env Env) string {
	return (&kubeSteps{s: &state{o: o, env: env}}).installTitle()
}

// policyWait bounds how long init waits for the network policies once
// Cilium's CRD is served: the cluster works without them, so a controller
// that has not applied them by then is reported, not failed.
const policyWait = 2 * time.Minute

// networkPolicies follows the isolation of Ichor's namespace once Cilium is
// Ichor's (architecture, "Deployment", Network policy): the controller
// applies the CiliumNetworkPolicies as soon as the API server serves
// Cilium's CRD, which Cilium registers when its agent and operator start.
// When the CRD is served, init waits for NetworkPoliciesApplied=True (at
// most policyWait); when it is not, or the wait runs out, init says so and
// how to follow it, and the step still ends: the cluster runs without them.
func (k *kubeSteps) networkPolicies(ctx context.Context) error {
	s := k.s
	key := client.ObjectKey{Namespace: s.o.Namespace, Name: s.o.Cluster}
	follow := fmt.Sprintf("follow its NetworkPoliciesApplied condition with `kubectl describe taloscluster %s -n %s`", s.o.Cluster, s.o.Namespace)

	served, err := servesCNP(k.conn.Config)
	if err != nil {
		s.p.Notef("could not ask the API server whether it serves %s: %s; the controller applies the network policies of %s when it does: %s",
			netpol.CRDName, shortErr(err), s.o.Namespace, follow)

		return nil
	}

	if !served {
		s.p.Notef("the API server does not serve %s yet (Cilium registers it when it starts): the controller applies the network policies of %s when it does; %s",
			netpol.CRDName, s.o.Namespace, follow)

		return nil
	}

	last := "the controller has not reported NetworkPoliciesApplied yet"

	err = poll(ctx, min(policyWait, s.o.Timeout), func(ctx context.Context) (bool, error) {
		c := &ichorv1alpha1.TalosCluster{}
		if err := k.c().Get(ctx, key, c); err != nil {
			if !Transient(err) {
				last = shortErr(err)
			}

			return false, nil
		}

		cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.NetworkPoliciesAppliedCondition)
		if cond != nil {
			last = fmt.Sprintf("NetworkPoliciesApplied %s, %s: %s", cond.Status, cond.Reason, cond.Message)
		}

		s.p.Detailf("%s", last)

		return cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		s.p.Notef("the network policies of %s are not in place yet (%s); the controller keeps trying: %s", s.o.Namespace, last, follow)
	}

	return nil
}

// servesCNP asks the API server's discovery (not a cached mapping) whether
// it serves Cilium's CiliumNetworkPolicy.
func servesCNP(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, err
	}

	list, err := dc.ServerResourcesForGroupVersion(netpol.GVK.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}

	if err != nil {
		return false, err
	}

	for _, r := range list.APIResources {
		if r.Kind == netpol.GVK.Kind {
			return true, nil
		}
	}

	return false, nil
}

// Connect builds a client from the admin kubeconfig and waits (5 minutes at
// most) for the API server to answer, as init's first Kubernetes step does.
func Connect(ctx context.Context, kubeconfig []byte, namespace string, p *Progress) (*kube.Conn, error) {
	k := &kubeSteps{s: &state{o: Options{Namespace: namespace}, p: p, kubeconfig: kubeconfig}}
	if err := k.connect(ctx); err != nil {
		return nil, err
	}

	return k.conn, nil
}

// Retry runs f again while its error is transient (Transient), for init's
// write retry.
func Retry(ctx context.Context, conn *kube.Conn, p *Progress, f func(context.Context) error) error {
	k := &kubeSteps{s: &state{p: p}, conn: conn}

	return k.retry(ctx, f)
}
