package operation_test

import (
	"context"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestNodeIdentityMismatchRebootRefused: a config rollout over two workers
// with a reboot-requiring difference: w-1, at its own address, is applied
// STAGED and rebooted (the allowed neighbour); w-1-moved, whose identity is
// w-1's but whose address answers as w-2, is refused before anything is
// sent: w-2 gets no ApplyConfiguration and no Reboot, and the operation
// pauses with both SMBIOS UUIDs named.
func TestNodeIdentityMismatchRebootRefused(t *testing.T) {
	ctx := context.Background()
	w1, w2 := emu(t, "w-1"), emu(t, "w-2")

	testenv.Eventually(t, waitTimeout, "the cluster's API answers", func() error {
		_, err := workloadClient(t).CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})

		return err
	})

	// Created so, not repointed: an approved machine's address is immutable.
	now := metav1.Now()
	moved := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-1-moved", Labels: map[string]string{ichorv1alpha1.ClusterLabel: clusterName, "pool": "moved"}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: clusterName,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: w1.UUID(), Serial: "SER-w-1"},
			Address:     w2.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
			Role:        ichorv1alpha1.RoleWorker,
			Hostname:    "w-1",
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, moved))

	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &ichorv1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "identity-rollout"}})

		// Its removal is refused for the same reason: the test lets it go.
		cur := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(moved), cur); err == nil {
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Finalizers = nil
			_ = k8s.Patch(ctx, cur, patch)
			_ = k8s.Delete(ctx, cur)
		}
	})

	moved.Status.Stage = ichorv1alpha1.StageRunning
	moved.Status.Installed = true
	moved.Status.NodeName = "w-1"
	moved.Status.ConfigSentAt = &now
	apimeta.SetStatusCondition(&moved.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.JoinedReason, Message: "test setup",
	})
	status := moved.Status
	testenv.UpdateStatus(t, k8s, moved, func(cur *ichorv1alpha1.TalosMachine) { cur.Status = status })

	// Approved once its status says what provisioning recorded.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getMachine(t, "w-1-moved")
		cur.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now}

		return k8s.Update(ctx, cur)
	}))

	changeBehindIchor(t, "w-1", "machine:\n  env:\n    ICHOR_IDENTITY: \"1\"\n")

	w2.ResetRPCCounts()

	before := reboots(t, "w-1")

	testenv.Must(t, k8s.Create(ctx, configOp("identity-rollout", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"w-1", "moved"},
		}}}
	})))

	op := waitPhase(t, "identity-rollout", ichorv1alpha1.OperationPaused)

	if !strings.Contains(op.Status.FailureReason, w1.UUID()) || !strings.Contains(op.Status.FailureReason, w2.UUID()) {
		t.Errorf("the failure does not name both UUIDs (%s, %s): %q", w1.UUID(), w2.UUID(), op.Status.FailureReason)
	}

	if p := progress(op, "w-1-moved"); p.Phase != ichorv1alpha1.MachineFailed {
		t.Errorf("w-1-moved: %+v", p)
	}

	if err := hasEvent(t, "identity-rollout", ichorv1alpha1.IdentityMismatchReason, w2.UUID()); err != nil {
		t.Error(err)
	}

	// The allowed neighbour: the right machine got its reboot.
	if p := progress(op, "w-1"); p.Phase != ichorv1alpha1.MachineDone {
		t.Errorf("w-1: %+v", p)
	}

	if n := reboots(t, "w-1"); n != before+1 {
		t.Errorf("w-1 got %d Reboot calls, want %d", n, before+1)
	}

	counts := w2.RPCCounts()
	for _, m := range []string{"ApplyConfiguration", "Reboot", "Reset"} {
		if n := counts["/machine.MachineService/"+m]; n != 0 {
			t.Errorf("w-2, at w-1-moved's address, got %d %s calls", n, m)
		}
	}
}
