package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// clusterOperations are the TalosOperations of the test cluster, read as the administrator.
func clusterOperations(t testing.TB) []ichorv1alpha1.TalosOperation {
	t.Helper()
	var list ichorv1alpha1.TalosOperationList
	if err := admin.List(context.Background(), &list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	var out []ichorv1alpha1.TalosOperation
	for _, op := range list.Items {
		if op.Spec.ClusterName == testCluster {
			out = append(out, op)
		}
	}
	return out
}

// deleteOperationWhenDone deletes an operation the test started when it ends:
// a pending one would block the later tests' operations.
func deleteOperationWhenDone(t testing.TB, name string) {
	t.Helper()
	t.Cleanup(func() {
		op := &ichorv1alpha1.TalosOperation{}
		op.Namespace, op.Name = testNS, name
		if err := admin.Delete(context.Background(), op); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete operation %s: %v", name, err)
		}
	})
}

// otherApprovedWorkers are the approved workers of the test cluster, other
// than except, that are not being deleted.
func otherApprovedWorkers(t testing.TB, except string) []string {
	t.Helper()
	var list ichorv1alpha1.TalosMachineList
	if err := admin.List(context.Background(), &list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list.Items {
		if m.Spec.ClusterName == testCluster && m.Name != except && m.Spec.Role == ichorv1alpha1.RoleWorker &&
			m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.DeletionTimestamp == nil {
			out = append(out, m.Name)
		}
	}
	return out
}

func refusalText(rs []*ichorv1.Refusal) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.GetField() + ": " + r.GetRule() + "; " + r.GetWayOut() + "\n")
	}
	return b.String()
}

// The node action dialog's API: the preview says what the action does and
// what refuses it for the signed-in user (the shared checks, then the verbs
// the action needs); the start needs the machine's name typed for a
// shutdown or a reset, runs the same checks on fresh reads, and creates the
// node operation as the user.
func TestNodeOperationAPI(t *testing.T) {
	ctx := context.Background()
	createMachine(t, "nodeop-w-1", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	removeWhenDone(t, "nodeop-w-1")
	opsBefore := len(clusterOperations(t))

	asOperator, asAdmin := operations(t, operator(t)), operations(t, adminTok(t))

	// A reboot: allowed for an operator, no name to type.
	p, err := asOperator.PreviewNodeOperation(ctx, &ichorv1.PreviewNodeOperationRequest{Machine: "nodeop-w-1", Action: "reboot"})
	if err != nil || !p.GetAllowed() || p.GetConfirmName() || len(p.GetRefusals()) != 0 ||
		!strings.Contains(strings.Join(p.GetSteps(), "\n"), "reboot the node (once)") {
		t.Fatalf("preview of a reboot: %v %v", p, err)
	}

	// The only worker of unschedulable control planes: a shutdown is refused
	// (overridable), and an operator does not hold override. The suite's
	// cluster is shared: every other test removes the workers it adds.
	if others := otherApprovedWorkers(t, "nodeop-w-1"); len(others) > 0 {
		t.Fatalf("approved workers %v were left by other tests: nodeop-w-1 must be the cluster's last worker here (clean them up with removeWhenDone)", others)
	}
	p, err = asOperator.PreviewNodeOperation(ctx, &ichorv1.PreviewNodeOperationRequest{Machine: "nodeop-w-1", Action: "shutdown"})
	if err != nil || p.GetAllowed() || !p.GetConfirmName() || !strings.Contains(refusalText(p.GetRefusals()), "is the last worker") ||
		!p.GetRefusals()[0].GetOverridable() {
		t.Fatalf("preview of the last worker's shutdown as an operator: %v %v", p, err)
	}
	_, err = asOperator.StartNodeOperation(ctx, &ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "shutdown", ConfirmMachineName: "nodeop-w-1"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is the last worker") {
		t.Fatalf("the last worker's shutdown as an operator: %v", err)
	}

	// An administrator holds override, reset-node and shutdown-node.
	p, err = asAdmin.PreviewNodeOperation(ctx, &ichorv1.PreviewNodeOperationRequest{Machine: "nodeop-w-1", Action: "reset", WipeMode: "system-disk"})
	if err != nil || !p.GetAllowed() || !p.GetConfirmName() || p.GetWipeMode() != "system-disk" ||
		!strings.Contains(strings.Join(p.GetSteps(), "\n"), "the whole system disk") {
		t.Fatalf("preview of a reset as an administrator: %v %v", p, err)
	}

	// With a second worker the last-worker rule is out of the way: an
	// operator lacks the verbs of a reset and of a shutdown.
	createMachine(t, "nodeop-w-2", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	removeWhenDone(t, "nodeop-w-2")
	p, err = asOperator.PreviewNodeOperation(ctx, &ichorv1.PreviewNodeOperationRequest{Machine: "nodeop-w-1", Action: "reset"})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "`reset-node` on `talosoperations`") {
		t.Fatalf("preview of a reset as an operator: %v %v", p, err)
	}
	_, err = asOperator.StartNodeOperation(ctx, &ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reset", ConfirmMachineName: "nodeop-w-1"})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "reset-node") {
		t.Fatalf("a reset as an operator: %v", err)
	}

	// Refused on the request's face; by RBAC; and a machine of another cluster or none.
	for _, tc := range []struct {
		req  *ichorv1.StartNodeOperationRequest
		tok  string
		code codes.Code
		says string
	}{
		{&ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reset"}, adminTok(t), codes.InvalidArgument, "confirm_machine_name is required"},
		{&ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reset", ConfirmMachineName: "nodeop-w-2"}, adminTok(t), codes.InvalidArgument, `type "nodeop-w-1" to confirm`},
		{&ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reset", WipeMode: "disk", ConfirmMachineName: "nodeop-w-1"}, adminTok(t), codes.InvalidArgument, "is not a wipe mode"},
		{&ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reboot", WipeMode: "all"}, adminTok(t), codes.InvalidArgument, "only for a reset"},
		{&ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "halt"}, adminTok(t), codes.InvalidArgument, "not a node action"},
		{&ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reboot"}, viewer(t), codes.PermissionDenied, "create"},
		{&ichorv1.StartNodeOperationRequest{Machine: "no-such-machine", Action: "reboot"}, adminTok(t), codes.NotFound, "no-such-machine"},
	} {
		_, err := operations(t, tc.tok).StartNodeOperation(ctx, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%v: %v, want %s saying %q", tc.req, err, tc.code, tc.says)
		}
	}
	if n := len(clusterOperations(t)); n != opsBefore {
		t.Fatalf("refused starts created %d operation(s)", n-opsBefore)
	}

	// The allowed neighbours: an operator's reboot, an administrator's reset
	// that wipes the system disk.
	resp, err := asOperator.StartNodeOperation(ctx, &ichorv1.StartNodeOperationRequest{Machine: "nodeop-w-1", Action: "reboot"})
	if err != nil {
		t.Fatalf("an operator's reboot: %v", err)
	}
	deleteOperationWhenDone(t, resp.GetOperation().GetName())
	if o := getOperation(t, resp.GetOperation().GetName()); o.Spec.Type != ichorv1alpha1.OperationNode || o.Spec.ClusterName != testCluster ||
		o.Spec.Node.MachineName != "nodeop-w-1" || o.Spec.Node.Action != ichorv1alpha1.NodeActionReboot || o.Spec.Node.WipeMode != "" {
		t.Fatalf("the reboot operation: %+v", o.Spec)
	}
	resp, err = asAdmin.StartNodeOperation(ctx, &ichorv1.StartNodeOperationRequest{
		Machine: "nodeop-w-2", Action: "reset", WipeMode: "system-disk", ConfirmMachineName: " nodeop-w-2 ",
	})
	if err != nil {
		t.Fatalf("an administrator's reset: %v", err)
	}
	deleteOperationWhenDone(t, resp.GetOperation().GetName())
	if o := getOperation(t, resp.GetOperation().GetName()); o.Spec.Node.MachineName != "nodeop-w-2" || o.Spec.Node.Action != ichorv1alpha1.NodeActionReset ||
		o.Spec.Node.WipeMode != "system-disk" {
		t.Fatalf("the reset operation: %+v", o.Spec.Node)
	}
}

// The shutdown dialog's API: the preview says what a shutdown does and what
// refuses it for the signed-in user; the start needs the cluster's name
// typed and the shutdown verb, and creates the operation as the user; while
// it has not completed, no other operation starts (a second shutdown, a node
// operation, a Talos upgrade), and the preview names it.
func TestClusterShutdownAPI(t *testing.T) {
	ctx := context.Background()
	asOperator, asAdmin := operations(t, operator(t)), operations(t, adminTok(t))
	createMachine(t, "down-w-1", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	removeWhenDone(t, "down-w-1")
	opsBefore := len(clusterOperations(t))

	p, err := asAdmin.PreviewClusterShutdown(ctx, &ichorv1.PreviewClusterShutdownRequest{})
	if err != nil || !p.GetAllowed() || p.GetCluster() != testCluster || p.GetControlPlanes() < 1 || p.GetWorkers() < 1 || p.GetUnfinished() != nil ||
		!strings.Contains(strings.Join(p.GetSteps(), "\n"), "the controller's own node last") {
		t.Fatalf("an administrator's preview: %v %v", p, err)
	}
	p, err = asOperator.PreviewClusterShutdown(ctx, &ichorv1.PreviewClusterShutdownRequest{})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "`shutdown` on `talosoperations`") {
		t.Fatalf("an operator's preview: %v %v", p, err)
	}

	for _, tc := range []struct {
		confirm, tok string
		code         codes.Code
		says         string
	}{
		{"", adminTok(t), codes.InvalidArgument, "confirm_cluster_name is required"},
		{"prd", adminTok(t), codes.InvalidArgument, `type "prod" to confirm`},
		{testCluster, operator(t), codes.PermissionDenied, "`shutdown` on `talosoperations`"},
		{testCluster, viewer(t), codes.PermissionDenied, "create"},
	} {
		_, err := operations(t, tc.tok).StartClusterShutdown(ctx, &ichorv1.StartClusterShutdownRequest{ConfirmClusterName: tc.confirm})
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("confirm %q: %v, want %s saying %q", tc.confirm, err, tc.code, tc.says)
		}
	}
	if n := len(clusterOperations(t)); n != opsBefore {
		t.Fatalf("refused starts created %d operation(s)", n-opsBefore)
	}

	resp, err := asAdmin.StartClusterShutdown(ctx, &ichorv1.StartClusterShutdownRequest{ConfirmClusterName: testCluster})
	if err != nil {
		t.Fatalf("an administrator's shutdown: %v", err)
	}
	name := resp.GetOperation().GetName()
	deleteOperationWhenDone(t, name)
	if o := getOperation(t, name); o.Spec.Type != ichorv1alpha1.OperationShutdown || o.Spec.ClusterName != testCluster {
		t.Fatalf("the shutdown operation: %+v", o.Spec)
	}

	// Not completed: the lock refuses everything else, naming it.
	want := "being shut down by operation " + name
	_, err = asAdmin.StartClusterShutdown(ctx, &ichorv1.StartClusterShutdownRequest{ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Errorf("a second shutdown: %v", err)
	}
	_, err = asAdmin.StartNodeOperation(ctx, &ichorv1.StartNodeOperationRequest{Machine: "down-w-1", Action: "reboot"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Errorf("a node operation: %v", err)
	}
	_, err = asAdmin.StartTalosUpgrade(ctx, &ichorv1.StartTalosUpgradeRequest{Version: "v1.14.2", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
		t.Errorf("a Talos upgrade: %v", err)
	}
	p, err = asAdmin.PreviewClusterShutdown(ctx, &ichorv1.PreviewClusterShutdownRequest{})
	if err != nil || p.GetAllowed() || p.GetUnfinished().GetName() != name || !strings.Contains(refusalText(p.GetRefusals()), want) {
		t.Fatalf("the preview while it runs: %v %v", p, err)
	}
	if n := len(clusterOperations(t)); n != opsBefore+1 {
		t.Fatalf("%d operations were created, want 1", n-opsBefore)
	}
	if v := clusterTalosVersion(t); v != "v1.14.1" {
		t.Fatalf("a refused upgrade wrote spec.talosVersion %s", v)
	}
}
