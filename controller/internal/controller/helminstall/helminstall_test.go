package helminstall_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/controller/internal/controller/helminstall"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// A real API server with Ichor's CRDs (the CRD's schema and CEL rules
// apply); a manager supplies the clients and the Event recorder the
// controller's main.go gives the recorder. No webhook runs here: the e2e
// test TestHelmManagedRefusesUpgrade covers the create through it.
var (
	k8s client.Client
	mgr ctrl.Manager
)

const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		var err error
		if mgr, err = s.NewManager(); err != nil {
			return nil, err
		}

		return nil, testenv.StartManager(ctx, mgr)
	}))
}

func recorder(v string) *helminstall.Recorder {
	return &helminstall.Recorder{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Version: v,
		Events:  mgr.GetEventRecorder(helminstall.Name),
		Backoff: wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: time.Second, Steps: 20},
	}
}

func get(t *testing.T) *ichorv1alpha1.IchorInstallation {
	t.Helper()

	ii := &ichorv1alpha1.IchorInstallation{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii))

	return ii
}

// existing creates the IchorInstallation as the installer (or an older
// Helm-installed controller) left it, and deletes it when the test ends.
func existing(t *testing.T, manager, v string) *ichorv1alpha1.IchorInstallation {
	t.Helper()

	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: v},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: manager},
		},
	}
	testenv.Must(t, k8s.Create(t.Context(), ii))
	deleteAtEnd(t)
	testenv.UpdateStatus(t, k8s, ii, func(cur *ichorv1alpha1.IchorInstallation) { cur.Status.InstalledVersion = v })

	return get(t)
}

func deleteAtEnd(t *testing.T) {
	t.Helper()

	t.Cleanup(func() {
		ii := &ichorv1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName}}
		if err := k8s.Delete(context.Background(), ii); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the IchorInstallation: %v", err)
		}

		testenv.Eventually(t, timeout, "the IchorInstallation gone", func() error {
			err := k8s.Get(context.Background(), client.ObjectKeyFromObject(ii), ii)
			if apierrors.IsNotFound(err) {
				return nil
			}

			return fmt.Errorf("still there (%w)", err)
		})
	})
}

// waitEvent waits for an Event of reason on the IchorInstallation of uid and returns its note.
func waitEvent(t *testing.T, uid, reason string) string {
	t.Helper()

	var note string

	testenv.Eventually(t, timeout, "Event "+reason, func() error {
		l := &eventsv1.EventList{}
		if err := k8s.List(t.Context(), l); err != nil {
			return err
		}

		for _, e := range l.Items {
			if string(e.Regarding.UID) == uid && e.Reason == reason {
				note = e.Note

				return nil
			}
		}

		return fmt.Errorf("none among %d Events", len(l.Items))
	})

	return note
}

// With no IchorInstallation, the Helm-installed controller creates it with
// manager helm and its own release (build metadata dropped, as the
// installer records it) as spec.version and status.installedVersion, and
// `ichor upgrade ichor`'s check then refuses, naming `helm upgrade`.
func TestCreatesHelmInstallation(t *testing.T) {
	deleteAtEnd(t)
	testenv.Must(t, recorder("v0.4.1+abc1234").Start(t.Context()))

	ii := get(t)
	if ii.Spec.Deployment.Manager != ichorv1alpha1.ManagerHelm || ii.Spec.Version.Version != "v0.4.1" || ii.Status.InstalledVersion != "v0.4.1" {
		t.Fatalf("IchorInstallation: manager %q, spec.version %q, installedVersion %q; want helm, v0.4.1, v0.4.1",
			ii.Spec.Deployment.Manager, ii.Spec.Version.Version, ii.Status.InstalledVersion)
	}

	if note := waitEvent(t, string(ii.UID), helminstall.RecordedReason); !strings.Contains(note, "`helm upgrade`") {
		t.Errorf("the Event says %q", note)
	}

	refusals := guard.CheckIchorUpgrade(ii, "v0.5.0")
	if len(refusals) != 1 || !strings.Contains(refusals[0].WayOut, "`helm upgrade`") {
		t.Fatalf("an upgrade of the recorded installation: %+v", refusals)
	}
}

// An IchorInstallation the installer made (manager ichor) is not changed:
// the Warning Event, recorded after the decision, comes and the object is
// as it was (same resourceVersion).
func TestLeavesInstallerManaged(t *testing.T) {
	before := existing(t, ichorv1alpha1.ManagerIchor, "v0.3.0")

	testenv.Must(t, recorder("v0.4.0").Start(t.Context()))

	note := waitEvent(t, string(before.UID), helminstall.NotHelmReason)
	if !strings.Contains(note, "spec.deployment.manager ichor") || !strings.Contains(note, "left as it is") {
		t.Errorf("the Event says %q", note)
	}

	after := get(t)
	if after.ResourceVersion != before.ResourceVersion || after.Spec.Deployment.Manager != ichorv1alpha1.ManagerIchor ||
		after.Spec.Version.Version != "v0.3.0" || after.Status.InstalledVersion != "v0.3.0" {
		t.Fatalf("the installer's IchorInstallation was changed: resourceVersion %s -> %s, manager %q, spec.version %q, installedVersion %q",
			before.ResourceVersion, after.ResourceVersion, after.Spec.Deployment.Manager, after.Spec.Version.Version, after.Status.InstalledVersion)
	}
}

// After `helm upgrade`, the new controller brings a Helm-managed
// installation's spec.version and installedVersion to its release.
func TestFollowsHelmUpgrade(t *testing.T) {
	before := existing(t, ichorv1alpha1.ManagerHelm, "v0.3.0")

	testenv.Must(t, recorder("v0.4.0").Start(t.Context()))

	after := get(t)
	if after.Spec.Version.Version != "v0.4.0" || after.Status.InstalledVersion != "v0.4.0" || after.Spec.Deployment.Manager != ichorv1alpha1.ManagerHelm {
		t.Fatalf("after the upgrade: manager %q, spec.version %q, installedVersion %q; want helm, v0.4.0, v0.4.0",
			after.Spec.Deployment.Manager, after.Spec.Version.Version, after.Status.InstalledVersion)
	}

	if note := waitEvent(t, string(before.UID), helminstall.RecordedReason); !strings.Contains(note, "was v0.3.0") {
		t.Errorf("the Event says %q", note)
	}
}

// A version the CRD would refuse stops the controller at start with a clear
// error, instead of retrying a create that can never pass.
func TestRefusesAVersionThatIsNotARelease(t *testing.T) {
	err := recorder("dev").Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), `"dev" is not a release version`) {
		t.Fatalf("Start with version dev: %v", err)
	}

	ii := &ichorv1alpha1.IchorInstallation{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); !apierrors.IsNotFound(err) {
		t.Fatalf("after the refusal the IchorInstallation: %v", err)
	}
}
