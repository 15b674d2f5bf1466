package helminstall_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// logs is what the controllers logged.
	logs lockedBuffer
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()

	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()

	return l.b.String()
}

const timeout = 30 * time.Second

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{LogTo: &logs}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
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
		Events: mgr.GetEventRecorder(helminstall.Name),
		Retry:  100 * time.Millisecond, RetryCap: time.Second,
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

// While the API server refuses the create (here a ValidatingAdmissionPolicy;
// in a cluster, the controller's own webhook before it serves), the
// recorder keeps trying well past its retry cap, and creates the
// installation once the refusal is lifted.
func TestRetriesUntilWritten(t *testing.T) {
	deleteAtEnd(t)

	ctx := t.Context()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-ichorinstallation"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{ichorv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"ichorinstallations"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "the test refuses IchorInstallations"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-ichorinstallation"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	testenv.Must(t, k8s.Create(ctx, policy))
	testenv.Must(t, k8s.Create(ctx, binding))

	t.Cleanup(func() { _ = k8s.Delete(context.Background(), policy) })

	probe := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.1.0"}},
	}

	testenv.Eventually(t, timeout, "the policy refusing a create", func() error {
		err := k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "the test refuses IchorInstallations") {
			return nil
		}

		return fmt.Errorf("a dry-run create: %w", err)
	})

	before := strings.Count(logs.String(), "recording the Helm install in the IchorInstallation; retrying")
	done := make(chan error, 1)
	r := recorder("v0.4.2")
	r.Retry, r.RetryCap = 10*time.Millisecond, 40*time.Millisecond

	go func() { done <- r.Start(ctx) }()

	// Ten refusals: at a 40 ms cap, well past where a bounded backoff stops.
	testenv.Eventually(t, timeout, "ten refused attempts", func() error {
		if n := strings.Count(logs.String(), "recording the Helm install in the IchorInstallation; retrying") - before; n < 10 {
			return fmt.Errorf("%d so far", n)
		}

		return nil
	})

	testenv.Must(t, k8s.Delete(ctx, binding))
	testenv.Must(t, <-done)

	if ii := get(t); ii.Spec.Deployment.Manager != ichorv1alpha1.ManagerHelm || ii.Status.InstalledVersion != "v0.4.2" {
		t.Fatalf("after the refusals: manager %q, installedVersion %q", ii.Spec.Deployment.Manager, ii.Status.InstalledVersion)
	}
}
