package operation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestOperation_LockContention: two operations contend for the cluster
// lock; the loser waits, Pending, with ClusterLockHeld naming the holder,
// and runs once the holder has finished.
func TestOperation_LockContention(t *testing.T) {
	ctx := context.Background()

	// a takes the lock and, paused by a person, keeps it.
	testenv.Must(t, k8s.Create(ctx, configOp("contend-a", func(op *ichorv1alpha1.TalosOperation) { op.Spec.Paused = true })))

	testenv.Eventually(t, waitTimeout, "contend-a holds the lock, paused", func() error {
		op := getOp(t, "contend-a")
		if !apimeta.IsStatusConditionTrue(op.Status.Conditions, ichorv1alpha1.LockAcquiredCondition) || op.Status.Phase != ichorv1alpha1.OperationPaused {
			return fmt.Errorf("phase %q, conditions %+v", op.Status.Phase, op.Status.Conditions)
		}

		return nil
	})

	holderA := lock.OperationIdentity(ns, "contend-a")
	if h := lockHolder(t); h != holderA {
		t.Fatalf("lock holder %q, want %q", h, holderA)
	}

	testenv.Must(t, k8s.Create(ctx, configOp("contend-b")))

	testenv.Eventually(t, waitTimeout, "contend-b waits naming the holder", func() error {
		op := getOp(t, "contend-b")

		c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.LockAcquiredCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ichorv1alpha1.ClusterLockHeldReason || !strings.Contains(c.Message, holderA) {
			return fmt.Errorf("LockAcquired %+v", c)
		}

		if op.Status.Phase != ichorv1alpha1.OperationPending || op.Status.StartedAt != nil || len(op.Status.Machines) > 0 {
			return fmt.Errorf("the waiting operation started: phase %q, machines %+v", op.Status.Phase, op.Status.Machines)
		}

		return hasEvent(t, "contend-b", ichorv1alpha1.ClusterLockHeldReason, holderA)
	})

	// a goes on, finishes and gives the lock back; b takes it and finishes.
	updateOp(t, "contend-a", func(op *ichorv1alpha1.TalosOperation) { op.Spec.Paused = false })

	a := waitPhase(t, "contend-a", ichorv1alpha1.OperationSucceeded)
	b := waitPhase(t, "contend-b", ichorv1alpha1.OperationSucceeded)

	if !b.Status.StartedAt.After(a.Status.CompletedAt.Time) && !b.Status.StartedAt.Equal(a.Status.CompletedAt) {
		t.Errorf("b started at %s, before a completed at %s", b.Status.StartedAt, a.Status.CompletedAt)
	}

	for _, op := range []*ichorv1alpha1.TalosOperation{a, b} {
		if len(op.Status.Machines) != len(machineNames) {
			t.Errorf("%s covered %d machines, want %d: %+v", op.Name, len(op.Status.Machines), len(machineNames), op.Status.Machines)
		}

		for _, p := range op.Status.Machines {
			if p.Phase != ichorv1alpha1.MachineSkipped {
				t.Errorf("%s: machine %s is %s (%s), want Skipped: it runs the render", op.Name, p.Name, p.Phase, p.Message)
			}
		}
	}

	if cp := progress(a, "cp-1"); a.Status.Machines[0].Name != "cp-1" {
		t.Errorf("the control plane is not first: %+v (%+v)", a.Status.Machines, cp)
	}

	testenv.Eventually(t, waitTimeout, "the lock is released", func() error {
		if h := lockHolder(t); h != "" {
			return fmt.Errorf("held by %s", h)
		}

		return nil
	})
}

// TestOperation_UnsupportedTypeRefused: an operation this release does not
// run (here a key rotation of some control planes only, which the webhook
// refuses at admission) fails at once with a message saying so, and never
// takes the lock.
func TestOperation_UnsupportedTypeRefused(t *testing.T) {
	ctx := context.Background()

	op := configOp("reboot-w2", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.Type = ichorv1alpha1.OperationKeyRotation
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "w-2"}}
	})
	before := reboots(t, "w-2")
	testenv.Must(t, k8s.Create(ctx, op))

	got := waitPhase(t, "reboot-w2", ichorv1alpha1.OperationFailed)

	c := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition)
	if c == nil || !strings.Contains(c.Message, "does not run this operation (spec.machineSelector") || !strings.Contains(c.Message, "every control plane") ||
		!strings.Contains(c.Message, "delete this operation") {
		t.Errorf("Ready %+v does not say the operation is not run, why and what to do", c)
	}

	if apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.LockAcquiredCondition) != nil || got.Status.StartedAt != nil {
		t.Errorf("the refused operation took the lock: %+v", got.Status)
	}

	if n := reboots(t, "w-2"); n != before {
		t.Errorf("w-2 got %d Reboot calls", n-before)
	}
}

// TestOperation_APIServerRestartRollout: a change that restarts the
// kube-apiserver waits on the control plane until a config operation applies
// it, with no drain and no reboot, and waits for /readyz after the restart.
func TestOperation_APIServerRestartRollout(t *testing.T) {
	ctx := context.Background()

	p := &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apiserver-env"},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: clusterName, Layer: ichorv1alpha1.LayerRole,
			Target: ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane},
			Documents: []mirror.PatchDocument{{KubeAPIServerConfig: &mirror.KubeAPIServerConfig{
				Env: map[string]string{"ICHOR_ROLLOUT": "1"},
			}}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, p))

	testenv.Eventually(t, waitTimeout, "cp-1 waits for a rollout", func() error {
		if !apimeta.IsStatusConditionTrue(getMachine(t, "cp-1").Status.Conditions, ichorv1alpha1.APIServerRestartRequiredCondition) {
			return errors.New("APIServerRestartRequired is not True")
		}

		return nil
	})

	if nodeHas(t, "cp-1", "ICHOR_ROLLOUT") {
		t.Fatal("the machine reconciler applied a kube-apiserver restart to the control plane")
	}

	before := reboots(t, "cp-1")

	testenv.Must(t, k8s.Create(ctx, configOp("apiserver-rollout")))

	op := waitPhase(t, "apiserver-rollout", ichorv1alpha1.OperationSucceeded)

	if cp := progress(op, "cp-1"); cp.Phase != ichorv1alpha1.MachineDone || !strings.Contains(cp.Message, "restarted and answers /readyz") {
		t.Errorf("cp-1: %+v", cp)
	}

	for _, w := range []string{"w-1", "w-2"} {
		if wp := progress(op, w); wp.Phase != ichorv1alpha1.MachineSkipped {
			t.Errorf("%s: %+v, want Skipped (the patch is for control planes)", w, wp)
		}
	}

	if !nodeHas(t, "cp-1", "ICHOR_ROLLOUT") {
		t.Error("cp-1 does not run the change")
	}

	if n := reboots(t, "cp-1"); n != before {
		t.Errorf("cp-1 was rebooted for a kube-apiserver restart: %d Reboot calls, then %d", before, n)
	}

	if err := hasEvent(t, "apiserver-rollout", ichorv1alpha1.AppliedReason, "NO_REBOOT"); err != nil {
		t.Error(err)
	}

	if err := hasEvent(t, "apiserver-rollout", "Drained", ""); err == nil {
		t.Error("the control plane was drained for a kube-apiserver restart")
	}

	// The rollout asked the machine reconciler to look: cp-1 is in sync at once.
	testenv.Eventually(t, waitTimeout, "cp-1 in sync", func() error {
		m := getMachine(t, "cp-1")
		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.APIServerRestartRequiredCondition) || !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			return fmt.Errorf("conditions %+v", m.Status.Conditions)
		}

		return nil
	})

	// The workload API answers after the rollout.
	if _, err := workloadClient(t).Discovery().ServerVersion(); err != nil {
		t.Errorf("the cluster's API does not answer after the rollout: %v", err)
	}
}

// TestOperation_RebootRolloutDrainsAndFailurePauses: a reboot-requiring
// difference is rolled out with cordon and drain, a STAGED apply and a
// reboot, and the Node is uncordoned afterwards. A machine that cannot be
// reached pauses the operation on that step with failureReason; the lock is
// then taken over by other work, and the resume annotation re-runs the step.
func TestOperation_RebootRolloutDrainsAndFailurePauses(t *testing.T) {
	ctx := context.Background()

	// The cluster's API answers (an earlier test may have restarted it).
	testenv.Eventually(t, waitTimeout, "the cluster's API answers", func() error {
		_, err := workloadClient(t).CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})

		return err
	})

	// A reboot-requiring difference on w-1 (machine.env of the legacy
	// document; no patchable kind needs a reboot under the v1.14 contract).
	changeBehindIchor(t, "w-1", "machine:\n  env:\n    ICHOR_REBOOT: \"1\"\n")

	if !nodeHas(t, "w-1", "ICHOR_REBOOT") {
		t.Fatal("the injected difference is not on the node")
	}

	// w-2 cannot be reached: the operation pauses on it.
	testenv.Must(t, emu(t, "w-2").PowerOff())

	before := reboots(t, "w-1")

	testenv.Must(t, k8s.Create(ctx, configOp("reboot-rollout", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"w-1", "w-2"},
		}}}
	})))

	op := waitPhase(t, "reboot-rollout", ichorv1alpha1.OperationPaused)

	if op.Status.FailedStep != "plan" || !strings.Contains(op.Status.FailureReason, "w-2") || !strings.Contains(op.Status.FailureReason, "resume") {
		t.Errorf("failedStep %q, failureReason %q", op.Status.FailedStep, op.Status.FailureReason)
	}

	w1 := progress(op, "w-1")
	if w1.Phase != ichorv1alpha1.MachineDone || !strings.Contains(w1.Message, "rebooted") {
		t.Errorf("w-1: %+v", w1)
	}

	if n := reboots(t, "w-1"); n != before+1 {
		t.Errorf("w-1 got %d Reboot calls, want %d", n, before+1)
	}

	if nodeHas(t, "w-1", "ICHOR_REBOOT") {
		t.Error("w-1 still runs the difference after its reboot")
	}

	if err := hasEvent(t, "reboot-rollout", "Drained", "w-1"); err != nil {
		t.Error(err)
	}

	if err := hasEvent(t, "reboot-rollout", ichorv1alpha1.AppliedReason, "STAGED"); err != nil {
		t.Error(err)
	}

	node, err := workloadClient(t).CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
	testenv.Must(t, err)

	if node.Spec.Unschedulable {
		t.Error("Node w-1 is still cordoned after the rollout")
	}

	if p := progress(op, "w-2"); p.Phase != ichorv1alpha1.MachineFailed {
		t.Errorf("w-2: %+v", p)
	} else if w1.CompletedAt == nil || p.StartedAt == nil || p.StartedAt.Before(w1.CompletedAt) {
		t.Errorf("w-2 started (%v) before w-1 finished (%v): one worker at a time without maxUnavailable", p.StartedAt, w1.CompletedAt)
	}

	// Paused on a failure, the operation no longer holds the cluster: other
	// work takes the lock over.
	testenv.Must(t, k8s.Create(ctx, configOp("takeover", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cp-1"}}
	})))
	waitPhase(t, "takeover", ichorv1alpha1.OperationSucceeded)

	testenv.Eventually(t, waitTimeout, "the takeover is recorded", func() error {
		return hasEvent(t, "takeover", "LockTakenOver", lock.OperationIdentity(ns, "reboot-rollout"))
	})

	// Bring w-2 back and resume: the failed step runs again.
	testenv.Must(t, emu(t, "w-2").PowerOn())
	updateOp(t, "reboot-rollout", func(op *ichorv1alpha1.TalosOperation) {
		if op.Annotations == nil {
			op.Annotations = map[string]string{}
		}

		op.Annotations[ichorv1alpha1.ResumeAnnotation] = "1"
	})

	op = waitPhase(t, "reboot-rollout", ichorv1alpha1.OperationSucceeded)

	if p := progress(op, "w-2"); p.Phase != ichorv1alpha1.MachineSkipped {
		t.Errorf("w-2 after resume: %+v", p)
	}

	if op.Status.LastHandledResume != "1" || op.Status.FailureReason != "" || op.Status.FailedStep != "" {
		t.Errorf("resume not recorded: %+v", op.Status)
	}
}

// changeBehindIchor applies a patch to the node's running configuration over its Talos API, as a person would.
func changeBehindIchor(t *testing.T, name, patch string) {
	t.Helper()

	testworld.ChangeBehindIchor(t, world, theBun, name, patch)
}

// nodeHas reports whether the node's running configuration has a path naming s.
func nodeHas(t *testing.T, name, s string) bool {
	t.Helper()

	return testworld.NodeHas(t, world, theBun, name, s)
}

// workloadClient is a client of the emulated cluster's Kubernetes API.
func workloadClient(t *testing.T) *kubernetes.Clientset {
	t.Helper()

	kc, err := adminNode(t, "cp-1").Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	k, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	return k
}

var _ client.Object = &ichorv1alpha1.TalosOperation{}

// TestOperation_ControlPlaneRebootRollout: a reboot-requiring difference on
// the control plane is rolled out only while etcd answers on every control
// plane; the node is drained, rebooted (its etcd member and kube-apiserver go
// away with it), and uncordoned once its Node is Ready and its etcd member
// answers again.
func TestOperation_ControlPlaneRebootRollout(t *testing.T) {
	ctx := context.Background()

	testenv.Eventually(t, waitTimeout, "the cluster's API answers", func() error {
		_, err := workloadClient(t).CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})

		return err
	})

	changeBehindIchor(t, "cp-1", "machine:\n  env:\n    ICHOR_CP_REBOOT: \"1\"\n")

	before := reboots(t, "cp-1")

	testenv.Must(t, k8s.Create(ctx, configOp("cp-reboot", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cp-1"}}
	})))

	op := waitPhase(t, "cp-reboot", ichorv1alpha1.OperationSucceeded)

	if p := progress(op, "cp-1"); p.Phase != ichorv1alpha1.MachineDone || !strings.Contains(p.Message, "rebooted") {
		t.Errorf("cp-1: %+v", p)
	}

	if n := reboots(t, "cp-1"); n != before+1 {
		t.Errorf("cp-1 got %d Reboot calls, want %d", n, before+1)
	}

	if nodeHas(t, "cp-1", "ICHOR_CP_REBOOT") {
		t.Error("cp-1 still runs the difference after its reboot")
	}

	if !adminNode(t, "cp-1").EtcdHealthy(ctx) {
		t.Error("cp-1's etcd member does not answer after the rollout")
	}

	node, err := workloadClient(t).CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	testenv.Must(t, err)

	if node.Spec.Unschedulable {
		t.Error("Node cp-1 is still cordoned after the rollout")
	}

	if err := hasEvent(t, "cp-reboot", "Drained", "cp-1"); err != nil {
		t.Error(err)
	}
}

// TestOperation_MaxUnavailableWorkers: with spec.maxUnavailable 2 both
// workers are rolled out at the same time; control planes are never part of
// that budget (TestOperation_LockContention shows the order).
func TestOperation_MaxUnavailableWorkers(t *testing.T) {
	ctx := context.Background()

	testenv.Eventually(t, waitTimeout, "the cluster's API answers", func() error {
		_, err := workloadClient(t).CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})

		return err
	})

	// Reboots of 2 s: two workers one after the other could not overlap, even
	// at the one-second precision of the timestamps.
	for _, w := range []string{"w-1", "w-2"} {
		changeBehindIchor(t, w, "machine:\n  env:\n    ICHOR_PARALLEL: \"1\"\n")
		testenv.Must(t, emu(t, w).SetDurations(&talosemu.Durations{
			Install: talosemu.Duration(200 * time.Millisecond), Reboot: talosemu.Duration(2 * time.Second), Boot: talosemu.Duration(100 * time.Millisecond),
		}))
		t.Cleanup(func() { _ = emu(t, w).SetDurations(nil) })
	}

	two := intstr.FromInt32(2)

	testenv.Must(t, k8s.Create(ctx, configOp("parallel", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.MaxUnavailable = &two
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"w-1", "w-2"},
		}}}
	})))

	op := waitPhase(t, "parallel", ichorv1alpha1.OperationSucceeded)

	w1, w2 := progress(op, "w-1"), progress(op, "w-2")
	for _, p := range []ichorv1alpha1.MachineProgress{w1, w2} {
		if p.Phase != ichorv1alpha1.MachineDone || p.StartedAt == nil || p.CompletedAt == nil {
			t.Fatalf("%s: %+v", p.Name, p)
		}

		if nodeHas(t, p.Name, "ICHOR_PARALLEL") {
			t.Errorf("%s still runs the difference", p.Name)
		}
	}

	if !w1.StartedAt.Before(w2.CompletedAt) || !w2.StartedAt.Before(w1.CompletedAt) {
		t.Errorf("the workers did not overlap: w-1 %s–%s, w-2 %s–%s", w1.StartedAt, w1.CompletedAt, w2.StartedAt, w2.CompletedAt)
	}
}
