package operation

// One machine's step: the dispatch, the step record and what every step shares (dial, identity check, plans).

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// machineStep runs one step of one machine.
func (r *Reconciler) machineStep(ctx context.Context, s *scope, m *ichorv1alpha1.TalosMachine, mp *ichorv1alpha1.MachineProgress) (ctrl.Result, error) {
	op := s.Object

	if mp.Phase == ichorv1alpha1.MachinePending {
		now := metav1.NewTime(r.now())
		mp.Phase, mp.StartedAt = ichorv1alpha1.MachineInProgress, &now

		first := stepPlan
		switch {
		case isTalos(op):
			first = stepCheck
		case isNode(op):
			first = stepNodeCheck
		case isKubernetes(op):
			first = firstKubernetesStep(mp.Stage)
		}

		r.next(op, mp, first, "")
	}

	load := machinestate.Load
	if isKubernetes(op) {
		load = func(ctx context.Context, c, api client.Reader, m *ichorv1alpha1.TalosMachine, adjust ...func(*render.Input)) (*machinestate.State, error) {
			return r.loadKubernetesState(ctx, s, m)
		}
	}

	st, err := load(ctx, r.Client, r.APIReader, m)
	if err != nil {
		if machinestate.IsStalled(err) {
			r.fail(op, mp, mp.Step, err.Error())

			return ctrl.Result{}, nil
		}

		return ctrl.Result{}, err
	}

	w := &work{r: r, s: s, op: op, m: m, mp: mp, st: st}

	if isKubernetes(op) {
		if res, err, ok := w.kubernetesStep(ctx); ok {
			return res, err
		}
	}

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
	case stepCheck:
		return w.check(ctx)
	case stepUpgrade:
		return w.upgrade(ctx)
	case stepUpgrading:
		return w.upgradeUnknown()
	case stepRebootUpgrade:
		return w.rebootUpgrade(ctx)
	case stepWaitUpgrade:
		return w.waitUpgrade(ctx)
	case stepNodeCheck:
		return w.nodeCheck(ctx)
	case stepNodeReboot:
		return w.nodeReboot(ctx)
	case stepShutdown:
		return w.shutdown(ctx)
	case stepWaitOff:
		return w.waitOff(ctx)
	case stepReset:
		return w.reset(ctx)
	case stepWaitReset:
		return w.waitReset(ctx)
	default:
		r.fail(op, mp, mp.Step, "unknown step "+mp.Step)

		return ctrl.Result{}, nil
	}
}

// next moves a machine to a step.
func (r *Reconciler) next(op *ichorv1alpha1.TalosOperation, mp *ichorv1alpha1.MachineProgress, step, msg string) {
	now := metav1.NewTime(r.now())
	mp.Step, mp.StepStartedAt, mp.Message = step, &now, msg
	op.Status.ProgressSequence++
}

// work is one machine's step with what it needs.
type work struct {
	r  *Reconciler
	s  *scope
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

	return ichorreconcile.NextStep(), nil
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

	return w.r.now().Sub(w.mp.StepStartedAt.Time)
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

// finishMachine marks the machine done and asks its reconciler to look now.
func (w *work) finishMachine(ctx context.Context, msg string) (ctrl.Result, error) {
	now := metav1.NewTime(w.r.now())
	w.mp.Phase, w.mp.Step, w.mp.Message, w.mp.CompletedAt = ichorv1alpha1.MachineDone, stepDone, msg, &now
	w.op.Status.ProgressSequence++

	if err := w.r.requestMachineReconcile(ctx, w.m); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "asking the machine reconciler to look at the machine", "machine", w.m.Name)
	}

	return ichorreconcile.NextStep(), nil
}

// requestMachineReconcile asks the machine reconciler to look at m now.
func (r *Reconciler) requestMachineReconcile(ctx context.Context, m *ichorv1alpha1.TalosMachine) error {
	patch := client.MergeFrom(m.DeepCopy())

	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}

	m.Annotations[ichorv1alpha1.ReconcileRequestedAnnotation] = r.now().UTC().Format(time.RFC3339Nano)

	return r.Client.Patch(ctx, m, patch)
}
