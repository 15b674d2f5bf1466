package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func operations(t testing.TB, tok string) ichorv1.OperationServiceClient {
	return ichorv1.NewOperationServiceClient(grpcConn(t, tok))
}

// createOperation creates a Talos upgrade of cluster as the administrator and
// sets its status.
func createOperation(t testing.TB, name, cluster string, st ichorv1alpha1.TalosOperationStatus) *ichorv1alpha1.TalosOperation {
	t.Helper()
	ctx := context.Background()
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: cluster, Type: ichorv1alpha1.OperationTalos,
			Talos: &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"},
		},
	}
	if err := admin.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	// A running talos operation would block every later test's upgrade.
	t.Cleanup(func() { _ = admin.Delete(context.Background(), op) })
	op.Status = st
	if err := admin.Status().Update(ctx, op); err != nil {
		t.Fatal(err)
	}
	return op
}

func getOperation(t testing.TB, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()
	op := &ichorv1alpha1.TalosOperation{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, op); err != nil {
		t.Fatal(err)
	}
	return op
}

// waitOperationCached waits until the backend's cache has the operation at rv.
func waitOperationCached(t testing.TB, name, rv string) {
	t.Helper()
	c := operations(t, adminTok(t))
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.GetOperation(context.Background(), &ichorv1.GetOperationRequest{Name: name})
		if err == nil && resp.GetOperation().GetResourceVersion() == rv {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend's cache did not see operation %s at resourceVersion %s: %v", name, rv, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOperationsListAndGet(t *testing.T) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	older := createOperation(t, "ops-list-older", testCluster, ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationSucceeded, From: "v1.14.0", To: "v1.14.1", StartedAt: &now, CompletedAt: &now,
	})
	// Creation times have a resolution of one second: the next one is newer.
	time.Sleep(1100 * time.Millisecond)
	newer := createOperation(t, "ops-list-newer", testCluster, ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationRunning, Step: "UpgradingWorkers", From: "v1.14.1", StartedAt: &now,
		Machines: []ichorv1alpha1.MachineProgress{
			{Name: "cp-1", Role: ichorv1alpha1.RoleControlPlane, Phase: ichorv1alpha1.MachineDone, Message: "upgraded"},
			{Name: "w-1", Role: ichorv1alpha1.RoleWorker, Phase: ichorv1alpha1.MachineInProgress, Step: "reboot"},
		},
	})
	other := createOperation(t, "ops-list-other", "another", ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationRunning})
	waitOperationCached(t, older.Name, older.ResourceVersion)
	waitOperationCached(t, newer.Name, newer.ResourceVersion)

	// A viewer lists: only this cluster's operations, newest first.
	resp, err := operations(t, viewer(t)).ListOperations(context.Background(), &ichorv1.ListOperationsRequest{})
	if err != nil {
		t.Fatalf("viewer list: %v", err)
	}
	var names []string
	for _, op := range resp.GetOperations() {
		if op.GetName() == other.Name {
			t.Errorf("the list has operation %s of another cluster", other.Name)
		}
		if strings.HasPrefix(op.GetName(), "ops-list-") {
			names = append(names, op.GetName())
		}
	}
	if strings.Join(names, ",") != "ops-list-newer,ops-list-older" {
		t.Errorf("order: %v, want the newer operation first", names)
	}

	got, err := operations(t, viewer(t)).GetOperation(context.Background(), &ichorv1.GetOperationRequest{Name: newer.Name})
	if err != nil {
		t.Fatalf("viewer get: %v", err)
	}
	op := got.GetOperation()
	if op.GetType() != "talos" || op.GetPhase() != "Running" || op.GetStep() != "UpgradingWorkers" || op.GetFrom() != "v1.14.1" ||
		op.GetTo() != "v1.14.2" || op.GetStartedAt() == nil || op.GetCreatedAt() == nil || op.GetPaused() {
		t.Errorf("operation: %v", op)
	}
	ms := op.GetMachines()
	if len(ms) != 2 || ms[0].GetName() != "cp-1" || ms[0].GetState() != "Done" || ms[0].GetMessage() != "upgraded" ||
		ms[1].GetName() != "w-1" || ms[1].GetState() != "InProgress" || ms[1].GetMessage() != "reboot" {
		t.Errorf("machines: %v", ms)
	}

	// Another cluster's operation does not exist for this ichor-ui.
	_, err = operations(t, adminTok(t)).GetOperation(context.Background(), &ichorv1.GetOperationRequest{Name: other.Name})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "another") {
		t.Errorf("get another cluster's operation: %v, want NotFound naming its cluster", err)
	}
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/operations/"+other.Name, viewer(t), "")
	if code != http.StatusNotFound {
		t.Errorf("REST get another cluster's operation: %d %v, want 404", code, body)
	}
	code, body = rest(t, httpClient(), http.MethodGet, "/api/v1/operations/no-such-op", viewer(t), "")
	if code != http.StatusNotFound {
		t.Errorf("REST get a missing operation: %d %v, want 404", code, body)
	}

	// REST lists the same.
	code, body = rest(t, httpClient(), http.MethodGet, "/api/v1/operations", viewer(t), "")
	js := toJSON(body)
	if code != http.StatusOK || !strings.Contains(js, `"ops-list-newer"`) || strings.Contains(js, `"ops-list-other"`) ||
		strings.Index(js, `"ops-list-newer"`) > strings.Index(js, `"ops-list-older"`) {
		t.Errorf("REST list: %d %s", code, js)
	}

	// Without a role, nothing.
	_, err = operations(t, token(t, "ichor:nobody")).ListOperations(context.Background(), &ichorv1.ListOperationsRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("list without a role: %v, want PermissionDenied", err)
	}
}

func TestViewerCannotPauseOperation(t *testing.T) {
	op := createOperation(t, "ops-viewer", testCluster, ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationRunning})
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/operations/"+op.Name+":pause", viewer(t), "{}")
	msg, _ := body["message"].(string)
	if code != http.StatusForbidden || !strings.Contains(msg, "403 Forbidden") || !strings.Contains(msg, "ichor:vera") {
		t.Fatalf("viewer pause over REST: %d %v, want 403 naming the user", code, body)
	}
	_, err := operations(t, viewer(t)).PauseOperation(context.Background(), &ichorv1.PauseOperationRequest{Name: op.Name})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer pause over gRPC: %v, want PermissionDenied", err)
	}
	if got := getOperation(t, op.Name); got.Spec.Paused || got.ResourceVersion != op.ResourceVersion {
		t.Fatalf("the operation changed after a refused pause: paused=%v", got.Spec.Paused)
	}
}

func TestOperatorPausesAndAdminResumes(t *testing.T) {
	op := createOperation(t, "ops-pause", testCluster, ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationRunning, Step: "UpgradingControlPlanes"})

	resp, err := operations(t, operator(t)).PauseOperation(context.Background(), &ichorv1.PauseOperationRequest{Name: op.Name})
	if err != nil {
		t.Fatalf("operator pause: %v", err)
	}
	if !resp.GetOperation().GetPaused() {
		t.Errorf("pause response: %v", resp.GetOperation())
	}
	if got := getOperation(t, op.Name); !got.Spec.Paused {
		t.Fatal("spec.paused is not set after the pause")
	}
	// Pausing again changes nothing and is no error.
	before := getOperation(t, op.Name).ResourceVersion
	if _, err := operations(t, operator(t)).PauseOperation(context.Background(), &ichorv1.PauseOperationRequest{Name: op.Name}); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	if got := getOperation(t, op.Name); got.ResourceVersion != before {
		t.Errorf("a second pause wrote the object")
	}

	// The admin resumes over REST.
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/operations/"+op.Name+":resume", adminTok(t), "{}")
	if code != http.StatusOK {
		t.Fatalf("admin resume over REST: %d %v", code, body)
	}
	got := getOperation(t, op.Name)
	if got.Spec.Paused {
		t.Fatal("spec.paused is still set after the resume")
	}
	if _, ok := got.Annotations[ichorv1alpha1.ResumeAnnotation]; ok {
		t.Errorf("a resume without a failed step set the %s annotation", ichorv1alpha1.ResumeAnnotation)
	}

	// The operator pauses over REST too.
	code, body = rest(t, httpClient(), http.MethodPost, "/api/v1/operations/"+op.Name+":pause", operator(t), "{}")
	if code != http.StatusOK || !strings.Contains(toJSON(body), `"paused":true`) {
		t.Fatalf("operator pause over REST: %d %v", code, body)
	}
}

// An operation that paused on a failed step is resumed through the resume
// annotation, which re-runs the step.
func TestResumeFailedStep(t *testing.T) {
	op := createOperation(t, "ops-failed-step", testCluster, ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationPaused, Step: "UpgradingWorkers", FailedStep: "UpgradingWorkers",
		FailureReason: "w-1 did not come back after the reboot; check its console, then resume",
	})
	resp, err := operations(t, operator(t)).ResumeOperation(context.Background(), &ichorv1.ResumeOperationRequest{Name: op.Name})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if !strings.Contains(resp.GetOperation().GetFailureReason(), "did not come back") || resp.GetOperation().GetPhase() != "Paused" {
		t.Errorf("resume response: %v", resp.GetOperation())
	}
	first := getOperation(t, op.Name).Annotations[ichorv1alpha1.ResumeAnnotation]
	if first == "" {
		t.Fatalf("no %s annotation after resuming a failed step", ichorv1alpha1.ResumeAnnotation)
	}
	// A second resume asks again, with a new token.
	time.Sleep(10 * time.Millisecond)
	if _, err := operations(t, operator(t)).ResumeOperation(context.Background(), &ichorv1.ResumeOperationRequest{Name: op.Name}); err != nil {
		t.Fatalf("resume again: %v", err)
	}
	if second := getOperation(t, op.Name).Annotations[ichorv1alpha1.ResumeAnnotation]; second == "" || second == first {
		t.Errorf("the second resume's token %q, want a new one (first %q)", second, first)
	}
}

func TestPauseFinishedOperation(t *testing.T) {
	for _, phase := range []string{ichorv1alpha1.OperationSucceeded, ichorv1alpha1.OperationFailed} {
		name := "ops-finished-" + strings.ToLower(phase)
		op := createOperation(t, name, testCluster, ichorv1alpha1.TalosOperationStatus{Phase: phase})
		_, err := operations(t, operator(t)).PauseOperation(context.Background(), &ichorv1.PauseOperationRequest{Name: name})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "finished ("+phase+")") {
			t.Errorf("pause a %s operation: %v, want FailedPrecondition saying it finished", phase, err)
		}
		code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/operations/"+name+":resume", adminTok(t), "{}")
		if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "start a new operation") {
			t.Errorf("REST resume a %s operation: %d %v, want 400 saying to start a new one", phase, code, body)
		}
		if got := getOperation(t, name); got.ResourceVersion != op.ResourceVersion {
			t.Errorf("the %s operation changed", phase)
		}
	}
	// Another cluster's operation is not paused either.
	other := createOperation(t, "ops-pause-other", "another", ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationRunning})
	_, err := operations(t, adminTok(t)).PauseOperation(context.Background(), &ichorv1.PauseOperationRequest{Name: other.Name})
	if status.Code(err) != codes.NotFound {
		t.Errorf("pause another cluster's operation: %v, want NotFound", err)
	}
	if got := getOperation(t, other.Name); got.Spec.Paused {
		t.Error("another cluster's operation was paused")
	}
	_, err = operations(t, adminTok(t)).PauseOperation(context.Background(), &ichorv1.PauseOperationRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("pause without a name: %v, want InvalidArgument", err)
	}
}

// A resume with override sets the override annotation of the operation's
// type with the resume token, only on an operation that stopped at an
// overridable check, and only for a user holding the override verb (the
// webhook refuses the operator).
func TestResumeWithOverride(t *testing.T) {
	ctx := context.Background()
	plain := createOperation(t, "ops-override-plain", testCluster, ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationPaused, FailedStep: "reboot", FailureReason: "w-1 did not come back",
	})
	_, err := operations(t, adminTok(t)).ResumeOperation(ctx, &ichorv1.ResumeOperationRequest{Name: plain.Name, Override: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "did not stop at a check the override goes past") {
		t.Fatalf("resume with override of a step that is not overridable: %v", err)
	}
	if _, ok := getOperation(t, plain.Name).Annotations[ichorv1alpha1.ResumeAnnotation]; ok {
		t.Error("a refused resume with override set the resume annotation")
	}

	op := createOperation(t, "ops-override-drain", testCluster, ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationPaused, FailedStep: "drain", Overridable: true,
		FailureReason: "a cluster of three control planes and no worker is checked before each drain",
	})
	_, err = operations(t, operator(t)).ResumeOperation(ctx, &ichorv1.ResumeOperationRequest{Name: op.Name, Override: true})
	if err == nil || !strings.Contains(err.Error(), "override") {
		t.Fatalf("resume with override as an operator (no override verb): %v", err)
	}
	if got := getOperation(t, op.Name).Annotations; len(got) != 0 {
		t.Fatalf("a refused resume with override left annotations %v", got)
	}

	resp, err := operations(t, adminTok(t)).ResumeOperation(ctx, &ichorv1.ResumeOperationRequest{Name: op.Name, Override: true})
	if err != nil || !resp.GetOperation().GetOverridable() {
		t.Fatalf("resume with override as an administrator: %v %v", resp, err)
	}
	got := getOperation(t, op.Name).Annotations
	if tok := got[ichorv1alpha1.OverrideDrainCapacityAnnotation]; tok == "" || tok != got[ichorv1alpha1.ResumeAnnotation] || got[ichorv1alpha1.OverrideRemovedAPIsAnnotation] != "" {
		t.Errorf("annotations after the resume with override of a talos operation: %v", got)
	}
}
