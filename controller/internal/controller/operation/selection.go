package operation

// Which machines the rollout covers (select step) and works on in a pass (rollout.Next).

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// candidate is a machine the rollout may work on now.
type candidate struct {
	p *ichorv1alpha1.MachineProgress
	m *ichorv1alpha1.TalosMachine
}

// activeMachines are the machines to work on in this pass, as rollout.Next
// chooses them from status.machines and the TalosMachines as they are now.
// held names the machines skipped for a hold annotation (marked Held);
// machines the operation no longer covers are marked Skipped.
func (r *Reconciler) activeMachines(ctx context.Context, op *ichorv1alpha1.TalosOperation) (active []candidate, held []string, err error) {
	slots := make([]rollout.Slot, len(op.Status.Machines))

	for i, p := range op.Status.Machines {
		slots[i].Progress = p

		if p.Phase != ichorv1alpha1.MachinePending && p.Phase != ichorv1alpha1.MachineInProgress && p.Phase != ichorv1alpha1.MachineHeld {
			continue
		}

		if slots[i].Machine, err = r.machine(ctx, op, p.Name); err != nil {
			return nil, nil, err
		}
	}

	choice := rollout.Next(slots, op.Spec.MaxUnavailable)

	for _, d := range choice.Dropped {
		p := &op.Status.Machines[d.Index]
		p.Phase, p.Message = ichorv1alpha1.MachineSkipped, d.Why
		op.Status.ProgressSequence++
	}

	for _, i := range choice.Held {
		p := &op.Status.Machines[i]
		if p.Phase != ichorv1alpha1.MachineHeld {
			p.Phase, p.Message = ichorv1alpha1.MachineHeld, "skipped while it carries the annotation "+rollout.HoldOf(slots[i].Machine)
			op.Status.ProgressSequence++
		}

		held = append(held, p.Name)
	}

	for _, i := range choice.Active {
		active = append(active, candidate{&op.Status.Machines[i], slots[i].Machine})
	}

	return active, held, nil
}

// workerBudget is how many workers the operation rolls out at a time.
func workerBudget(op *ichorv1alpha1.TalosOperation) int {
	workers := 0

	for _, p := range op.Status.Machines {
		if p.Role != ichorv1alpha1.RoleControlPlane {
			workers++
		}
	}

	return rollout.WorkerBudget(op.Spec.MaxUnavailable, workers)
}

// rolloutOrder sorts ms in the order a rollout takes them (rollout.Order):
// control planes first, then workers; within each, the machine on the
// controller's own Node last, then by orderBy's label value, then by name.
func rolloutOrder(ms []ichorv1alpha1.TalosMachine, orderBy, own string) {
	rollout.Order(ms, orderBy, own)
}

// selectMachines records the machines the rollout covers, in the order it
// takes them (rolloutOrder).
func (r *Reconciler) selectMachines(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	sel := labels.Everything()

	// A CA rotation covers every machine (the webhook refuses a selector).
	if op.Spec.MachineSelector != nil && !isRotation(op) {
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

	rolloutOrder(ms, op.Spec.OrderBy, r.OwnNode)

	op.Status.Machines = make([]ichorv1alpha1.MachineProgress, 0, len(ms))
	for _, m := range ms {
		op.Status.Machines = append(op.Status.Machines, ichorv1alpha1.MachineProgress{Name: m.Name, Role: m.Spec.Role, Phase: ichorv1alpha1.MachinePending})
	}

	op.Status.Step = opStepRollout
	what := "rolling the rendered configuration out to"

	switch {
	case isTalos(op):
		op.Status.Step = opStepPreCheck
		version, _ := talosTarget(op, s.Cluster)
		what = "upgrading Talos to " + version + " on"
	case isCARotation(op):
		initCAStages(op)
		r.startCAStage(op, caStagePrepare, "")
		what = "rotating " + describeCAs(op) + " in Talos's stages (accept the new, issue with the new, drop the old) on"
	case isKeyRotation(op):
		initCAStages(op)
		r.startCAStage(op, keyStagePrepare, "")
		what = "rotating " + describeRotation(op) + " (accept the new, issue with the new, write every Secret again, drop the old) on"
	case isKubernetes(op):
		initStages(op)
		r.startStage(op, ichorv1alpha1.KubernetesStagePreCheck, "")
		what = "upgrading Kubernetes to " + kubeupgrade.Describe(kubernetesTarget(op)) + " in three stages (control planes, kube-proxy and manifests, kubelets) on"
	}

	op.Status.ProgressSequence++
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("%s %d machine(s): control planes first, one at a time; then workers, %d at a time (spec.maxUnavailable)",
			what, len(ms), workerBudget(op)))

	return ichorreconcile.NextStep(), nil
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
