package server_test

import (
	"context"
	"net/http"
	"net/url"
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

// rolloutLabel keeps these tests' machines apart from the other tests' ones:
// every plan here selects on it.
const rolloutLabel = "rollout-test"

// createRolloutMachine creates a configured (approved, addressed,
// provisioned) machine of the test cluster labelled rollout-test=group, with
// the conditions conds set True and the paths given, and waits for the cache.
func createRolloutMachine(t testing.TB, name, role, group string, conds []string, rebootPaths, driftPaths []string) {
	t.Helper()
	ctx := context.Background()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: map[string]string{rolloutLabel: group}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: testCluster, Role: role, Address: "10.5.0.50",
			Identity: ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Approval: ichorv1alpha1.MachineApproval{
				State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &metav1.Time{Time: time.Now().Truncate(time.Second)},
			},
		},
	}
	if err := admin.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The other tests count the cluster's approved machines: this one leaves none.
	t.Cleanup(func() { deleteMachine(t, name) })
	now := metav1.Now()
	m.Status.Stage = ichorv1alpha1.StageRunning
	m.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: now}}
	for _, c := range conds {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test", LastTransitionTime: now})
	}
	m.Status.RebootRequiredPaths = rebootPaths
	m.Status.DriftPaths = driftPaths
	if err := admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitCached(t, name, m.ResourceVersion)
}

// deleteMachine deletes a machine and waits until the backend's cache no longer has it.
func deleteMachine(t testing.TB, name string) {
	t.Helper()
	m := &ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}}
	if err := admin.Delete(context.Background(), m); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	c := machines(t, adminTok(t))
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.GetMachine(context.Background(), &ichorv1.GetMachineRequest{Name: name})
		if status.Code(err) == codes.NotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("machine %s is still there after its deletion: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// configOperations lists this cluster's config operations from the API server.
func configOperations(t testing.TB) []ichorv1alpha1.TalosOperation {
	t.Helper()
	list := &ichorv1alpha1.TalosOperationList{}
	if err := admin.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	var out []ichorv1alpha1.TalosOperation
	for _, o := range list.Items {
		if o.Spec.Type == ichorv1alpha1.OperationConfig {
			out = append(out, o)
		}
	}
	return out
}

// finishOperation marks an operation Succeeded, as the controller would.
func finishOperation(t testing.TB, name string) {
	t.Helper()
	op := getOperation(t, name)
	op.Status.Phase = ichorv1alpha1.OperationSucceeded
	if err := admin.Status().Update(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	waitOperationCached(t, name, op.ResourceVersion)
}

func TestConfigRolloutPreviewAndStart(t *testing.T) {
	ctx := context.Background()
	const sel = rolloutLabel + "=a"
	createRolloutMachine(t, "ro-w-1", ichorv1alpha1.RoleWorker, "a",
		[]string{ichorv1alpha1.RebootRequiredCondition}, []string{"machine.install.extraKernelArgs"}, nil)
	createRolloutMachine(t, "ro-cp-1", ichorv1alpha1.RoleControlPlane, "a",
		[]string{ichorv1alpha1.APIServerRestartRequiredCondition, ichorv1alpha1.DriftedCondition}, nil, []string{"machine.network.hostname"})
	createRolloutMachine(t, "ro-w-2", ichorv1alpha1.RoleWorker, "a", nil, nil, nil)

	// A viewer may see the plan: control planes first, reasons and paths.
	p, err := operations(t, viewer(t)).PreviewConfigRollout(ctx, &ichorv1.PreviewConfigRolloutRequest{Selector: sel})
	if err != nil {
		t.Fatalf("viewer preview: %v", err)
	}
	ms := p.GetMachines()
	if p.GetCluster() != testCluster || p.GetSelector() != sel || p.GetMatched() != 3 || len(ms) != 2 || p.GetUnfinished() != nil {
		t.Fatalf("preview: %v", p)
	}
	if ms[0].GetName() != "ro-cp-1" || strings.Join(ms[0].GetRollout(), ",") != "kube-apiserver-restart,drift" ||
		strings.Join(ms[0].GetDriftPaths(), ",") != "machine.network.hostname" || ms[0].GetRole() != ichorv1alpha1.RoleControlPlane {
		t.Errorf("first machine: %v, want the control plane with its restart and drift", ms[0])
	}
	if ms[1].GetName() != "ro-w-1" || strings.Join(ms[1].GetRollout(), ",") != "reboot" ||
		strings.Join(ms[1].GetRebootRequiredPaths(), ",") != "machine.install.extraKernelArgs" {
		t.Errorf("second machine: %v, want the worker's reboot with its path", ms[1])
	}

	// The same plan over REST.
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/operations:previewConfigRollout?selector="+url.QueryEscape(sel), viewer(t), "")
	if js := toJSON(body); code != http.StatusOK || !strings.Contains(js, `"rebootRequiredPaths":["machine.install.extraKernelArgs"]`) ||
		strings.Index(js, `"ro-cp-1"`) > strings.Index(js, `"ro-w-1"`) {
		t.Fatalf("REST preview: %d %s", code, js)
	}

	// A viewer may not start it: nothing is created.
	before := len(configOperations(t))
	_, err = operations(t, viewer(t)).StartConfigRollout(ctx, &ichorv1.StartConfigRolloutRequest{Selector: sel, ConfirmClusterName: testCluster})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "ichor:vera") {
		t.Fatalf("viewer start: %v, want PermissionDenied naming the user", err)
	}
	// A wrong or missing confirmation, or a bad selector, is refused first.
	for _, tc := range []struct{ sel, confirm, want string }{
		{sel, "", "confirm_cluster_name is required"},
		{sel, "staging", "\"staging\" is not the cluster's name"},
		{"zone in (a", testCluster, "kubectl -l"},
	} {
		_, err = operations(t, operator(t)).StartConfigRollout(ctx, &ichorv1.StartConfigRolloutRequest{Selector: tc.sel, ConfirmClusterName: tc.confirm})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was created") {
			t.Errorf("start with selector %q, confirmation %q: %v, want InvalidArgument saying %s", tc.sel, tc.confirm, err, tc.want)
		}
	}
	// A selector that matches nothing, or machines with nothing waiting.
	_, err = operations(t, operator(t)).StartConfigRollout(ctx, &ichorv1.StartConfigRolloutRequest{Selector: rolloutLabel + "=none", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "matches no TalosMachine") {
		t.Errorf("start on a selector that matches nothing: %v, want FailedPrecondition", err)
	}
	createRolloutMachine(t, "ro-idle", ichorv1alpha1.RoleWorker, "idle", nil, nil, nil)
	_, err = operations(t, operator(t)).StartConfigRollout(ctx, &ichorv1.StartConfigRolloutRequest{Selector: rolloutLabel + "=idle", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "nothing needs rolling out") {
		t.Errorf("start with nothing waiting: %v, want FailedPrecondition saying nothing needs rolling out", err)
	}
	if n := len(configOperations(t)); n != before {
		t.Fatalf("%d config operation(s) created by refused starts", n-before)
	}

	// The operator starts it (the typed name may carry spaces around it).
	resp, err := operations(t, operator(t)).StartConfigRollout(ctx, &ichorv1.StartConfigRolloutRequest{Selector: sel, ConfirmClusterName: " " + testCluster + "\n"})
	if err != nil {
		t.Fatalf("operator start: %v", err)
	}
	name := resp.GetOperation().GetName()
	if !strings.HasPrefix(name, "config-") || resp.GetOperation().GetType() != ichorv1alpha1.OperationConfig ||
		resp.GetOperation().GetPhase() != ichorv1alpha1.OperationPending || len(resp.GetMachines()) != 2 {
		t.Fatalf("start response: %v", resp)
	}
	op := getOperation(t, name)
	if op.Spec.ClusterName != testCluster || op.Spec.Type != ichorv1alpha1.OperationConfig || op.Spec.MachineSelector == nil ||
		metav1.FormatLabelSelector(op.Spec.MachineSelector) != sel || op.Spec.Paused {
		t.Fatalf("created operation's spec: %+v", op.Spec)
	}

	// A second one is refused while the first is unfinished, at once (the
	// check reads the API server, not the cache), and the preview names it.
	_, err = operations(t, adminTok(t)).StartConfigRollout(ctx, &ichorv1.StartConfigRolloutRequest{ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "has not finished") {
		t.Fatalf("second start: %v, want FailedPrecondition naming %s", err, name)
	}
	code, body = rest(t, httpClient(), http.MethodPost, "/api/v1/operations:startConfigRollout", adminTok(t),
		`{"selector":"`+sel+`","confirmClusterName":"`+testCluster+`"}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, name) {
		t.Errorf("REST second start: %d %v, want 400 naming the unfinished operation", code, body)
	}
	if n := len(configOperations(t)); n != before+1 {
		t.Fatalf("%d config operations created, want 1", n-before)
	}
	waitOperationCached(t, name, op.ResourceVersion)
	p, err = operations(t, viewer(t)).PreviewConfigRollout(ctx, &ichorv1.PreviewConfigRolloutRequest{Selector: sel})
	if err != nil || p.GetUnfinished().GetName() != name {
		t.Fatalf("preview with an unfinished rollout: %v %v, want it named", p, err)
	}

	// Once it finished, the admin starts the next one over REST.
	finishOperation(t, name)
	code, body = rest(t, httpClient(), http.MethodPost, "/api/v1/operations:startConfigRollout", adminTok(t),
		`{"selector":"`+sel+`","confirmClusterName":"`+testCluster+`"}`)
	js := toJSON(body)
	if code != http.StatusOK || !strings.Contains(js, `"type":"config"`) || !strings.Contains(js, `"name":"config-`) {
		t.Fatalf("REST start after the first finished: %d %s", code, js)
	}
	ops := configOperations(t)
	if len(ops) != before+2 {
		t.Fatalf("%d config operations created, want 2", len(ops)-before)
	}
	for i := range ops {
		if err := admin.Delete(ctx, &ops[i]); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	}
}
