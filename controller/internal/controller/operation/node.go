package operation

// The node operation (TalosOperation type node; issue 21): reboot, shut down
// or reset one machine, under the cluster lock, after the admission guards
// (guard.CheckNodeAction: the last control plane, the etcd quorum, the last
// worker) and, for a control plane, etcd's health seen now
// (guard.CheckControlPlaneDown).
//
//   - reboot: check → the storage hook, cordon and drain (Talos's Reboot does
//     neither, t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go)
//     → Reboot, recorded first → a new boot, running and ready → Node Ready,
//     uncordon, scheduling back for the storage system, the etcd member.
//   - shutdown: check → the storage hook → Shutdown, recorded first (Talos's
//     shutdown sequence cordons and drains by itself and its boot sequence
//     uncordons, t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go)
//     → the node stops answering. Power-on brings it back.
//   - reset: check → the storage hook, cordon and drain → Reset in
//     spec.node.wipeMode (reclaim.ResetRequestWipe), recorded first: Reset is
//     fire-and-forget, so a second one is never sent → the node stops
//     answering on its old boot → its Kubernetes Node is deleted (it
//     registers again when the node rejoins) and storage scheduling comes
//     back. The machine stays approved: once the node answers in maintenance
//     mode with its approved identity, the machine reconciler sends its
//     configuration again (architecture, "Nodes").

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// Steps of the node operation.
const (
	stepNodeCheck = "node-check"
	// stepNodeReboot sends the Reboot of a node operation (with the boot ID).
	stepNodeReboot = "node-reboot"
	stepShutdown   = "shutdown"
	// stepWaitOff waits for a node that was sent Shutdown to stop answering.
	stepWaitOff = "wait-off"
	stepReset   = "reset"
	// stepWaitReset waits for a node that was sent Reset to leave its old boot.
	stepWaitReset = "wait-reset"
)

func isNode(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationNode && op.Spec.Node != nil
}

func nodeAction(op *ichorv1alpha1.TalosOperation) string {
	if !isNode(op) {
		return ""
	}

	return op.Spec.Node.Action
}

func wipeMode(op *ichorv1alpha1.TalosOperation) string {
	if op.Spec.Node == nil || op.Spec.Node.WipeMode == "" {
		return "state-ephemeral"
	}

	return op.Spec.Node.WipeMode
}

// selectNode records the one machine a node operation acts on; a machine
// that does not exist or has no configured node fails the operation.
func (r *Reconciler) selectNode(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	name := op.Spec.Node.MachineName

	m, err := r.machine(ctx, op, name)
	if err != nil {
		return ctrl.Result{}, err
	}

	if m == nil || m.Spec.ClusterName != op.Spec.ClusterName {
		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationFailed, ichorv1alpha1.InvalidSpecReason, fmt.Sprintf(
			"TalosMachine %q of cluster %s does not exist; nothing was done: delete this operation and name a machine of the cluster (`ichor machine list`)",
			name, op.Spec.ClusterName))
	}

	op.Status.Machines = []ichorv1alpha1.MachineProgress{{Name: m.Name, Role: m.Spec.Role, Phase: ichorv1alpha1.MachinePending}}
	op.Status.Step = opStepRollout
	op.Status.ProgressSequence++
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("%s of %s", nodeAction(op), m.Name))

	return ichorreconcile.NextStep(), nil
}

// nodeCheck checks, now, that a control plane may go
// (guard.CheckControlPlaneDown: the admission guards counted the machines;
// this sees their etcd).
func (w *work) nodeCheck(ctx context.Context) (ctrl.Result, error) {
	if w.cp() {
		if msg := w.controlPlaneDown(ctx, fmt.Sprintf("taking %s down (%s)", w.m.Name, nodeAction(w.op))); msg != "" {
			return w.fail(msg)
		}
	}

	if nodeAction(w.op) == ichorv1alpha1.NodeActionShutdown {
		return w.next(stepDrain, "evacuating storage; Talos's shutdown sequence cordons and drains the node itself")
	}

	return w.next(stepDrain, "evacuating storage, then cordoning and draining the node")
}

// afterDrain is the step a node operation goes to once its node is drained.
func afterDrain(op *ichorv1alpha1.TalosOperation) string {
	switch nodeAction(op) {
	case ichorv1alpha1.NodeActionShutdown:
		return stepShutdown
	case ichorv1alpha1.NodeActionReset:
		return stepReset
	default:
		return stepNodeReboot
	}
}

// nodeReboot sends the Reboot, recorded first with the node's boot ID so that
// the wait knows the node came back on a new boot.
func (w *work) nodeReboot(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	boot, err := n.BootID(ctx)
	if err != nil {
		return w.fail(talos.Message(err))
	}

	w.mp.BootID = boot

	return w.sendReboot(ctx, n, stepNodeReboot, stepWaitBoot, "rebooting "+w.m.Name, "rebooting")
}

// shutdown sends Shutdown, recorded first.
func (w *work) shutdown(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	w.r.next(w.op, w.mp, stepWaitOff, "shutdown requested")

	if err := w.s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	if err := n.Shutdown(ctx, false); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctrl.Result{}, ctx.Err()
		}

		w.mp.Step = stepShutdown

		return w.fail(talos.Message(err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "ShuttingDown", "Shutdown", "shutting %s down", w.m.Name)

	return ichorreconcile.NextStep(), nil
}

// waitOff waits until the node no longer answers.
func (w *work) waitOff(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		return w.fail(fmt.Sprintf("the node still answers %s after its shutdown request; Ichor sends a Shutdown once: "+
			"check the node's console, or power it off by hand", w.r.RebootTimeout))
	}

	if n, err := w.dial(ctx); err == nil {
		n.Close()

		w.mp.Message = "shutting down: the node still answers"

		return w.poll(), nil
	}

	// Longhorn itself schedules nothing onto a node that is down.
	if err := hook.Restore(ctx, w.r.Storage, w.m); err != nil {
		w.mp.Message = "re-enabling storage scheduling on the node: " + err.Error()

		return w.poll(), nil //nolint:nilerr // retried at the next poll
	}

	return w.finishMachine(ctx, "powered off; power it on to bring it back (Talos uncordons its Node when it boots)")
}

// reset sends Reset in spec.node.wipeMode, recorded first: Reset is
// fire-and-forget, so a reconcile that finds stepWaitReset never sends a
// second one (architecture, "Nodes").
func (w *work) reset(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	boot, err := n.BootID(ctx)
	if err != nil {
		return w.fail(talos.Message(err))
	}

	mode := wipeMode(w.op)
	w.mp.BootID = boot
	w.r.next(w.op, w.mp, stepWaitReset, "reset requested (wipe mode "+mode+")")

	if err := w.s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	if err := n.Reset(ctx, reclaim.ResetRequestWipe(mode)); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctrl.Result{}, ctx.Err()
		}

		w.mp.Step = stepReset

		return w.fail(talos.Message(err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, "Resetting", "Reset", "resetting %s (wipe mode %s)", w.m.Name, mode)

	return ichorreconcile.NextStep(), nil
}

// waitReset waits until the node no longer answers on its old boot, then
// deletes its Kubernetes Node and lets the storage system schedule again.
func (w *work) waitReset(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		return w.fail(fmt.Sprintf("the node still answers on its old boot %s after its reset request; Ichor sends a Reset once: "+
			"check the node's console", w.r.RebootTimeout))
	}

	if n, err := w.dial(ctx); err == nil {
		boot, berr := n.BootID(ctx)
		n.Close()

		if berr != nil || boot == w.mp.BootID {
			w.mp.Message = "resetting: the node still answers on its old boot"

			return w.poll(), nil //nolint:nilerr // a node that has not gone down yet is waited for
		}
	}

	k, err := w.r.workload(ctx, w.op, w.st.Bundle)
	if err != nil {
		w.mp.Message = "waiting for the cluster's Kubernetes API to delete the node's Node: " + err.Error()

		return w.poll(), nil //nolint:nilerr // waited for, not an error
	}

	node, err := workload.NodeAt(ctx, k, w.m.Status.NodeName, w.m.Spec.Address)
	if err != nil {
		w.mp.Message = err.Error()

		return w.poll(), nil //nolint:nilerr // waited for, not an error
	}

	if node != nil {
		if err := k.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			w.mp.Message = "deleting Node " + node.Name + ": " + err.Error()

			return w.poll(), nil
		}
	}

	if err := hook.Restore(ctx, w.r.Storage, w.m); err != nil {
		w.mp.Message = "re-enabling storage scheduling on the node: " + err.Error()

		return w.poll(), nil //nolint:nilerr // retried at the next poll
	}

	msg := "reset (wipe mode " + wipeMode(w.op) + "); once the node answers in maintenance mode, the machine reconciler installs its configuration again"
	if wipeMode(w.op) != "state-ephemeral" {
		msg = "reset (wipe mode " + wipeMode(w.op) + ": the system disk was wiped); boot the node from its install media: " +
			"once it answers in maintenance mode, the machine reconciler installs its configuration again"
	}

	return w.finishMachine(ctx, msg)
}
