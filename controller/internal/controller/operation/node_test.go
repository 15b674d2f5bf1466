package operation_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// nodeOp is a node operation of the test cluster.
func nodeOp(name, machine, action string) *ichorv1alpha1.TalosOperation {
	return configOp(name, func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.Type = ichorv1alpha1.OperationNode
		op.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: machine, Action: action}
	})
}

func rpcs(t testing.TB, name, method string) int {
	t.Helper()

	return emu(t, name).RPCCounts()["/machine.MachineService/"+method]
}

// waitNodeBack waits for a Node to be Ready and schedulable.
func waitNodeBack(t *testing.T, name string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, "Node "+name+" Ready and schedulable", func() error {
		n, err := workloadClient(t).CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				if n.Spec.Unschedulable {
					return fmt.Errorf("Node %s is Ready but cordoned", name)
				}

				return nil
			}
		}

		return fmt.Errorf("Node %s is not Ready: %+v", name, n.Status.Conditions)
	})
}

// TestNodeReboot: a node operation reboots one worker: drained first, one
// Reboot, back on a new boot, uncordoned; the other worker is not touched.
func TestNodeReboot(t *testing.T) {
	ctx := context.Background()
	waitNodeBack(t, "w-2")

	before, other := rpcs(t, "w-2", "Reboot"), rpcs(t, "w-1", "Reboot")

	testenv.Must(t, k8s.Create(ctx, nodeOp("reboot-w-2", "w-2", ichorv1alpha1.NodeActionReboot)))
	op := waitPhase(t, "reboot-w-2", ichorv1alpha1.OperationSucceeded)

	if len(op.Status.Machines) != 1 || op.Status.Machines[0].Name != "w-2" || op.Status.Machines[0].Message != "rebooted" {
		t.Errorf("machines %+v", op.Status.Machines)
	}

	if n := rpcs(t, "w-2", "Reboot"); n != before+1 {
		t.Errorf("w-2 got %d Reboot calls, want 1", n-before)
	}

	if n := rpcs(t, "w-1", "Reboot"); n != other {
		t.Errorf("w-1 got %d Reboot calls; the operation acts on w-2 only", n-other)
	}

	if err := hasEvent(t, "reboot-w-2", "Drained", "w-2"); err != nil {
		t.Error(err)
	}

	waitNodeBack(t, "w-2")

	if h := lockHolder(t); h != "" {
		t.Errorf("the lock is still held by %s", h)
	}
}

// TestNodeRebootNeverStartedIsSentAgain: a node operation's Reboot that is
// recorded but never reaches the node (the controller killed between the
// record and the call; here the emulator answers and does nothing, which is
// what the controller sees then: a node that never went down) is requested
// again once RebootGrace has passed and the node still runs on its old boot,
// with a RebootNotStarted Warning Event; the operation succeeds. Without the
// re-request it waits out RebootTimeout and fails.
func TestNodeRebootNeverStartedIsSentAgain(t *testing.T) {
	ctx := context.Background()
	waitNodeBack(t, "w-2")

	before := rpcs(t, "w-2", "Reboot")

	emu(t, "w-2").IgnoreNextReboot()
	testenv.Must(t, k8s.Create(ctx, nodeOp("reboot-lost-w-2", "w-2", ichorv1alpha1.NodeActionReboot)))
	op := waitPhase(t, "reboot-lost-w-2", ichorv1alpha1.OperationSucceeded)

	if p := progress(op, "w-2"); p.Message != "rebooted" {
		t.Errorf("w-2: %+v", p)
	}

	// The lost one and the one requested again: no third.
	if n := rpcs(t, "w-2", "Reboot"); n != before+2 {
		t.Errorf("w-2 got %d Reboot calls, want 2 (the lost one, then one more)", n-before)
	}

	if err := hasEvent(t, "reboot-lost-w-2", "RebootNotStarted", "never started"); err != nil {
		t.Error(err)
	}

	waitNodeBack(t, "w-2")
}

// TestNodeShutdown: a node operation powers one worker off (one Shutdown
// call); power-on brings it back.
func TestNodeShutdown(t *testing.T) {
	ctx := context.Background()
	waitNodeBack(t, "w-2")

	before := rpcs(t, "w-2", "Shutdown")

	testenv.Must(t, k8s.Create(ctx, nodeOp("off-w-2", "w-2", ichorv1alpha1.NodeActionShutdown)))
	op := waitPhase(t, "off-w-2", ichorv1alpha1.OperationSucceeded)

	if p := progress(op, "w-2"); !strings.Contains(p.Message, "powered off") {
		t.Errorf("w-2: %+v", p)
	}

	if n := rpcs(t, "w-2", "Shutdown"); n != before+1 {
		t.Errorf("w-2 got %d Shutdown calls, want 1", n-before)
	}

	if emu(t, "w-2").Powered() {
		t.Error("w-2 is still powered on")
	}

	testenv.Must(t, emu(t, "w-2").PowerOn())
	waitNodeBack(t, "w-2")
}

// TestNodeReset: a node operation resets a worker: drained, reset once, its
// Node deleted; the node answers in maintenance mode with its approved
// identity, so the machine reconciler installs it again, and the machine
// and its Node are Ready again (architecture, "Nodes").
func TestNodeReset(t *testing.T) {
	ctx := context.Background()
	waitNodeBack(t, "w-1")

	before := rpcs(t, "w-1", "Reset")
	reinstalls := getMachine(t, "w-1").Status.Reinstalls

	testenv.Must(t, k8s.Create(ctx, nodeOp("reset-w-1", "w-1", ichorv1alpha1.NodeActionReset)))
	op := waitPhase(t, "reset-w-1", ichorv1alpha1.OperationSucceeded)

	if p := progress(op, "w-1"); !strings.Contains(p.Message, "reset (wipe mode state-ephemeral)") {
		t.Errorf("w-1: %+v", p)
	}

	if err := hasEvent(t, "reset-w-1", "Drained", "w-1"); err != nil {
		t.Error(err)
	}

	// Re-installed from maintenance mode, Ready again.
	testenv.Eventually(t, waitTimeout, "w-1 re-installed and Ready", func() error {
		m := getMachine(t, "w-1")
		if m.Status.Reinstalls <= reinstalls {
			return fmt.Errorf("not re-installed yet (%d): %+v", m.Status.Reinstalls, m.Status.Conditions)
		}

		if !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			return fmt.Errorf("not Ready: %+v", m.Status.Conditions)
		}

		return nil
	})
	waitNodeBack(t, "w-1")

	// Reset once, whatever the reconciles after it did.
	if n := rpcs(t, "w-1", "Reset"); n != before+1 {
		t.Errorf("w-1 got %d Reset calls, want 1", n-before)
	}
}
