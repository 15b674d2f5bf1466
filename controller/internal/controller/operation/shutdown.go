package operation

// The cluster shutdown (TalosOperation type shutdown; architecture,
// "Upgrades", the shutdown paragraph; issue 21): the whole cluster stops for
// planned downtime, under the cluster lock, which it keeps until it has
// completed, paused on a failed step too (lock.OperationLiveness); meanwhile
// the admission webhook refuses every new operation of the cluster
// (guard.CheckShutdownLock).
//
//   - shutdown-workers: every worker at once. Each node's identity is checked
//     (talos.Verified) and its boot ID read, and all of them are recorded at
//     step wait-off in one strict status write before the first Shutdown is
//     sent. Talos's own shutdown sequence cordons and drains each worker
//     (force false). The stage ends when no worker answers any more.
//   - shutdown-control-planes: then every control plane in one forced burst
//     (force true: no drain, the workers are gone), the controller's own node
//     (Reconciler.OwnNode) last. All are recorded before the first is sent,
//     and nothing is written between the sends, so a controller running on
//     the cluster needs to live only until the requests are out. Quorum is
//     lost only in this stage; no etcd member is removed, so power-on loses
//     no data.
//   - power-on: Ichor cannot power machines on. The operation waits, and
//     completes by itself once every machine answers on a new boot, which
//     gives the lock back.
//
// A machine that does not answer when its stage begins is taken as off
// already and is sent nothing (a Warning Event says so). A Shutdown that
// fails pauses the operation on that machine; resuming sends it again. A
// machine recorded at wait-off is never sent a second Shutdown: one that
// still answers on its old boot after RebootTimeout pauses the operation.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// Steps of the shutdown: the operation's (status.step) and a machine's.
const (
	opStepShutdownWorkers       = "shutdown-workers"
	opStepShutdownControlPlanes = "shutdown-control-planes"
	opStepPowerOn               = "power-on"

	// stepOff is a machine that stopped answering; it waits for power-on.
	stepOff = "off"
)

// machineGone is the message of a machine whose TalosMachine went while the shutdown ran.
const machineGone = "the TalosMachine is gone"

// probeTimeout bounds one look at a node during a shutdown: a node that is
// off may take a connection attempt's full timeout to say so.
const probeTimeout = 10 * time.Second

func isShutdown(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationShutdown
}

// shutdownOrder sorts the machines of a shutdown as it takes them: the
// workers, then the control planes with the one whose Node is own (the
// controller's own node) last, each by name.
func shutdownOrder(ms []ichorv1alpha1.TalosMachine, own string) {
	rank := func(m *ichorv1alpha1.TalosMachine) int {
		switch {
		case m.Spec.Role != ichorv1alpha1.RoleControlPlane:
			return 0
		case own != "" && strings.EqualFold(m.Status.NodeName, own):
			return 2
		default:
			return 1
		}
	}

	slices.SortFunc(ms, func(a, b ichorv1alpha1.TalosMachine) int {
		return cmp.Or(cmp.Compare(rank(&a), rank(&b)), cmp.Compare(a.Name, b.Name))
	})
}

// selectShutdown records every configured machine of the cluster, in the
// order the shutdown takes them.
func (r *Reconciler) selectShutdown(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	ms, err := machinestate.Machines(ctx, r.Client, op.Namespace, op.Spec.ClusterName, rollout.Configured)
	if err != nil {
		return ctrl.Result{}, err
	}

	shutdownOrder(ms, r.OwnNode)

	workers := 0
	op.Status.Machines = make([]ichorv1alpha1.MachineProgress, 0, len(ms))

	for _, m := range ms {
		if m.Spec.Role != ichorv1alpha1.RoleControlPlane {
			workers++
		}

		op.Status.Machines = append(op.Status.Machines, ichorv1alpha1.MachineProgress{Name: m.Name, Role: m.Spec.Role, Phase: ichorv1alpha1.MachinePending})
	}

	op.Status.Step = opStepShutdownWorkers
	op.Status.ProgressSequence++

	last := ""
	if n := len(ms); n > workers && r.OwnNode != "" && strings.EqualFold(ms[n-1].Status.NodeName, r.OwnNode) {
		last = fmt.Sprintf(", %s (the controller's own node) last", ms[n-1].Name)
	}

	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("shutting down %d machine(s): the %d worker(s) first, together; then the %d control plane(s) in one burst%s",
			len(ms), workers, len(ms)-workers, last))

	return ichorreconcile.NextStep(), nil
}

// shutdownPhase runs the operation's current stage.
func (r *Reconciler) shutdownPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	bundle, err := machinestate.LoadBundle(ctx, r.APIReader, s.Cluster)
	if err != nil {
		if machinestate.IsStalled(err) {
			r.fail(op, nil, op.Status.Step, err.Error())

			return ctrl.Result{}, nil
		}

		return ctrl.Result{}, err
	}

	switch op.Status.Step {
	case opStepShutdownWorkers:
		return r.shutdownStage(ctx, s, bundle, false)
	case opStepShutdownControlPlanes:
		return r.shutdownStage(ctx, s, bundle, true)
	case opStepPowerOn:
		return r.waitPowerOn(ctx, s, bundle)
	default:
		r.fail(op, nil, op.Status.Step, "unknown step "+op.Status.Step+" of a shutdown")

		return ctrl.Result{}, nil
	}
}

// inStage reports whether a machine belongs to the stage of the control
// planes (cps) or of the workers.
func inStage(mp *ichorv1alpha1.MachineProgress, cps bool) bool {
	return (mp.Role == ichorv1alpha1.RoleControlPlane) == cps
}

// shutdownStage sends the stage's machines their Shutdown in one burst,
// waits until none answers, and then goes on to the next stage.
func (r *Reconciler) shutdownStage(ctx context.Context, s *scope, b *secrets.Bundle, cps bool) (ctrl.Result, error) {
	op := s.Object

	res, err := r.shutdownBurst(ctx, s, b, cps)
	if err != nil || op.Status.FailedStep != "" || res.RequeueAfter > 0 {
		return res, err
	}

	waiting := 0

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		if !inStage(mp, cps) || mp.Phase != ichorv1alpha1.MachineInProgress || mp.Step != stepWaitOff {
			continue
		}

		if r.waitOff(ctx, op, mp, b) {
			continue
		}

		if op.Status.FailedStep != "" {
			return ctrl.Result{}, nil
		}

		waiting++
	}

	if waiting > 0 {
		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	if !cps {
		op.Status.Step = opStepShutdownControlPlanes
		op.Status.ProgressSequence++
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			"every worker is off; shutting the control planes down in one burst")

		return ichorreconcile.NextStep(), nil
	}

	op.Status.Step = opStepPowerOn
	op.Status.ProgressSequence++
	r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "ShutDown", "Shutdown",
		"every machine of cluster %s is off; the operation completes once each one answers on a new boot", op.Spec.ClusterName)
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		"every machine is off; power them on (Ichor cannot): the operation completes once each one answers on a new boot")

	return ichorreconcile.NextStep(), nil
}

// toSend reports whether a machine of the stage still needs its Shutdown:
// it has not started, or resuming put it back on the send.
func toSend(mp *ichorv1alpha1.MachineProgress) bool {
	return mp.Phase == ichorv1alpha1.MachinePending || mp.Phase == ichorv1alpha1.MachineInProgress && mp.Step == stepShutdown
}

// prepared is a machine of a burst whose identity was checked.
type prepared struct {
	mp   *ichorv1alpha1.MachineProgress
	m    *ichorv1alpha1.TalosMachine
	n    *talos.Verified
	boot string
}

// shutdownBurst checks every machine of the stage that still needs its
// Shutdown, records them all at wait-off (one strict write), and only then
// sends each its Shutdown, in the recorded order, with no write between the
// sends. A result with RequeueAfter means the burst went out in this
// reconcile. A check that fails pauses the operation before anything is
// recorded or sent.
func (r *Reconciler) shutdownBurst(ctx context.Context, s *scope, b *secrets.Bundle, cps bool) (ctrl.Result, error) {
	op := s.Object

	var burst []prepared

	defer func() {
		for _, p := range burst {
			p.n.Close()
		}
	}()

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		if !inStage(mp, cps) || !toSend(mp) {
			continue
		}

		p, ok, err := r.prepareShutdown(ctx, op, mp, b)
		if err != nil {
			return ctrl.Result{}, err
		}

		if ok {
			burst = append(burst, p)
		}

		if op.Status.FailedStep != "" {
			return ctrl.Result{}, nil // a mismatch or an unreadable node: nothing was recorded or sent
		}
	}

	if len(burst) == 0 {
		return ctrl.Result{}, nil
	}

	now := metav1.NewTime(r.now())

	for _, p := range burst {
		if p.mp.StartedAt == nil {
			p.mp.StartedAt = &now
		}

		p.mp.Phase, p.mp.BootID = ichorv1alpha1.MachineInProgress, p.boot
		r.next(op, p.mp, stepWaitOff, "shutdown requested")
	}

	// Recorded before the first Shutdown is sent: a reconcile after a crash,
	// a lost write or a stale read finds the burst's machines at wait-off and
	// sends none of them a second one; a Persist that conflicts sends nothing.
	if err := s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	var failed []string

	for _, p := range burst {
		if err := p.n.Shutdown(ctx, cps); err != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctrl.Result{}, ctx.Err()
			}

			p.mp.Phase, p.mp.Step, p.mp.Message = ichorv1alpha1.MachineFailed, stepShutdown, "the shutdown request failed: "+talos.Message(err)
			failed = append(failed, p.m.Name+": "+talos.Message(err))

			continue
		}

		r.Recorder.Eventf(op, p.m, corev1.EventTypeNormal, "ShuttingDown", "Shutdown", "shutting %s down (force %t)", p.m.Name, cps)
	}

	if len(failed) > 0 {
		var first *ichorv1alpha1.MachineProgress

		for _, p := range burst {
			if p.mp.Phase == ichorv1alpha1.MachineFailed && first == nil {
				first = p.mp
			}
		}

		msg := first.Message
		r.fail(op, first, stepShutdown, "the shutdown request of "+strings.Join(failed, "; ")+
			" failed; the others of the burst were sent theirs. Resuming sends the failed ones again")
		first.Message = msg

		return ctrl.Result{}, nil
	}

	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// prepareShutdown checks one machine before the burst: a machine gone from
// the API is skipped, a node that does not answer is taken as off already, a
// node that answers as another machine (or whose boot ID cannot be read)
// fails the step. ok is true when the machine joins the burst; it is then
// left as it was until the burst is recorded.
func (r *Reconciler) prepareShutdown(ctx context.Context, op *ichorv1alpha1.TalosOperation, mp *ichorv1alpha1.MachineProgress,
	b *secrets.Bundle,
) (prepared, bool, error) {
	m, err := r.machine(ctx, op, mp.Name)
	if err != nil {
		return prepared{}, false, err
	}

	if m == nil {
		mp.Phase, mp.Message = ichorv1alpha1.MachineSkipped, machineGone
		op.Status.ProgressSequence++

		return prepared{}, false, nil
	}

	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()

	failStep := func(msg string) (prepared, bool, error) {
		now := metav1.NewTime(r.now())
		if mp.StartedAt == nil {
			mp.StartedAt = &now
		}

		mp.Step = stepShutdown
		r.fail(op, mp, stepShutdown, msg)

		return prepared{}, false, nil
	}

	n, err := r.dialVerified(pctx, m, b)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		msg := fmt.Sprintf("shutdown refused for %s: %s. Check which machine answers on %s, then resume the operation", m.Name, mm.Error(), m.Spec.Address)
		r.Recorder.Eventf(op, m, corev1.EventTypeWarning, ichorv1alpha1.IdentityMismatchReason, "Verify", "%s", msg)

		return failStep(msg)
	}

	switch {
	case err != nil && unreachable(err):
		now := metav1.NewTime(r.now())
		mp.Phase, mp.StartedAt = ichorv1alpha1.MachineInProgress, &now
		r.next(op, mp, stepOff, "did not answer when the shutdown began ("+talos.Message(err)+"): taken as off already; Ichor sent it nothing")
		r.Recorder.Eventf(op, m, corev1.EventTypeWarning, "NotAnswering", "Shutdown",
			"%s does not answer; the shutdown takes it as off already and sends it nothing", m.Name)

		return prepared{}, false, nil
	case err != nil:
		return failStep("cannot check the node's identity before its shutdown: " + talos.Message(err))
	}

	boot, err := n.BootID(pctx)
	if err != nil {
		n.Close()

		return failStep("cannot read the node's boot ID, which the shutdown records to know when it is back: " + talos.Message(err))
	}

	return prepared{mp: mp, m: m, n: n, boot: boot}, true, nil
}

// unreachable reports whether err means the node did not answer at all
// (nothing listens, or no answer in time), not that it refused.
func unreachable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}

	return errors.Is(err, context.DeadlineExceeded)
}

// dialVerified connects to a machine's node and checks that it is this machine.
func (r *Reconciler) dialVerified(ctx context.Context, m *ichorv1alpha1.TalosMachine, b *secrets.Bundle) (*talos.Verified, error) {
	n, err := r.Nodes.Dial(ctx, m.Spec.Address, b)
	if err != nil {
		return nil, err
	}

	v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(m))
	if err != nil {
		n.Close()

		return nil, err
	}

	return v, nil
}

// bootOf reads the boot ID of the node at a machine's address; ok is false
// when the node does not answer.
func (r *Reconciler) bootOf(ctx context.Context, address string, b *secrets.Bundle) (string, bool) {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()

	n, err := r.Nodes.Dial(pctx, address, b)
	if err != nil {
		return "", false
	}
	defer n.Close()

	boot, err := n.BootID(pctx)
	if err != nil {
		return "", false
	}

	return boot, true
}

// waitOff looks at a machine sent its Shutdown: true once it no longer
// answers on the boot it had (off, or already back on a new boot, as a
// controller that ran on the cluster finds it after power-on). One that
// still answers on its old boot after RebootTimeout fails the step: it is
// not sent a second Shutdown.
func (r *Reconciler) waitOff(ctx context.Context, op *ichorv1alpha1.TalosOperation, mp *ichorv1alpha1.MachineProgress, b *secrets.Bundle) bool {
	m, err := r.machine(ctx, op, mp.Name)

	switch {
	case err != nil:
		mp.Message = "shutting down: the TalosMachine cannot be read: " + err.Error()

		return false
	case m == nil:
		mp.Phase, mp.Message = ichorv1alpha1.MachineSkipped, machineGone
		op.Status.ProgressSequence++

		return true
	}

	boot, answers := r.bootOf(ctx, m.Spec.Address, b)

	switch {
	case !answers:
		r.next(op, mp, stepOff, "powered off")

		return true
	case boot != mp.BootID:
		r.next(op, mp, stepOff, "went down and answers again on a new boot")

		return true
	}

	if mp.StepStartedAt != nil && r.now().Sub(mp.StepStartedAt.Time) > r.RebootTimeout {
		r.fail(op, mp, stepWaitOff, fmt.Sprintf("%s still answers on its old boot %s after its shutdown request; Ichor sends a Shutdown once: "+
			"check the node's console, or power it off by hand, then resume", m.Name, r.RebootTimeout))

		return false
	}

	mp.Message = "shutting down: the node still answers"

	return false
}

// powerOnPoll is how often a powered-off cluster is looked at: its power-on
// is a person's, and may be hours away.
func (r *Reconciler) powerOnPoll() time.Duration {
	return min(max(10*r.PollInterval, time.Second), 30*time.Second)
}

// waitPowerOn completes the operation once every machine answers on a new
// boot.
func (r *Reconciler) waitPowerOn(ctx context.Context, s *scope, b *secrets.Bundle) (ctrl.Result, error) {
	op := s.Object
	off, back := 0, 0

	for i := range op.Status.Machines {
		mp := &op.Status.Machines[i]
		if mp.Phase != ichorv1alpha1.MachineInProgress || mp.Step != stepOff {
			if mp.Phase == ichorv1alpha1.MachineDone {
				back++
			}

			continue
		}

		m, err := r.machine(ctx, op, mp.Name)
		if err != nil {
			return ctrl.Result{}, err
		}

		if m == nil {
			mp.Phase, mp.Message = ichorv1alpha1.MachineSkipped, machineGone
			op.Status.ProgressSequence++

			continue
		}

		boot, answers := r.bootOf(ctx, m.Spec.Address, b)
		if !answers || boot == mp.BootID {
			off++

			continue
		}

		now := metav1.NewTime(r.now())
		mp.Phase, mp.Step, mp.Message, mp.CompletedAt = ichorv1alpha1.MachineDone, stepDone, "answers again on a new boot", &now
		op.Status.ProgressSequence++
		back++

		if err := r.requestMachineReconcile(ctx, m); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "asking the machine reconciler to look at the machine", "machine", m.Name)
		}
	}

	if off > 0 {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			fmt.Sprintf("the cluster is shut down: %d machine(s) answer again, %d are still off; power them on (Ichor cannot): "+
				"the operation completes once each one answers on a new boot", back, off))

		return ctrl.Result{RequeueAfter: r.powerOnPoll()}, nil
	}

	return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("cluster %s was shut down and every machine (%d) answers again on a new boot", op.Spec.ClusterName, back))
}
