package operation

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The config rollout (architecture, "Configuration reconcile"): the changes
// the machine reconciler leaves waiting go to the nodes one machine at a
// time, control planes first.
//
//   - A reboot-requiring change: the storage hook, cordon and drain (Talos's
//     Reboot does neither), a STAGED apply (what the next boot reads), Reboot,
//     then wait until the node runs the render and its Node is Ready,
//     uncordon, and for a control plane its etcd member answers.
//   - A kube-apiserver restart (control planes): a NO_REBOOT apply, no drain,
//     then wait for that node's own /readyz before the next control plane.
//   - Anything else the node lacks (drift, an install-only change) is applied
//     in the plan's mode.
//
// Machine steps, as status.machines[].step records them.
const (
	stepPlan          = "plan"
	stepDrain         = "drain"
	stepApply         = "apply"
	stepReboot        = "reboot"
	stepWaitBoot      = "wait-boot"
	stepUncordon      = "uncordon"
	stepWaitAPIServer = "wait-apiserver"
	stepAPIServerDown = "wait-apiserver-down"
	stepAPIServerBack = "wait-apiserver-back"
	stepDone          = "done"
)

// Operation steps, as status.step records them.
const (
	opStepSelect  = "select"
	opStepRollout = "rollout"
)

// selectPhase records, as the operation's first step, the machines the
// rollout covers.
func (r *Reconciler) selectPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if halted(op) || isRestore(op) || isCNI(op) || isKubeProxy(op) || isIchor(op) {
		return ctrl.Result{}, nil
	}

	if op.Status.Step == "" {
		op.Status.Step = opStepSelect
	}

	if op.Status.Step != opStepSelect {
		return ctrl.Result{}, nil
	}

	switch {
	case isNode(op):
		return r.selectNode(ctx, s)
	case isShutdown(op):
		return r.selectShutdown(ctx, s)
	}

	return r.selectMachines(ctx, s)
}

// rolloutPhase runs one step of each machine the rollout works on now, and
// ends the operation once none is left.
func (r *Reconciler) rolloutPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if halted(op) || isRestore(op) || isCNI(op) || isKubeProxy(op) || isIchor(op) {
		return ctrl.Result{}, nil
	}

	if isKubernetes(op) {
		return r.kubernetesRolloutPhase(ctx, s)
	}

	if isShutdown(op) {
		return r.shutdownPhase(ctx, s)
	}

	if isCARotation(op) {
		return r.caRotationPhase(ctx, s)
	}

	if isKeyRotation(op) {
		return r.keyRotationPhase(ctx, s)
	}

	active, held, err := r.activeMachines(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}

	if len(active) > 0 {
		return r.stepMachines(ctx, s, active)
	}

	if len(held) > 0 {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.HeldReason,
			"every other machine is done; waiting for the hold annotation to leave "+strings.Join(held, ", "))

		return ctrl.Result{RequeueAfter: cmp.Or(r.HeldWait, DefaultHeldWait)}, nil
	}

	done, skipped := 0, 0

	for _, p := range op.Status.Machines {
		switch p.Phase {
		case ichorv1alpha1.MachineDone:
			done++
		case ichorv1alpha1.MachineSkipped:
			skipped++
		}
	}

	if isNode(op) {
		msg := nodeAction(op) + " of " + op.Spec.Node.MachineName + " done"
		if len(op.Status.Machines) > 0 && op.Status.Machines[0].Message != "" {
			msg = op.Spec.Node.MachineName + ": " + op.Status.Machines[0].Message
		}

		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason, msg)
	}

	if isTalos(op) {
		version, _ := talosTarget(op, s.Cluster)

		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
			fmt.Sprintf("upgraded %d machine(s) to Talos %s; %d already ran it", done, version, skipped))
	}

	return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("rolled the rendered configuration out to %d machine(s); %d already ran it", done, skipped))
}

// stepMachines runs one step of each machine the pass works on; it stops at
// the first that fails (the others stay where they are: the operation is
// paused on that machine's step) or once the operation has completed.
func (r *Reconciler) stepMachines(ctx context.Context, s *scope, active []candidate) (ctrl.Result, error) {
	op := s.Object

	var res ctrl.Result

	for _, a := range active {
		if a.p.Phase == ichorv1alpha1.MachineHeld {
			a.p.Phase, a.p.Message = ichorv1alpha1.MachinePending, ""
		}

		r1, err := r.machineStep(ctx, s, a.m, a.p)
		if err != nil {
			return ctrl.Result{}, err
		}

		res = sooner(res, r1)

		if op.Status.FailedStep != "" || completed(op) {
			return ctrl.Result{}, nil
		}
	}

	return res, nil
}

// sooner is the result that comes back first (a zero RequeueAfter never).
func sooner(a, b ctrl.Result) ctrl.Result {
	switch {
	case a.RequeueAfter == 0:
		return b
	case b.RequeueAfter == 0 || a.RequeueAfter <= b.RequeueAfter:
		return a
	default:
		return b
	}
}
