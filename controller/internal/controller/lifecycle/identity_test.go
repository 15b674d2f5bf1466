package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// identityMismatchRemoval: the removal of a worker whose address answers as
// a control plane (w-1's machine at cp-1's address: an address reused, or
// changed where admission could not stop it) sends cp-1 no Reset and does
// not drain its Node. The machine is paused with IdentityConflict naming both
// SMBIOS UUIDs and a Warning Event. Its allowed neighbour is the next step:
// w-1's own machine, at its own address, is removed with exactly one Reset.
func identityMismatchRemoval(t *testing.T) {
	ctx := context.Background()
	w1, cp := emu(t, "w-1"), emu(t, "cp-1")
	resets := rpcs(t, "cp-1", "Reset")

	// Created so, not repointed: an approved machine's address is immutable.
	m := pendingMachine("w-1-at-cp-1", w1)
	m.Spec.Address = cp.IP()
	m.Finalizers = []string{ichorv1alpha1.MachineFinalizer}
	m.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: "true"}
	now := metav1.Now()
	m.Spec.Role = ichorv1alpha1.RoleWorker
	m.Spec.Hostname = "w-1"
	m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}
	testenv.Must(t, k8s.Create(ctx, m))

	t.Cleanup(func() {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(m), cur); err == nil {
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Finalizers = nil
			_ = k8s.Patch(ctx, cur, patch)
		}
	})

	// What provisioning recorded for w-1.
	m.Status.Stage = ichorv1alpha1.StageRunning
	m.Status.Installed = true
	m.Status.NodeName = "w-1"
	m.Status.ConfigSentAt = &now
	m.Status.MaintenanceFingerprint = w1.MaintenanceFingerprint()
	m.Status.Conditions = []metav1.Condition{{
		Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.JoinedReason, Message: "test setup", LastTransitionTime: now,
	}}
	status := m.Status
	testenv.UpdateStatus(t, k8s, m, func(cur *ichorv1alpha1.TalosMachine) { cur.Status = status })

	// Approved once its status says what provisioning recorded.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getMachine(t, "w-1-at-cp-1")
		cur.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now}

		return k8s.Update(ctx, cur)
	}))

	// The monitor finds another machine at the address before anyone deletes it.
	testenv.Eventually(t, waitTimeout, "w-1-at-cp-1 paused for its identity", func() error {
		if c := cond(getMachine(t, "w-1-at-cp-1"), ichorv1alpha1.IdentityConflictCondition); c == nil || c.Reason != ichorv1alpha1.IdentityMismatchReason {
			return fmt.Errorf("IdentityConflict %v", c)
		}

		return nil
	})

	// An operator deletes it.
	testenv.Must(t, k8s.Delete(ctx, getMachine(t, "w-1-at-cp-1")))

	testenv.Eventually(t, waitTimeout, "the removal refused at the drain for the node's identity", func() error {
		got := getMachine(t, "w-1-at-cp-1")

		c := cond(got, ichorv1alpha1.IdentityConflictCondition)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ichorv1alpha1.IdentityMismatchReason {
			return fmt.Errorf("IdentityConflict %v, removal %+v", c, got.Status.Removal)
		}

		if !strings.Contains(c.Message, w1.UUID()) || !strings.Contains(c.Message, cp.UUID()) {
			return fmt.Errorf("the condition does not name both UUIDs (%s, %s): %s", w1.UUID(), cp.UUID(), c.Message)
		}

		// The positive marker: the drain step ran and was refused.
		if r := got.Status.Removal; r == nil || r.Phase != ichorv1alpha1.RemovalDraining || !strings.Contains(r.Message, "drain refused") {
			return fmt.Errorf("removal %+v", r)
		}

		return nil
	})

	if !slices.ContainsFunc(events(t, "w-1-at-cp-1"), func(e string) bool {
		return strings.HasPrefix(e, ichorv1alpha1.IdentityMismatchReason) && strings.Contains(e, cp.UUID())
	}) {
		t.Errorf("no IdentityMismatch Warning Event naming %s: %q", cp.UUID(), events(t, "w-1-at-cp-1"))
	}

	if n := rpcs(t, "cp-1", "Reset") - resets; n != 0 {
		t.Fatalf("cp-1 got %d Reset calls from another machine's removal", n)
	}

	node, err := workload(t).CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	testenv.Must(t, err)

	if node.Spec.Unschedulable {
		t.Fatal("cp-1's Node was cordoned by another machine's removal")
	}
}

// firstProbeRecords: a machine whose maintenance fingerprint nobody recorded
// (w-1 back in maintenance, approved again without discovery's record) is
// reconciled one step at a time, each by a fresh controller. The step whose
// probe records the fingerprint sends nothing; the configuration goes at a
// later step, to the node presenting the recorded one, and it goes once
// across the whole provisioning (the provisioning's chaos test).
func firstProbeRecords(t *testing.T) {
	ctx := context.Background()
	em := emu(t, "w-1")
	_ = em.PowerOn()

	testenv.Eventually(t, waitTimeout, "w-1 in maintenance", func() error {
		if s := em.Stage(); s != talosruntime.MachineStageMaintenance {
			return fmt.Errorf("stage %s", s)
		}

		return nil
	})

	testenv.Must(t, k8s.Create(ctx, pendingMachine("w-1", em)))
	approve(t, "w-1", ichorv1alpha1.RoleWorker)

	before := rpcs(t, "w-1", "ApplyConfiguration")
	recorded := false

	deadline := time.Now().Add(waitTimeout)

	for {
		if time.Now().After(deadline) {
			t.Fatalf("w-1 was not sent its configuration; recorded %t, status %+v", recorded, getMachine(t, "w-1").Status)
		}

		was := getMachine(t, "w-1").Status.MaintenanceFingerprint
		reconcileOnceInFreshController(t, "w-1")

		m := getMachine(t, "w-1")
		sent := rpcs(t, "w-1", "ApplyConfiguration") - before

		if was == "" && m.Status.MaintenanceFingerprint != "" {
			recorded = true

			if sent != 0 {
				t.Fatalf("the step that recorded the fingerprint %s also sent the configuration (%d calls)", m.Status.MaintenanceFingerprint, sent)
			}

			if m.Status.MaintenanceFingerprint != em.MaintenanceFingerprint() {
				t.Fatalf("recorded %q, the node presents %q", m.Status.MaintenanceFingerprint, em.MaintenanceFingerprint())
			}
		}

		if sent > 0 {
			if !recorded || m.Status.ConfigSentAt == nil || sent != 1 {
				t.Fatalf("sent %d times; recorded in an earlier step %t; configSentAt %v", sent, recorded, m.Status.ConfigSentAt)
			}

			break
		}
	}

	// The provisioning goes on, still one controller per reconcile, until
	// the machine is provisioned: its configuration is never sent again.
	chaos := testworld.RunChaos(t, waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, "w-1") }, func() testworld.ChaosStep {
		m := getMachine(t, "w-1")
		c := cond(m, ichorv1alpha1.ProvisionedCondition)

		return testworld.ChaosStep{At: map[string]string{"w-1": m.Status.Stage}, Done: c != nil && c.Status == metav1.ConditionTrue}
	})

	if sent := rpcs(t, "w-1", "ApplyConfiguration") - before; sent != 1 {
		t.Errorf("w-1 got %d ApplyConfiguration calls across its provisioning by %d controllers, want exactly 1", sent, chaos.Deaths)
	}
}
