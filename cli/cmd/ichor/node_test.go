package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func approved(ns, name, role string) *ichorv1alpha1.TalosMachine {
	m := newMachine(ns, name, "prod")
	m.Spec.Role = role
	m.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "ada"}
	return m
}

// sent records that the controller sent m its configuration, so that its
// removal runs the whole sequence.
func sent(m *ichorv1alpha1.TalosMachine) *ichorv1alpha1.TalosMachine {
	now := metav1.Now()
	m.Status.ConfigSentAt = &now
	m.Status.NodeName = m.Name
	return m
}

func TestNodeRemoveDryRun(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "remove-dry-run")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))
	createMachine(t, sent(approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane)))
	createMachine(t, sent(approved(ns, "w-1", ichorv1alpha1.RoleWorker)))
	createMachine(t, sent(approved(ns, "w-2", ichorv1alpha1.RoleWorker)))
	before := map[string]string{}
	for _, n := range []string{"cp-1", "w-1", "w-2"} {
		before[n] = getMachine(t, ns, n).ResourceVersion
	}

	// No confirmation is asked (stdin is empty, no --yes) and nothing is written.
	r := mustSucceed(t, ichor(t, "node", "remove", "w-1", "-n", ns, "--dry-run"))
	for _, want := range []string{
		"This removes machine w-1 (worker) from cluster prod.",
		"Steps:\n  1. Evacuating:", "  2. Draining: Node w-1 is cordoned and drained", "  3. Resetting:", "  4. DeletingNode:", "  5. Done:",
		"  - workers: 2 → 1\n",
		"  - the node is drained (evictions respect PodDisruptionBudgets)",
		"  - Talos resets STATE and EPHEMERAL and powers off",
		"Nothing was changed (--dry-run).",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--dry-run of a worker: no %q in:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "LeavingEtcd") || strings.Contains(r.all(), "to confirm") {
		t.Fatalf("a worker does not leave etcd, and a dry run asks nothing:\n%s%s", r.stdout, r.stderr)
	}

	// The options are previewed too.
	r = mustSucceed(t, ichor(t, "node", "remove", "w-1", "-n", ns, "--dry-run", "--reboot", "--force"))
	for _, want := range []string{"NOT wiped", "2. Draining: skipped (force)", "no drain, no reset: the disks keep their data", "reboot has no effect with force"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--dry-run --reboot --force: no %q in:\n%s", want, r.stdout)
		}
	}

	// The last control plane: the plan and its numbers, then the refusal; the exit status says refused.
	r = mustFail(t, ichor(t, "node", "remove", "cp-1", "-n", ns, "--dry-run"), "last control plane", "nothing was changed")
	for _, want := range []string{
		"  - control planes: 1 → 0 (the cluster declares 1)",
		"  - etcd: 1 member → 0: etcd and the cluster's state (Kubernetes objects) are destroyed",
		"3. LeavingEtcd:", "Refused:\n  - spec.role:",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--dry-run of the last control plane: no %q in:\n%s", want, r.stdout)
		}
	}

	for n, rv := range before {
		m := getMachine(t, ns, n)
		if m.ResourceVersion != rv || m.DeletionTimestamp != nil || len(m.Annotations) != 0 || m.Spec.ForceRemove {
			t.Fatalf("--dry-run changed %s: %+v %v", n, m.ObjectMeta, m.Spec.ForceRemove)
		}
	}
}

func TestNodeRemove(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "remove")
	c := newCluster(ns, "prod")
	c.Spec.ControlPlane.Schedulable = new(true)
	must(t, k8s.Create(ctx, c))
	createMachine(t, approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane))
	w := sent(approved(ns, "w-1", ichorv1alpha1.RoleWorker))
	w.Finalizers = []string{ichorv1alpha1.MachineFinalizer}
	createMachine(t, w)

	// The last control plane is refused by the shared guard; nothing is written.
	mustFail(t, ichor(t, "node", "remove", "cp-1", "-n", ns, "--yes"), "last control plane", "nothing was changed")
	if _, ok := getMachine(t, ns, "cp-1").Annotations[ichorv1alpha1.AllowDeleteAnnotation]; ok {
		t.Fatal("a refused removal left the allow-delete annotation")
	}

	// A wrong confirmation changes nothing.
	r := mustFail(t, ichorWith(t, invocation{stdin: "w-2\n"}, "node", "remove", "w-1", "-n", ns), "not confirmed", "nothing was changed")
	for _, want := range []string{"Type \"w-1\" to confirm", "powers off", "Steps:\n  1. Evacuating:", "workers: 1 → 0; workloads then run on the control planes only"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("the confirmation must say what happens (the shared plan) and what to type; no %q in:\n%s", want, r.stderr)
		}
	}
	mustFail(t, ichorWith(t, invocation{stdin: ""}, "node", "remove", "w-1", "-n", ns), "--yes")
	if m := getMachine(t, ns, "w-1"); m.DeletionTimestamp != nil || len(m.Annotations) != 0 {
		t.Fatalf("an unconfirmed removal changed the machine: %+v", m.ObjectMeta)
	}

	// Confirmed, with --reboot --force --wait: the CLI marks and deletes, then
	// follows until the finalizer (the controller's, here the test's) is gone.
	cmd := exec.CommandContext(ctx, bin, "node", "remove", "w-1", "-n", ns, "--reboot", "--force", "--wait") //nolint:gosec // the binary the suite built
	cmd.Env = baseEnv(t)
	cmd.Stdin = strings.NewReader("w-1\n")
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testenv.Eventually(t, 0, "the machine to be deleted", testenv.Holds(func() bool {
		return getMachine(t, ns, "w-1").DeletionTimestamp != nil
	}))
	m := getMachine(t, ns, "w-1")
	if m.Annotations[ichorv1alpha1.AllowDeleteAnnotation] != "true" || m.Annotations[ichorv1alpha1.RemoveRebootAnnotation] != "true" || !m.Spec.ForceRemove {
		t.Fatalf("the removal must set allow-delete, remove-reboot and forceRemove: %v %v", m.Annotations, m.Spec.ForceRemove)
	}
	select {
	case err := <-done:
		t.Fatalf("--wait returned before the machine was gone: %v\n%s%s", err, out.String(), errOut.String())
	default:
	}
	m.Finalizers = nil
	must(t, k8s.Update(ctx, m))
	if err := <-done; err != nil {
		t.Fatalf("node remove --wait: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "machine w-1 removed") {
		t.Fatalf("--wait must report the removal:\n%s", out.String())
	}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-1"}, &ichorv1alpha1.TalosMachine{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the machine still exists: %v", err)
	}
	if !strings.Contains(errOut.String(), "NOT wiped") {
		t.Fatalf("--force must warn that the node is not wiped:\n%s", errOut.String())
	}
}

// nodeOperations lists the node operations of namespace ns.
func nodeOperations(t *testing.T, ns string) []ichorv1alpha1.TalosOperation {
	t.Helper()
	list := &ichorv1alpha1.TalosOperationList{}
	must(t, k8s.List(context.Background(), list, client.InNamespace(ns)))
	return list.Items
}

// TestNodeResetCommand: `ichor node reset` refuses the last control plane
// with the way out and creates nothing; a dry run writes nothing; a reset
// of a worker asks for its name typed and creates one node operation.
func TestNodeResetCommand(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "node-reset")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))
	createMachine(t, sent(approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane)))
	createMachine(t, sent(approved(ns, "w-1", ichorv1alpha1.RoleWorker)))
	createMachine(t, sent(approved(ns, "w-2", ichorv1alpha1.RoleWorker)))

	mustFail(t, ichorWith(t, invocation{stdin: "cp-1\n"}, "node", "reset", "cp-1", "-n", ns),
		"reset of cp-1 is refused; nothing was changed", "cp-1 is the last control plane", "`ichor node reboot cp-1`")
	r := mustSucceed(t, ichor(t, "node", "reset", "w-1", "-n", ns, "--dry-run"))
	for _, want := range []string{"This starts a node operation: reset machine w-1 (worker) of cluster prod", "wiping STATE and EPHEMERAL", "Nothing was changed (--dry-run)."} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--dry-run: no %q in:\n%s", want, r.stdout)
		}
	}
	mustFail(t, ichorWith(t, invocation{stdin: "w-2\n"}, "node", "reset", "w-1", "-n", ns), "not confirmed")
	if ops := nodeOperations(t, ns); len(ops) != 0 {
		t.Fatalf("a refused, dry or unconfirmed reset created %d operation(s)", len(ops))
	}

	r = mustSucceed(t, ichorWith(t, invocation{stdin: "w-1\n"}, "node", "reset", "w-1", "-n", ns))
	ops := nodeOperations(t, ns)
	if len(ops) != 1 || ops[0].Spec.Type != ichorv1alpha1.OperationNode || ops[0].Spec.Node == nil ||
		ops[0].Spec.Node.MachineName != "w-1" || ops[0].Spec.Node.Action != ichorv1alpha1.NodeActionReset || ops[0].Spec.ClusterName != "prod" {
		t.Fatalf("operations %+v", ops)
	}
	if !strings.Contains(r.stdout, "Started operation "+ops[0].Name) {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	// A reboot of the last control plane is allowed.
	mustSucceed(t, ichor(t, "node", "reboot", "cp-1", "-n", ns, "--dry-run"))

	// The wipe mode: checked before anything is read, written into the operation.
	mustFail(t, ichor(t, "node", "reset", "w-2", "-n", ns, "--wipe-mode", "everything", "--yes"),
		`--wipe-mode "everything" is not a wipe mode`, "nothing was changed")
	r = mustSucceed(t, ichor(t, "node", "reset", "w-2", "-n", ns, "--wipe-mode", "system-disk", "--dry-run"))
	if !strings.Contains(r.stdout, "wiping the whole system disk") || !strings.Contains(r.stdout, "install media") {
		t.Fatalf("--dry-run --wipe-mode system-disk:\n%s", r.stdout)
	}
	mustSucceed(t, ichorWith(t, invocation{stdin: "w-2\n"}, "node", "reset", "w-2", "-n", ns, "--wipe-mode", "system-disk"))
	var wiped []string
	for _, op := range nodeOperations(t, ns) {
		if op.Spec.Node.MachineName == "w-2" {
			wiped = append(wiped, op.Spec.Node.WipeMode)
		}
	}
	if len(wiped) != 1 || wiped[0] != "system-disk" {
		t.Fatalf("the reset of w-2 has wipe modes %v, want [system-disk]", wiped)
	}
}

// TestClusterShutdownCommand: `ichor cluster shutdown` says what it does, asks
// for the cluster's name typed, and creates one shutdown operation; while
// that one has not completed, a second one and any other operation of the
// cluster are refused by the shared guard, with the shutdown named.
func TestClusterShutdownCommand(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "cluster-shutdown")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))
	createMachine(t, sent(approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane)))
	createMachine(t, sent(approved(ns, "w-1", ichorv1alpha1.RoleWorker)))
	createMachine(t, sent(approved(ns, "w-2", ichorv1alpha1.RoleWorker)))

	r := mustSucceed(t, ichor(t, "cluster", "shutdown", "prod", "-n", ns, "--dry-run"))
	for _, want := range []string{"This shuts cluster prod down (3 machine(s))", "power every worker off at once",
		"the controller's own node last", "completes once every machine answers on a new boot", "Nothing was changed (--dry-run)."} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--dry-run: no %q in:\n%s", want, r.stdout)
		}
	}
	r = mustFail(t, ichorWith(t, invocation{stdin: "prd\n"}, "cluster", "shutdown", "prod", "-n", ns), "not confirmed", "nothing was changed")
	if !strings.Contains(r.stderr, `Type "prod" to confirm`) {
		t.Fatalf("the confirmation asks for the cluster's name:\n%s", r.stderr)
	}
	if ops := nodeOperations(t, ns); len(ops) != 0 {
		t.Fatalf("a dry or unconfirmed shutdown created %d operation(s)", len(ops))
	}

	r = mustSucceed(t, ichorWith(t, invocation{stdin: "prod\n"}, "cluster", "shutdown", "prod", "-n", ns))
	ops := nodeOperations(t, ns)
	if len(ops) != 1 || ops[0].Spec.Type != ichorv1alpha1.OperationShutdown || ops[0].Spec.ClusterName != "prod" ||
		!strings.Contains(r.stdout, "Started operation "+ops[0].Name) {
		t.Fatalf("operations %+v, stdout:\n%s", ops, r.stdout)
	}

	// Not completed: nothing else starts.
	for _, args := range [][]string{
		{"cluster", "shutdown", "prod"},
		{"node", "reboot", "w-1"},
	} {
		mustFail(t, ichor(t, append(args, "-n", ns, "--yes")...), "being shut down by operation "+ops[0].Name, "nothing was changed")
	}
	if n := len(nodeOperations(t, ns)); n != 1 {
		t.Fatalf("%d operations after the refusals", n)
	}
}
