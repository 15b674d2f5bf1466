// Package installer installs and upgrades Ichor in the cluster it runs in
// (architecture, "Deployment" and "Upgrades"). Run takes these steps, in
// order, each reported by one line of the log (the Job's log is what a
// person reads):
//
//  1. apply the installer's own RBAC (the Job runs with the rights of the
//     release being replaced, so the new rights come first);
//  2. check the CRDs: every change to a stored version is additive, or the
//     field is on the retired list (contracts/pkg/crdcheck); a refusal
//     changes nothing;
//  3. snapshot the objects the run will change (the network policies among
//     them when it applies them), as they are now, into
//     the ConfigMap ichor-installer-snapshot (Secret kinds into a Secret of
//     that name);
//  4. apply the CRDs (server-side apply, field manager ichor-installer) and
//     wait until they are Established; create the IchorInstallation if there
//     is none;
//  5. apply the controller's objects and wait until its Deployment is available;
//  6. apply ichor-ui's objects and wait until its Deployment is available;
//  7. apply Ichor's CiliumNetworkPolicies (contracts/pkg/netpol) when the API
//     server serves their kind (Cilium's CRD is installed) and the
//     controller has written its egress policies, or say why not and skip
//     them;
//  8. post-checks: the webhook Service has ready endpoints, and the admission
//     webhook refuses a dry-run object it must refuse;
//  9. write the IchorInstallation's status: installedVersion, Installed.
//
// A wait for a Deployment ends at its timeout, or earlier when a pod of the
// Deployment's new template crash-loops (wait.go, crashLoop).
//
// A failure after the snapshot rolls back: the snapshot is applied again,
// what this run created is deleted (never a CRD: CRDs are never
// downgraded), and the previous Deployments are waited for; the reason goes
// to the log and to the IchorInstallation's status (Installed=False,
// failureReason).
//
// One schedulable node means one replica and no PodDisruptionBudget; more
// mean two replicas with PodDisruptionBudgets (contracts/pkg/install.Decide).
package installer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/crdcheck"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// Default waits.
const (
	DefaultWaitTimeout = 5 * time.Minute
	DefaultCRDTimeout  = time.Minute
)

// SnapshotName names the snapshot ConfigMap (and Secret).
const SnapshotName = "ichor-installer-snapshot"

// Options are one installer run's inputs.
type Options struct {
	// Config reaches the API server (in-cluster: the Job's ServiceAccount).
	Config *rest.Config
	// Namespace is Ichor's namespace; empty means ichor-system.
	Namespace string
	// Manifest is the multi-document YAML to install; nil means the manifest
	// embedded in this build (contracts/pkg/install).
	Manifest []byte
	// ManifestSource names the manifest in the log.
	ManifestSource string
	// Version is the Ichor release being installed (build metadata is dropped).
	Version string
	// WaitTimeout bounds each wait for a Deployment and the post-checks; zero means DefaultWaitTimeout.
	WaitTimeout time.Duration
	// CRDTimeout bounds the wait for the CRDs to be Established; zero means DefaultCRDTimeout.
	CRDTimeout time.Duration
	// SkipWebhookRefusal leaves out the post-check that the admission webhook
	// refuses a dry-run object (the webhook Service's endpoints are still
	// checked). Only for a world whose pods do not run (kwok-simulated).
	SkipWebhookRefusal bool
	// UIURL is the https URL browsers reach ichor-ui at: ichor-ui is
	// installed as the issuer of Ichor's own users there, and the URL is
	// recorded on the IchorInstallation (install.UIURLAnnotation), which a
	// later run without it keeps. Empty means the recorded one, if any.
	UIURL string
	// Retired are the CRD fields that may be removed; nil means crdcheck.RetiredFields.
	Retired []crdcheck.Retired
	// Log receives the run's lines; nil discards them.
	Log io.Writer
}

// Installer is one run.
type Installer struct {
	o    Options
	c    client.Client
	objs []*unstructured.Unstructured
	log  io.Writer
	step int
	// policies are Ichor's CiliumNetworkPolicies, when the API server serves
	// their kind (detectNetworkPolicies); nil otherwise.
	policies []*unstructured.Unstructured
	// policiesWhy says why policies is nil.
	policiesWhy string

	snap *snapshot
	// previous is the version installed before this run, "" on a fresh install.
	previous string
}

// steps is the number of numbered steps in the log.
const steps = 9

// Scheme returns the scheme of the installer's client.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ichorv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}

	return s
}

// New prepares a run: it parses the manifest and builds the client.
func New(o Options) (*Installer, error) {
	if o.Namespace == "" {
		o.Namespace = install.Namespace
	}

	if o.WaitTimeout <= 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}

	if o.CRDTimeout <= 0 {
		o.CRDTimeout = DefaultCRDTimeout
	}

	if o.Retired == nil {
		o.Retired = crdcheck.RetiredFields
	}

	if o.UIURL != "" {
		if err := install.CheckUIURL(o.UIURL); err != nil {
			return nil, fmt.Errorf("--ui-url %w", err)
		}
	}

	o.Version = install.ReleaseVersion(o.Version)
	if o.Version == "" {
		return nil, errors.New("no version to install")
	}

	data := o.Manifest
	if data == nil {
		data = install.Manifest()

		if o.ManifestSource == "" {
			o.ManifestSource = "the manifest embedded in ichor-installer " + o.Version
		}
	}

	objs, err := install.ParseIn(data, o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("the manifest (%s) does not parse: %w", o.ManifestSource, err)
	}

	if len(install.ByStep(objs, install.StepInstallerRBAC)) == 0 || len(install.ByStep(objs, install.StepCRDs)) == 0 {
		return nil, fmt.Errorf("the manifest (%s) holds no installer RBAC or no CRDs: is it Ichor's install manifest?", o.ManifestSource)
	}

	cfg := rest.CopyConfig(o.Config)
	cfg.UserAgent = "ichor-installer/" + o.Version
	cfg.WarningHandler = rest.NoWarnings{}
	// A run writes some sixty objects and polls; client-go's default of 5
	// requests a second would make that take a minute.
	cfg.QPS, cfg.Burst = 50, 100

	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", cfg.Host, err)
	}

	log := o.Log
	if log == nil {
		log = io.Discard
	}

	return &Installer{o: o, c: c, objs: objs, log: log}, nil
}

// Run installs; see the package documentation for the steps. The error says
// what failed and whether the previous version runs again.
func Run(ctx context.Context, o Options) error {
	in, err := New(o)
	if err != nil {
		return err
	}

	return in.Run(ctx)
}

func (in *Installer) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(in.log, format+"\n", args...)
}

// stepf starts a numbered step.
func (in *Installer) stepf(format string, args ...any) {
	in.step++
	in.logf("[%d/%d] "+format, append([]any{in.step, steps}, args...)...)
}

// Run runs the steps.
func (in *Installer) Run(ctx context.Context) error {
	in.logf("ichor-installer: installing Ichor %s into namespace %s from %s (%d objects)",
		in.o.Version, in.o.Namespace, in.o.ManifestSource, len(in.objs))

	if err := in.clusterScoped(); err != nil {
		return err
	}

	if err := in.applyInstallerRBAC(ctx); err != nil {
		return in.fail(ctx, "installer RBAC", err, false)
	}

	if err := in.refuseHelm(ctx); err != nil {
		return in.fail(ctx, "IchorInstallation", err, false)
	}

	if err := in.checkCRDs(ctx); err != nil {
		return in.fail(ctx, "CRD check", err, false)
	}

	if err := in.detectNetworkPolicies(ctx); err != nil {
		return in.fail(ctx, "network policies", err, false)
	}

	if err := in.takeSnapshot(ctx); err != nil {
		return in.fail(ctx, "snapshot", err, false)
	}

	controller := func(ctx context.Context) error {
		return in.applyWorkload(ctx, install.StepController, install.ControllerName)
	}
	ui := func(ctx context.Context) error { return in.applyWorkload(ctx, install.StepUI, install.UIName) }

	for _, s := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"CRDs", in.applyCRDs},
		{"controller", controller},
		{"ichor-ui", ui},
		{"network policies", in.applyNetworkPolicies},
		{"post-checks", in.postChecks},
		{"ichor-ui's URL", in.recordUIURL},
	} {
		if err := s.run(ctx); err != nil {
			return in.fail(ctx, s.name, err, true)
		}
	}

	in.stepf("IchorInstallation %s: installedVersion %s", ichorv1alpha1.IchorInstallationName, in.o.Version)

	if err := in.writeStatus(ctx, func(st *ichorv1alpha1.IchorInstallationStatus) {
		st.InstalledVersion, st.FailureReason = in.o.Version, ""
		setInstalled(st, "True", ichorv1alpha1.InstallSucceededReason, "Ichor "+in.o.Version+" is installed")
	}); err != nil {
		return in.fail(ctx, "IchorInstallation status", err, true)
	}

	if err := in.releaseSnapshot(ctx); err != nil {
		in.logf("warning: marking the snapshot done: %v (the next run keeps this run's snapshot)", err)
	}

	in.logf("done: Ichor %s is installed in %s", in.o.Version, in.o.Namespace)

	return nil
}

// fail reports a failed step, rolls back when something was changed, and
// records the outcome.
func (in *Installer) fail(ctx context.Context, step string, cause error, rollback bool) error {
	// The caller's context may be what failed (a deadline): the rollback and
	// the status write get their own time.
	ctx = context.WithoutCancel(ctx)
	reason := fmt.Sprintf("%s: %v", step, cause)
	in.logf("FAILED at %s: %v", step, cause)

	if !rollback {
		in.logf("nothing of Ichor was changed (only the installer's own RBAC was applied); the installed Ichor (%s) is left as it was", versionOrNone(in.previous))
		in.recordFailure(ctx, ichorv1alpha1.RefusedReason, "Ichor "+in.o.Version+" was not installed, nothing was changed: "+reason, reason)

		return fmt.Errorf("installing Ichor %s failed at %s, nothing was changed: %w", in.o.Version, step, cause)
	}

	rbErr := in.rollback(ctx)
	if rbErr != nil {
		in.logf("ROLLBACK FAILED: %v", rbErr)
		in.logf("look at the Deployments in %s (kubectl get deploy,pods -n %s); the snapshot is ConfigMap %s/%s",
			in.o.Namespace, in.o.Namespace, in.o.Namespace, SnapshotName)
		in.recordFailure(ctx, ichorv1alpha1.RollbackFailedReason,
			fmt.Sprintf("Ichor %s failed (%s) and the rollback to %s failed too: %v", in.o.Version, reason, versionOrNone(in.previous), rbErr), reason)

		return fmt.Errorf("installing Ichor %s failed at %s (%w), and the rollback failed: %w", in.o.Version, step, cause, rbErr)
	}

	in.recordFailure(ctx, ichorv1alpha1.RolledBackReason,
		fmt.Sprintf("Ichor %s failed and was rolled back; %s runs: %s", in.o.Version, versionOrNone(in.previous), reason), reason)

	return fmt.Errorf("installing Ichor %s failed at %s and was rolled back (%s runs): %w", in.o.Version, step, versionOrNone(in.previous), cause)
}

func versionOrNone(v string) string {
	if v == "" {
		return "no previous version"
	}

	return v
}

// recordFailure writes the failure to the IchorInstallation's status, when
// one exists.
func (in *Installer) recordFailure(ctx context.Context, reason, message, failure string) {
	if len(failure) > 4000 {
		failure = failure[:4000] + "…"
	}

	err := in.writeStatus(ctx, func(st *ichorv1alpha1.IchorInstallationStatus) {
		st.FailureReason = failure
		setInstalled(st, "False", reason, message)
	})

	switch {
	case errors.Is(err, errNoInstallation):
		in.logf("no IchorInstallation to record the failure in")
	case err != nil:
		in.logf("warning: recording the failure in IchorInstallation %s: %v", ichorv1alpha1.IchorInstallationName, err)
	default:
		in.logf("IchorInstallation %s: Installed=False, reason %s", ichorv1alpha1.IchorInstallationName, reason)
	}
}

// clusterScoped drops the namespace kustomize gives the cluster-scoped
// kinds it does not know (ValidatingAdmissionPolicy and its binding), so an
// object of the manifest and the same object read from the API server have
// one key.
func (in *Installer) clusterScoped() error {
	for _, o := range in.objs {
		if o.GetNamespace() == "" {
			continue
		}

		namespaced, err := in.c.IsObjectNamespaced(o)
		if err != nil {
			return fmt.Errorf("the API server does not serve %s (%s %s of the manifest): %w", o.GetAPIVersion(), o.GetKind(), o.GetName(), err)
		}

		if !namespaced {
			o.SetNamespace("")
		}
	}

	return nil
}

func names(objs []*unstructured.Unstructured) string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetKind()+" "+o.GetName())
	}

	return strings.Join(out, ", ")
}
