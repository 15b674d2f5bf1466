package operation

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/workload"
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

// apiServerDownPolls is how many polls in a row /readyz must fail for a
// kube-apiserver restart to count as seen.
const apiServerDownPolls = 3

// heldWait is how often an operation whose remaining machines are all held looks again.
const heldWait = time.Minute

// config runs one step of a config rollout.
func (r *Reconciler) config(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.op

	if op.Status.Step == "" {
		op.Status.Step = opStepSelect
	}

	if op.Status.Step == opStepSelect {
		return r.selectMachines(ctx, s)
	}

	active, held, err := r.activeMachines(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}

	if len(active) > 0 {
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

			if op.Status.FailedStep != "" {
				// Paused on this machine's failure: the others stay where they are.
				return ctrl.Result{}, nil
			}
		}

		return res, nil
	}

	if len(held) > 0 {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.HeldReason,
			"every other machine is done; waiting for the hold annotation to leave "+strings.Join(held, ", "))

		return ctrl.Result{RequeueAfter: heldWait}, nil
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

	r.finish(op, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("rolled the rendered configuration out to %d machine(s); %d already ran it", done, skipped))

	return ctrl.Result{}, nil
}

// candidate is a machine the rollout may work on now.
type candidate struct {
	p *ichorv1alpha1.MachineProgress
	m *ichorv1alpha1.TalosMachine
}

// activeMachines are the machines to work on in this pass: a control plane
// alone (control planes always go one at a time, before any worker), or the
// workers in progress plus, in order, pending ones up to spec.maxUnavailable
// (empty: 1). held names the machines skipped for a hold annotation; machines
// that are gone are marked Skipped.
func (r *Reconciler) activeMachines(ctx context.Context, op *ichorv1alpha1.TalosOperation) (active []candidate, held []string, err error) {
	var pending []candidate

	for i := range op.Status.Machines {
		p := &op.Status.Machines[i]
		if p.Phase != ichorv1alpha1.MachinePending && p.Phase != ichorv1alpha1.MachineInProgress && p.Phase != ichorv1alpha1.MachineHeld {
			continue
		}

		m, err := r.machine(ctx, op, p.Name)
		if err != nil {
			return nil, nil, err
		}

		if m == nil {
			p.Phase, p.Message = ichorv1alpha1.MachineSkipped, "the TalosMachine is gone"
			op.Status.ProgressSequence++

			continue
		}

		if p.Phase == ichorv1alpha1.MachineInProgress {
			// A started machine finishes, held or not.
			if p.Role == ichorv1alpha1.RoleControlPlane {
				return []candidate{{p, m}}, nil, nil
			}

			active = append(active, candidate{p, m})

			continue
		}

		if hold := holdOf(m); hold != "" {
			if p.Phase != ichorv1alpha1.MachineHeld {
				p.Phase, p.Message = ichorv1alpha1.MachineHeld, "skipped while it carries the annotation "+hold
				op.Status.ProgressSequence++
			}

			held = append(held, p.Name)

			continue
		}

		pending = append(pending, candidate{p, m})
	}

	budget := workerBudget(op)

	for _, c := range pending {
		if c.p.Role == ichorv1alpha1.RoleControlPlane {
			if len(active) == 0 {
				return []candidate{c}, held, nil
			}

			break
		}

		if len(active) >= budget {
			break
		}

		active = append(active, c)
	}

	return active, held, nil
}

// workerBudget is spec.maxUnavailable resolved against the operation's
// workers (a percentage rounds down), at least 1.
func workerBudget(op *ichorv1alpha1.TalosOperation) int {
	if op.Spec.MaxUnavailable == nil {
		return 1
	}

	workers := 0

	for _, p := range op.Status.Machines {
		if p.Role != ichorv1alpha1.RoleControlPlane {
			workers++
		}
	}

	v, err := intstr.GetScaledValueFromIntOrPercent(op.Spec.MaxUnavailable, workers, false)
	if err != nil || v < 1 {
		return 1
	}

	return v
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

func holdOf(m *ichorv1alpha1.TalosMachine) string {
	for _, a := range []string{ichorv1alpha1.HoldUpgradeAnnotation, ichorv1alpha1.HoldApplyAnnotation} {
		if _, ok := m.Annotations[a]; ok {
			return a
		}
	}

	return ""
}

// selectMachines records the machines the rollout covers, in the order it
// takes them: control planes first, then workers, each by spec.orderBy's
// label value, then by name.
func (r *Reconciler) selectMachines(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.op

	sel := labels.Everything()

	if op.Spec.MachineSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(op.Spec.MachineSelector); err != nil {
			r.fail(op, nil, opStepSelect, "spec.machineSelector is not a valid selector: "+err.Error())

			return ctrl.Result{}, nil //nolint:nilerr // the error is the operation's failureReason
		}
	}

	ms, err := machinestate.Machines(ctx, r.Client, op.Namespace, op.Spec.ClusterName, func(m *ichorv1alpha1.TalosMachine) bool {
		return rollout.Configured(m) && sel.Matches(labels.Set(m.Labels))
	})
	if err != nil {
		return ctrl.Result{}, err
	}

	slices.SortFunc(ms, func(a, b ichorv1alpha1.TalosMachine) int {
		return cmp.Or(
			cmp.Compare(roleOrder(a.Spec.Role), roleOrder(b.Spec.Role)),
			cmp.Compare(a.Labels[op.Spec.OrderBy], b.Labels[op.Spec.OrderBy]),
			cmp.Compare(a.Name, b.Name))
	})

	op.Status.Machines = make([]ichorv1alpha1.MachineProgress, 0, len(ms))
	for _, m := range ms {
		op.Status.Machines = append(op.Status.Machines, ichorv1alpha1.MachineProgress{Name: m.Name, Role: m.Spec.Role, Phase: ichorv1alpha1.MachinePending})
	}

	op.Status.Step = opStepRollout
	op.Status.ProgressSequence++
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("rolling the rendered configuration out to %d machine(s): control planes first, one at a time; then workers, %d at a time (spec.maxUnavailable)",
			len(ms), workerBudget(op)))

	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

func roleOrder(role string) int {
	if role == ichorv1alpha1.RoleControlPlane {
		return 0
	}

	return 1
}

func (r *Reconciler) machine(ctx context.Context, op *ichorv1alpha1.TalosOperation, name string) (*ichorv1alpha1.TalosMachine, error) {
	m := &ichorv1alpha1.TalosMachine{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}

		return nil, err
	}

	return m, nil
}

// machineStep runs one step of one machine.
func (r *Reconciler) machineStep(ctx context.Context, s *scope, m *ichorv1alpha1.TalosMachine, mp *ichorv1alpha1.MachineProgress) (ctrl.Result, error) {
	op := s.op

	if mp.Phase == ichorv1alpha1.MachinePending {
		now := metav1.NewTime(r.Now())
		mp.Phase, mp.StartedAt = ichorv1alpha1.MachineInProgress, &now
		r.next(op, mp, stepPlan, "")
	}

	st, err := machinestate.Load(ctx, r.Client, r.APIReader, m)
	if err != nil {
		if machinestate.IsStalled(err) {
			r.fail(op, mp, mp.Step, err.Error())

			return ctrl.Result{}, nil
		}

		return ctrl.Result{}, err
	}

	w := &work{r: r, op: op, m: m, mp: mp, st: st}

	switch mp.Step {
	case stepPlan:
		return w.plan(ctx)
	case stepDrain:
		return w.drain(ctx)
	case stepApply:
		return w.apply(ctx)
	case stepReboot:
		return w.reboot(ctx)
	case stepWaitBoot:
		return w.waitBoot(ctx)
	case stepUncordon:
		return w.uncordon(ctx)
	case stepWaitAPIServer, stepAPIServerDown, stepAPIServerBack:
		return w.waitAPIServer(ctx)
	default:
		r.fail(op, mp, mp.Step, "unknown step "+mp.Step)

		return ctrl.Result{}, nil
	}
}

// next moves a machine to a step.
func (r *Reconciler) next(op *ichorv1alpha1.TalosOperation, mp *ichorv1alpha1.MachineProgress, step, msg string) {
	now := metav1.NewTime(r.Now())
	mp.Step, mp.StepStartedAt, mp.Message = step, &now, msg
	op.Status.ProgressSequence++
}

// work is one machine's step with what it needs.
type work struct {
	r  *Reconciler
	op *ichorv1alpha1.TalosOperation
	m  *ichorv1alpha1.TalosMachine
	mp *ichorv1alpha1.MachineProgress
	st *machinestate.State
}

func (w *work) poll() ctrl.Result { return ctrl.Result{RequeueAfter: w.r.PollInterval} }

func (w *work) fail(msg string) (ctrl.Result, error) {
	w.r.fail(w.op, w.mp, w.mp.Step, msg)

	return ctrl.Result{}, nil
}

func (w *work) next(step, msg string) (ctrl.Result, error) {
	w.r.next(w.op, w.mp, step, msg)

	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

func (w *work) cp() bool { return w.m.Spec.Role == ichorv1alpha1.RoleControlPlane }

// dial connects to the machine's node and checks that it is this machine
// (talos.Verified is what can apply or reboot). A node that answers as
// another machine is an *talos.IdentityMismatchError: the step fails
// with both identities named (mismatch), and nothing is sent.
func (w *work) dial(ctx context.Context) (*talos.Verified, error) {
	n, err := w.r.Nodes.Dial(ctx, w.m.Spec.Address, w.st.Bundle)
	if err != nil {
		return nil, err
	}

	v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(w.m))
	if err != nil {
		n.Close()

		return nil, err
	}

	return v, nil
}

// mismatch fails the step of a machine whose address answers as another
// machine, with a Warning Event on both objects; the operation pauses on the
// failed step (resumed with the resume annotation once the address is right).
func (w *work) mismatch(mm *talos.IdentityMismatchError) (ctrl.Result, error) {
	msg := fmt.Sprintf("%s refused for %s: %s. Check which machine answers on %s, then resume the operation",
		w.mp.Step, w.m.Name, mm.Error(), w.m.Spec.Address)
	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, ichorv1alpha1.IdentityMismatchReason, "Verify", "%s", msg)

	return w.fail(msg)
}

// diff plans the render against the node's running and stored configurations.
func (w *work) diff(ctx context.Context, n *talos.Verified) (running, stored plan.Plan, err error) {
	active, persistent, err := n.Config(ctx)
	if err != nil {
		return plan.Plan{}, plan.Plan{}, err
	}

	if running, err = plan.FromBytes(w.st.Result.Bytes, active, w.m.Spec.Role); err != nil {
		return plan.Plan{}, plan.Plan{}, err
	}

	stored = running
	if persistent != nil {
		if stored, err = plan.FromBytes(w.st.Result.Bytes, persistent, w.m.Spec.Role); err != nil {
			return plan.Plan{}, plan.Plan{}, err
		}
	}

	return running, stored, nil
}

func (w *work) elapsed() time.Duration {
	if w.mp.StepStartedAt == nil {
		return 0
	}

	return w.r.Now().Sub(w.mp.StepStartedAt.Time)
}

// nodePlans connects to the node and plans the render against its running
// and stored configurations; failure says what went wrong (nothing is left open then).
func (w *work) nodePlans(ctx context.Context) (n *talos.Verified, running, stored plan.Plan, failure string) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		msg := fmt.Sprintf("%s refused for %s: %s. Check which machine answers on %s, then resume the operation", w.mp.Step, w.m.Name, mm.Error(), w.m.Spec.Address)
		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, ichorv1alpha1.IdentityMismatchReason, "Verify", "%s", msg)

		return nil, plan.Plan{}, plan.Plan{}, msg
	}

	if err != nil {
		return nil, plan.Plan{}, plan.Plan{}, "cannot reach the node: " + talos.Message(err)
	}

	if running, stored, err = w.diff(ctx, n); err != nil {
		n.Close()

		return nil, plan.Plan{}, plan.Plan{}, "cannot read the node's configuration: " + talos.Message(err)
	}

	return n, running, stored, ""
}

// plan decides what the machine needs; a machine that runs the render is skipped.
func (w *work) plan(ctx context.Context) (ctrl.Result, error) {
	n, running, stored, failure := w.nodePlans(ctx)
	if failure != "" {
		return w.fail(failure)
	}
	defer n.Close()

	if running.Action == plan.ActionNone && stored.Action == plan.ActionNone {
		w.mp.Phase, w.mp.Message = ichorv1alpha1.MachineSkipped, "the node runs the rendered configuration"
		w.mp.Step = stepDone
		w.op.Status.ProgressSequence++

		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}

	p := running
	if p.Action == plan.ActionNone {
		p = stored
	}

	summary := fmt.Sprintf("%s: %s", p.Class, strings.Join(firstPaths(p.AllPaths(), 10), ", "))

	if p.Reboot {
		if w.cp() {
			if msg := w.r.etcdHealthy(ctx, w.op, w.st.Bundle); msg != "" {
				return w.fail("etcd is not healthy on every control plane, so rebooting " + w.m.Name + " could lose quorum: " + msg)
			}
		}

		return w.next(stepDrain, summary)
	}

	return w.next(stepApply, summary)
}

func firstPaths(paths []string, n int) []string {
	if len(paths) > n {
		return append(slices.Clone(paths[:n]), fmt.Sprintf("and %d more", len(paths)-n))
	}

	return paths
}

// drain runs the storage hook, then cordons and drains the machine's Node.
func (w *work) drain(ctx context.Context) (ctrl.Result, error) {
	done, msg, err := w.r.Storage.Evacuate(ctx, w.m)
	if err != nil {
		return w.fail("the storage hook failed: " + err.Error())
	}

	if !done {
		w.mp.Message = "waiting for the storage system to evacuate the node: " + msg

		return w.poll(), nil
	}

	k, err := w.r.workload(ctx, w.op, w.st.Bundle)
	if err != nil {
		return w.fail("cannot reach the cluster's Kubernetes API to drain the node: " + err.Error())
	}

	node, err := workload.NodeByAddress(ctx, k, w.m.Spec.Address)
	if err != nil {
		return w.fail(err.Error())
	}

	if node == nil {
		return w.next(stepApply, "no Kubernetes Node has the machine's address: nothing to drain")
	}

	if own := w.m.Status.NodeName; own != "" && !strings.EqualFold(own, node.Name) {
		return w.mismatch(&talos.IdentityMismatchError{
			Where: "Kubernetes Node " + node.Name + " at " + w.m.Spec.Address, Want: talos.MachineIdentity(w.m),
			Got: talos.Identity{NodeName: node.Name}, Fields: []string{"Node name"},
		})
	}

	if err := workload.Drain(ctx, k, node, w.r.DrainTimeout, false); err != nil {
		return w.fail(fmt.Sprintf("draining Node %s did not finish: %v (check PodDisruptionBudgets and pods without a controller)", node.Name, err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "Drained", "Drain", "cordoned and drained Node %s of machine %s", node.Name, w.m.Name)

	return w.next(stepApply, "cordoned and drained Node "+node.Name)
}

// apply sends the render: STAGED before a reboot, else in the plan's mode.
func (w *work) apply(ctx context.Context) (ctrl.Result, error) {
	n, running, stored, failure := w.nodePlans(ctx)
	if failure != "" {
		return w.fail(failure)
	}
	defer n.Close()

	p := running
	if p.Action == plan.ActionNone {
		p = stored
	}

	mode := p.Mode
	if !p.Reboot && mode == machine.ApplyConfigurationRequest_STAGED && running.Action != plan.ActionNone {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	if p.Action != plan.ActionNone || stored.Action != plan.ActionNone {
		warnings, err := n.Apply(ctx, w.st.Result.Bytes, mode)
		if len(warnings) > 0 {
			w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, "ApplyWarnings", "DryRun",
				"the node %s warns about the configuration: %s", w.m.Name, strings.Join(warnings, "; "))
		}

		if err != nil {
			return w.fail("the node refused the configuration: " + talos.Message(err))
		}

		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, ichorv1alpha1.AppliedReason, "Apply",
			"applied the rendered configuration to %s in mode %s", w.m.Name, mode)
	}

	switch {
	case p.Reboot:
		return w.next(stepReboot, fmt.Sprintf("applied in mode %s; rebooting", mode))
	case p.Class == plan.APIServerRestart && w.cp():
		return w.next(stepWaitAPIServer, "applied; waiting for the kube-apiserver to restart and answer /readyz")
	default:
		return w.finishMachine(ctx, fmt.Sprintf("applied in mode %s", mode))
	}
}

func (w *work) reboot(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	if err := n.Reboot(ctx); err != nil {
		return w.fail(talos.Message(err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "Rebooting", "Reboot", "rebooting %s to run the staged configuration", w.m.Name)

	return w.next(stepWaitBoot, "rebooting")
}

// waitBoot waits until the node runs the render (a staged configuration
// runs only after the reboot) and Talos reports it running and ready.
func (w *work) waitBoot(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		return w.fail(fmt.Sprintf("the node did not come back running the rendered configuration within %s of its reboot", w.r.RebootTimeout))
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		w.mp.Message = "rebooting: the node does not answer yet"

		return w.poll(), nil
	}
	defer n.Close()

	stage, ready, err := n.Stage(ctx)
	if err != nil || stage != ichorv1alpha1.StageRunning || !ready {
		w.mp.Message = fmt.Sprintf("rebooting: the node is %s (ready %t)", orUnknown(stage), ready)

		return w.poll(), nil
	}

	running, _, err := w.diff(ctx, n)
	if err != nil || running.Action != plan.ActionNone {
		w.mp.Message = "rebooting: the node does not run the rendered configuration yet"

		return w.poll(), nil
	}

	return w.next(stepUncordon, "the node runs the rendered configuration")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}

	return s
}

// uncordon waits for the Node to be Ready, makes it schedulable, and for a
// control plane waits for its etcd member to answer.
func (w *work) uncordon(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		return w.fail(fmt.Sprintf("the node's Kubernetes Node or etcd member was not back within %s", w.r.RebootTimeout))
	}

	k, err := w.r.workload(ctx, w.op, w.st.Bundle)
	if err != nil {
		w.mp.Message = "waiting for the cluster's Kubernetes API: " + err.Error()

		return w.poll(), nil //nolint:nilerr // a node or API not back yet is waited for, not an error
	}

	node, err := workload.NodeByAddress(ctx, k, w.m.Spec.Address)
	if err != nil {
		w.mp.Message = err.Error()

		return w.poll(), nil //nolint:nilerr // a node or API not back yet is waited for, not an error
	}

	if node != nil {
		if own := w.m.Status.NodeName; own != "" && !strings.EqualFold(own, node.Name) {
			return w.mismatch(&talos.IdentityMismatchError{
				Where: "Kubernetes Node " + node.Name + " at " + w.m.Spec.Address, Want: talos.MachineIdentity(w.m),
				Got: talos.Identity{NodeName: node.Name}, Fields: []string{"Node name"},
			})
		}

		if !workload.NodeReady(node) {
			w.mp.Message = "waiting for Node " + node.Name + " to be Ready"

			return w.poll(), nil
		}

		if node.Spec.Unschedulable {
			if err := workload.Uncordon(ctx, k, node); err != nil {
				w.mp.Message = err.Error()

				return w.poll(), nil //nolint:nilerr // a node or API not back yet is waited for, not an error
			}
		}
	}

	if w.cp() {
		n, err := w.dial(ctx)
		if mm := talos.AsIdentityMismatch(err); mm != nil {
			return w.mismatch(mm)
		}

		if err != nil {
			w.mp.Message = "waiting for the node's etcd member: " + talos.Message(err)

			return w.poll(), nil
		}

		healthy := n.EtcdHealthy(ctx)
		n.Close()

		if !healthy {
			w.mp.Message = "waiting for the node's etcd member to answer"

			return w.poll(), nil
		}
	}

	return w.finishMachine(ctx, "rebooted into the rendered configuration")
}

// waitAPIServer waits for the control plane's own kube-apiserver to restart
// and answer /readyz (Talos re-renders its static pod; the kubelet restarts it
// when it next reads the manifest, so the restart may come some seconds after
// the apply). The restart counts as seen when /readyz fails for
// apiServerDownPolls polls in a row (one failed poll is a blip, not the
// restart); once seen, the server must come back. Never seen away, it must
// stay ready for APIServerSettle after the apply (a restart quicker than the
// polls). Both are measured from the machine's start, which the apply follows.
func (w *work) waitAPIServer(ctx context.Context) (ctrl.Result, error) {
	since := w.r.Now().Sub(w.mp.StartedAt.Time)
	if limit := w.r.APIServerTimeout + w.r.APIServerSettle; since > limit {
		return w.fail(fmt.Sprintf("the kube-apiserver on %s did not restart and answer /readyz within %s of the apply", w.m.Spec.Address, limit))
	}

	err := w.apiServerReady(ctx)

	switch w.mp.Step {
	case stepWaitAPIServer:
		switch {
		case err != nil:
			return w.next(stepAPIServerDown, "the kube-apiserver does not answer /readyz: "+err.Error())
		case since < w.r.APIServerSettle:
			w.mp.Message = "the kube-apiserver answers /readyz; watching it until its restart shows or " + w.r.APIServerSettle.String() + " pass"

			return w.poll(), nil
		default:
			return w.finishMachine(ctx, "the kube-apiserver answered /readyz throughout "+w.r.APIServerSettle.String()+" (a restart quicker than the polls)")
		}
	case stepAPIServerDown:
		switch {
		case err == nil:
			// A blip: back to watching (the settle time still runs from the start).
			return w.next(stepWaitAPIServer, "the kube-apiserver answers /readyz again after a failed poll")
		case w.elapsed() >= apiServerDownPolls*w.r.PollInterval:
			return w.next(stepAPIServerBack, "the kube-apiserver restarts")
		default:
			return w.poll(), nil
		}
	default: // stepAPIServerBack
		if err != nil {
			w.mp.Message = "waiting for /readyz: " + err.Error()

			return w.poll(), nil //nolint:nilerr // a kube-apiserver that restarts is waited for
		}

		return w.finishMachine(ctx, "the kube-apiserver restarted and answers /readyz")
	}
}

func (w *work) apiServerReady(ctx context.Context) error {
	cfg, err := w.r.workloadConfig(ctx, w.op, w.st.Bundle)
	if err != nil {
		return err
	}

	return workload.APIServerReady(ctx, cfg, w.m.Spec.Address)
}

// finishMachine marks the machine done and asks its reconciler to look now.
func (w *work) finishMachine(ctx context.Context, msg string) (ctrl.Result, error) {
	now := metav1.NewTime(w.r.Now())
	w.mp.Phase, w.mp.Step, w.mp.Message, w.mp.CompletedAt = ichorv1alpha1.MachineDone, stepDone, msg, &now
	w.op.Status.ProgressSequence++

	if err := w.r.requestMachineReconcile(ctx, w.m); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "asking the machine reconciler to look at the machine", "machine", w.m.Name)
	}

	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// controlPlanes are the cluster's configured control planes.
func (r *Reconciler) controlPlanes(ctx context.Context, op *ichorv1alpha1.TalosOperation) ([]ichorv1alpha1.TalosMachine, error) {
	return machinestate.Machines(ctx, r.Client, op.Namespace, op.Spec.ClusterName, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Spec.Role == ichorv1alpha1.RoleControlPlane && rollout.Configured(m)
	})
}

// etcdHealthy is "" when every control plane's etcd member answers, else
// which do not.
func (r *Reconciler) etcdHealthy(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) string {
	cps, err := r.controlPlanes(ctx, op)
	if err != nil {
		return err.Error()
	}

	var bad []string

	for _, cp := range cps {
		n, err := r.Nodes.Dial(ctx, cp.Spec.Address, b)
		if err != nil {
			bad = append(bad, cp.Name)

			continue
		}

		if !n.EtcdHealthy(ctx) {
			bad = append(bad, cp.Name)
		}

		n.Close()
	}

	if len(bad) > 0 {
		return "no answer from the etcd member of " + strings.Join(bad, ", ")
	}

	return ""
}

func (r *Reconciler) workloadConfig(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) (*rest.Config, error) {
	cps, err := r.controlPlanes(ctx, op)
	if err != nil {
		return nil, err
	}

	return workload.Config(ctx, r.Nodes, op.Spec.ClusterName, cps, b)
}

func (r *Reconciler) workload(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) (kubernetes.Interface, error) {
	cfg, err := r.workloadConfig(ctx, op, b)
	if err != nil {
		return nil, err
	}

	return kubernetes.NewForConfig(cfg)
}
