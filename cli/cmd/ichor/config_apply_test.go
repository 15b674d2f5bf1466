package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// configuredMachine is an approved, provisioned machine of cluster prod
// whose node runs the rendered configuration.
func configuredMachine(ns, name, role string) *ichorv1alpha1.TalosMachine {
	m := approved(ns, name, role)
	m.Status.Stage = ichorv1alpha1.StageRunning
	m.Status.Conditions = []metav1.Condition{
		cond(ichorv1alpha1.ProvisionedCondition, metav1.ConditionTrue, "Provisioned", "installed and joined"),
		cond(ichorv1alpha1.RebootRequiredCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, "no change waits for a reboot"),
		cond(ichorv1alpha1.DriftedCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, "the node runs the rendered configuration"),
	}
	return m
}

// waitingReboot is what the machine reconciler writes for a change that waits for a reboot.
func waitingReboot(m *ichorv1alpha1.TalosMachine, paths ...string) *ichorv1alpha1.TalosMachine {
	m.Status.RebootRequiredPaths = paths
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == ichorv1alpha1.RebootRequiredCondition {
			m.Status.Conditions[i] = cond(ichorv1alpha1.RebootRequiredCondition, metav1.ConditionTrue, ichorv1alpha1.WaitingForRolloutReason,
				"1 change(s) wait for a config operation")
		}
	}
	return m
}

func listOperations(t *testing.T, ns string) []ichorv1alpha1.TalosOperation {
	t.Helper()
	list := &ichorv1alpha1.TalosOperationList{}
	must(t, k8s.List(context.Background(), list, client.InNamespace(ns)))
	return list.Items
}

func noOperation(t *testing.T, ns, after string) {
	t.Helper()
	if ops := listOperations(t, ns); len(ops) != 0 {
		t.Fatalf("%s created %d operation(s): %s", after, len(ops), ops[0].Name)
	}
}

func TestConfigApplyNothingWaiting(t *testing.T) {
	ns := namespace(t, "apply-nothing")
	must(t, k8s.Create(context.Background(), newCluster(ns, "prod")))
	createMachine(t, configuredMachine(ns, "cp-1", ichorv1alpha1.RoleControlPlane))
	// Not provisioned: the operation would not take it, so it does not count.
	createMachine(t, waitingReboot(approved(ns, "w-new", ichorv1alpha1.RoleWorker), "machine.install.extraKernelArgs"))

	r := mustSucceed(t, ichor(t, "config", "apply", "-n", ns))
	if !strings.Contains(r.stdout, "Nothing needs rolling out: no machine of cluster prod waits") || strings.Contains(r.all(), "to confirm") {
		t.Fatalf("with nothing waiting, apply must say so and ask nothing:\n%s%s", r.stdout, r.stderr)
	}
	noOperation(t, ns, "apply with nothing waiting")

	js := mustSucceed(t, ichor(t, "config", "apply", "-n", ns, "-o", "json"))
	var p struct {
		Cluster  string           `json:"cluster"`
		Machines []map[string]any `json:"machines"`
	}
	must(t, json.Unmarshal([]byte(js.stdout), &p))
	if p.Cluster != "prod" || p.Machines == nil || len(p.Machines) != 0 {
		t.Fatalf("-o json must print the empty plan: %s", js.stdout)
	}
	noOperation(t, ns, "apply -o json with nothing waiting")
}

func TestConfigApply(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "apply")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))
	must(t, k8s.Create(ctx, newCluster(ns, "other")))
	cp := waitingReboot(configuredMachine(ns, "cp-1", ichorv1alpha1.RoleControlPlane),
		"machine.install.extraKernelArgs", "machine.kernel.modules")
	cp.Labels = map[string]string{"zone": "a"}
	createMachine(t, cp)
	createMachine(t, configuredMachine(ns, "w-1", ichorv1alpha1.RoleWorker))
	api := configuredMachine(ns, "cp-2", ichorv1alpha1.RoleControlPlane)
	api.Status.RebootRequiredPaths = []string{"cluster.apiServer.extraArgs"}
	api.Status.Conditions = append(api.Status.Conditions, cond(ichorv1alpha1.APIServerRestartRequiredCondition, metav1.ConditionTrue,
		ichorv1alpha1.WaitingForRolloutReason, "1 change(s) wait for a config operation"))
	createMachine(t, api)
	drifted := configuredMachine(ns, "w-2", ichorv1alpha1.RoleWorker)
	drifted.Annotations = map[string]string{ichorv1alpha1.HoldUpgradeAnnotation: ""}
	drifted.Status.DriftPaths = []string{"machine.network.hostname"}
	drifted.Status.Conditions[2] = cond(ichorv1alpha1.DriftedCondition, metav1.ConditionTrue, ichorv1alpha1.DriftDetectedReason, "1 path differs")
	createMachine(t, drifted)

	// Bad input: refused before anything is written.
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "-y"), "has 2 TalosClusters", "--cluster")
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "-y", "--cluster", "nope"), `TalosCluster "nope" not found`)
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "-y", "--cluster", "prod", "--selector", "zone in a"), `--selector "zone in a" is not a label selector`)
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "-y", "--cluster", "prod", "--selector", "zone=b"), "matches no TalosMachine of cluster prod")
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "-y", "--cluster", "prod", "--machine", "cp-9"), `TalosMachine "cp-9" not found`, "cp-1, cp-2, w-1, w-2")
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "-y", "--cluster", "prod", "--machine", "cp-1"),
		"--machine cannot be honoured", "no label naming them", "kubectl label talosmachine -n apply cp-1 rollout=now", "nothing was created")
	mustFail(t, ichor(t, "config", "apply", "cp-1", "-n", ns, "-y", "--cluster", "prod"), "takes no arguments")
	noOperation(t, ns, "refused applies")

	// The plan names the machine, what it waits for and the paths; a wrong
	// answer, or none, creates nothing.
	r := mustFail(t, ichorWith(t, invocation{stdin: "yes\n"}, "config", "apply", "-n", ns, "--cluster", "prod"), `not confirmed: the answer was not "prod"`)
	for _, want := range []string{
		"Config rollout of cluster prod: 3 machine(s), one at a time, control planes first.",
		"cp-1 (controlplane)\n  RebootRequired: cordon, drain, staged apply, reboot, uncordon\n" +
			"  waiting changes: machine.install.extraKernelArgs, machine.kernel.modules\n" +
			"cp-2 (controlplane)\n  APIServerRestartRequired: apply without reboot, the kube-apiserver restarts (no drain)\n" +
			"  waiting changes: cluster.apiServer.extraArgs\n" +
			"w-2 (worker)\n  Drifted: the node differs from the render and gets it again\n" +
			"  drifted paths:   machine.network.hostname\n" +
			"  held: it carries ichor.maesh.dev/hold-upgrade, so the operation skips it until the annotation is removed\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("the plan must contain %q:\n%s", want, r.stdout)
		}
	}
	t.Logf("the plan:\n%s%s", r.stdout, r.stderr)
	if strings.Contains(r.stdout, "w-1 ") {
		t.Fatalf("a machine with nothing waiting is not in the plan:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, `Type "prod" to confirm`) {
		t.Fatalf("the confirmation asks for the cluster name:\n%s", r.stderr)
	}
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "--cluster", "prod"), "not confirmed: no answer")
	noOperation(t, ns, "unconfirmed applies")

	// --yes creates exactly one config operation.
	r = mustSucceed(t, ichor(t, "config", "apply", "-n", ns, "--cluster", "prod", "-y"))
	ops := listOperations(t, ns)
	if len(ops) != 1 {
		t.Fatalf("apply -y must create one operation, got %d", len(ops))
	}
	op := ops[0]
	if !strings.HasPrefix(op.Name, "config-") || op.GenerateName != "config-" || op.Spec.Type != ichorv1alpha1.OperationConfig ||
		op.Spec.ClusterName != "prod" || op.Spec.MachineSelector != nil || op.Spec.Paused {
		t.Fatalf("the operation's spec: name %s generateName %s %+v", op.Name, op.GenerateName, op.Spec)
	}
	if !strings.Contains(r.stdout, "Started operation "+op.Name) || !strings.Contains(r.stdout, "ichor operation get "+op.Name+" --watch") {
		t.Fatalf("apply must name the operation and how to follow it:\n%s", r.stdout)
	}

	// A second rollout while the first has not finished is refused.
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "--cluster", "prod", "-y"), "config operation "+op.Name+" of cluster prod has not finished",
		"ichor operation get "+op.Name+" --watch", "nothing was created")
	setOperationStatus(t, ns, op.Name, func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationPaused })
	mustFail(t, ichor(t, "config", "apply", "-n", ns, "--cluster", "prod", "-y"), "ichor operation resume "+op.Name)
	if n := len(listOperations(t, ns)); n != 1 {
		t.Fatalf("a refused second rollout created an operation: %d", n)
	}

	// Once it finished, a rollout of a selection, confirmed by typing the name.
	setOperationStatus(t, ns, op.Name, func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationSucceeded })
	r = mustSucceed(t, ichorWith(t, invocation{stdin: "prod\n"}, "config", "apply", "-n", ns, "--cluster", "prod", "--selector", "zone=a"))
	if !strings.Contains(r.stdout, "Config rollout of cluster prod matching zone=a: 1 machine(s)") {
		t.Fatalf("the plan names the selector:\n%s", r.stdout)
	}
	var sel *ichorv1alpha1.TalosOperation
	for i, o := range listOperations(t, ns) {
		if o.Name != op.Name {
			sel = &listOperations(t, ns)[i]
		}
	}
	if sel == nil || sel.Spec.MachineSelector == nil || sel.Spec.MachineSelector.MatchLabels["zone"] != "a" || len(listOperations(t, ns)) != 2 {
		t.Fatalf("apply --selector must create one operation with that machineSelector: %+v", sel)
	}
}

// TestConfigApplyWait: --wait follows the operation; a pause on a failure
// ends it non-zero with the failure reason, a success with zero.
func TestConfigApplyWait(t *testing.T) {
	ns := namespace(t, "apply-wait")
	must(t, k8s.Create(context.Background(), newCluster(ns, "prod")))
	createMachine(t, waitingReboot(configuredMachine(ns, "w-1", ichorv1alpha1.RoleWorker), "machine.install.extraKernelArgs"))

	created := func() string {
		var name string
		testenv.Eventually(t, 0, "the operation", testenv.Holds(func() bool {
			ops := listOperations(t, ns)
			for _, o := range ops {
				if !completedPhase(o.Status.Phase) && o.Status.FailedStep == "" {
					name = o.Name
				}
			}
			return name != ""
		}))
		return name
	}

	f := startFollow(t, "", "config", "apply", "-n", ns, "-y", "--wait")
	name := created()
	setOperationStatus(t, ns, name, func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.Step = ichorv1alpha1.OperationRunning, "rollout"
		st.Machines = []ichorv1alpha1.MachineProgress{{Name: "w-1", Role: ichorv1alpha1.RoleWorker, Phase: ichorv1alpha1.MachineInProgress, Step: "drain"}}
	})
	testenv.Eventually(t, 0, "the progress line", testenv.Holds(func() bool {
		for _, l := range strings.Split(f.out.String(), "\n") {
			if strings.HasPrefix(l, "Running ") && strings.Contains(l, " w-1 ") && strings.Contains(l, " drain") {
				return true
			}
		}
		return false
	}))
	setOperationStatus(t, ns, name, func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.FailedStep = ichorv1alpha1.OperationPaused, "drain"
		st.FailureReason = "step drain of machine w-1 failed: PodDisruptionBudget db allows no disruption"
		st.Machines[0].Phase = ichorv1alpha1.MachineFailed
	})
	if err := f.wait(t); err == nil {
		t.Fatalf("--wait must exit non-zero when the operation pauses on a failure:\n%s", f.out.String())
	}
	t.Logf("--wait printed:\n%s%s", f.out.String(), f.errOut.String())
	if !strings.Contains(f.errOut.String(), "PodDisruptionBudget db allows no disruption") {
		t.Fatalf("--wait must print the failure reason; stderr:\n%s", f.errOut.String())
	}

	// The failed one ends; a new rollout succeeds.
	setOperationStatus(t, ns, name, func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationFailed })
	f = startFollow(t, "", "config", "apply", "-n", ns, "-y", "--wait")
	name = created()
	setOperationStatus(t, ns, name, func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase = ichorv1alpha1.OperationSucceeded
		st.Conditions = []metav1.Condition{cond(ichorv1alpha1.ReadyCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason,
			"rolled the rendered configuration out to 1 machine(s); 0 already ran it")}
	})
	if err := f.wait(t); err != nil {
		t.Fatalf("--wait of a successful operation must exit zero: %v\n%s", err, f.errOut.String())
	}
	if !strings.Contains(f.out.String(), "Operation "+name+" succeeded: rolled the rendered configuration out to 1 machine(s)") {
		t.Fatalf("--wait must say the operation succeeded:\n%s", f.out.String())
	}
}

func completedPhase(p string) bool {
	return p == ichorv1alpha1.OperationSucceeded || p == ichorv1alpha1.OperationFailed
}
