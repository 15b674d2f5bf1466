// Package helminstall records a Helm install of Ichor (architecture,
// "Deployment"): the chart's controller runs with --deployment-manager=helm,
// and at start its leader creates the IchorInstallation `ichor` with
// spec.deployment.manager helm when there is none, then keeps its
// spec.version and status.installedVersion at the controller's own release,
// so that `ichor version` and the skew check see what Helm installed and
// `ichor upgrade ichor` refuses (guard.CheckIchorUpgrade: Helm owns
// upgrades). An IchorInstallation the installer or `ichor init` made
// (manager ichor) is left as it is, with a Warning Event saying so:
// spec.deployment.manager is immutable, and which tool upgrades Ichor is not
// the controller's to change.
package helminstall

import (
	"context"
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// Writing spec.version of the IchorInstallation needs update on
// ichorinstallations/version (the admission webhook asks the API server);
// the controller may write the singleton only.
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations,verbs=create
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations,verbs=patch,resourceNames=ichor
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations/version,verbs=update,resourceNames=ichor

const (
	// Name names the runnable in the logs and its Events.
	Name = "helminstall"
	// FieldOwner is the field manager of its writes.
	FieldOwner = "ichor-controller"
	// RecordedReason is the reason of the Event of a created or updated IchorInstallation.
	RecordedReason = "HelmInstallRecorded"
	// NotHelmReason is the reason of the Warning Event of an IchorInstallation another tool manages.
	NotHelmReason = "NotManagedByHelm"
)

// releasePattern is spec.version.version's pattern in the CRD.
var releasePattern = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// Recorder creates and keeps the IchorInstallation of a Helm install. It is a
// leader-elected runnable: it runs once per leadership, retrying with a
// growing backoff until it has written (the create passes the admission
// webhook, which this controller's replicas serve and may not serve yet).
type Recorder struct {
	// Client writes the IchorInstallation.
	Client client.Client
	// APIReader reads it uncached.
	APIReader client.Reader
	// Version is the controller's own build version (version.Get().Version);
	// its build metadata is dropped, as the installer records it.
	Version string
	// Events records what was done on the IchorInstallation.
	Events events.EventRecorder
	// Retry is the wait after the first failed attempt, doubled after each
	// failure up to RetryCap; zero means 1 s and 1 min.
	Retry, RetryCap time.Duration
}

// SetupWithManager checks the version and adds the recorder to mgr.
func (r *Recorder) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Events == nil {
		r.Events = mgr.GetEventRecorder(Name)
	}

	if err := r.check(); err != nil {
		return err
	}

	return mgr.Add(r)
}

func (r *Recorder) check() error {
	if v := install.ReleaseVersion(r.Version); !releasePattern.MatchString(v) {
		return fmt.Errorf("this controller's version %q is not a release version vMAJOR.MINOR.PATCH[-PRE], "+
			"so it cannot be recorded in the IchorInstallation: build it with `go tool task build`, or run it without --deployment-manager", r.Version)
	}

	return nil
}

// NeedLeaderElection is true: one replica writes.
func (r *Recorder) NeedLeaderElection() bool { return true }

// Start records the install, retrying until it is written or ctx ends. It
// stops the manager only for a version that cannot be recorded, which
// SetupWithManager refuses first.
func (r *Recorder) Start(ctx context.Context) error {
	if err := r.check(); err != nil {
		return err
	}

	log := ctrl.LoggerFrom(ctx).WithName(Name)
	ctx = ctrl.LoggerInto(ctx, log)

	delay, ceiling := r.Retry, r.RetryCap
	if delay <= 0 {
		delay = time.Second
	}

	if ceiling <= 0 {
		ceiling = time.Minute
	}

	for {
		err := r.Record(ctx)
		if err == nil {
			return nil
		}

		log.Error(err, "recording the Helm install in the IchorInstallation; retrying", "after", delay)

		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}

		delay = min(2*delay, ceiling)
	}
}

// Record does it once: it creates the IchorInstallation (manager helm, this
// release) when there is none, leaves one of another manager as it is, and
// brings a Helm-managed one's spec.version and status.installedVersion to
// this release.
func (r *Recorder) Record(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	release := install.ReleaseVersion(r.Version)
	key := client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}
	ii := &ichorv1alpha1.IchorInstallation{}

	err := r.APIReader.Get(ctx, key, ii)

	switch {
	case apierrors.IsNotFound(err):
		ii = &ichorv1alpha1.IchorInstallation{
			ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
			Spec: ichorv1alpha1.IchorInstallationSpec{
				Version:    ichorv1alpha1.IchorVersionSpec{Version: release},
				Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: ichorv1alpha1.ManagerHelm},
			},
		}

		if err := r.Client.Create(ctx, ii, client.FieldOwner(FieldOwner)); err != nil {
			// AlreadyExists: someone else's; the next attempt reads it.
			return fmt.Errorf("creating IchorInstallation %s: %w", key.Name, err)
		}

		log.Info("created the IchorInstallation of a Helm install", "name", ii.Name, "version", release)
		r.Events.Eventf(ii, nil, corev1.EventTypeNormal, RecordedReason, "Create",
			"Helm installed Ichor %s: IchorInstallation %s created with spec.deployment.manager helm; upgrade Ichor with `helm upgrade`", release, ii.Name)
	case err != nil:
		return fmt.Errorf("reading IchorInstallation %s: %w", key.Name, err)
	case ii.Spec.Deployment.Manager != ichorv1alpha1.ManagerHelm:
		manager := ii.Spec.Deployment.Manager
		if manager == "" {
			manager = "(none)"
		}

		log.Info("the IchorInstallation is not Helm's; left as it is", "name", ii.Name, "manager", manager)
		r.Events.Eventf(ii, nil, corev1.EventTypeWarning, NotHelmReason, "Skip",
			"this controller runs from the Helm chart (--deployment-manager=helm), but IchorInstallation %s has spec.deployment.manager %s, "+
				"which is immutable: it was left as it is, and `ichor upgrade ichor` still runs the installer Job; "+
				"run Ichor from one of the two, not both", ii.Name, manager)

		return nil
	case ii.Spec.Version.Version != release:
		before := ii.DeepCopy()
		ii.Spec.Version.Version = release

		if err := r.Client.Patch(ctx, ii, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("setting spec.version of IchorInstallation %s to %s: %w", ii.Name, release, err)
		}

		log.Info("spec.version of the IchorInstallation follows Helm's release", "name", ii.Name, "from", before.Spec.Version.Version, "to", release)
	}

	if ii.Status.InstalledVersion == release {
		return nil
	}

	from := ii.Status.InstalledVersion
	before := ii.DeepCopy()
	ii.Status.InstalledVersion = release

	if err := r.Client.Status().Patch(ctx, ii, client.MergeFrom(before), client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("setting status.installedVersion of IchorInstallation %s to %s: %w", ii.Name, release, err)
	}

	log.Info("status.installedVersion of the IchorInstallation recorded", "name", ii.Name, "from", from, "to", release)

	if from != "" {
		r.Events.Eventf(ii, nil, corev1.EventTypeNormal, RecordedReason, "Update",
			"Helm runs Ichor %s (was %s): IchorInstallation %s's installedVersion updated", release, from, ii.Name)
	}

	return nil
}
