package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-talosmachine,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=ichor.maesh.dev,resources=talosmachines,verbs=create;update;delete,versions=v1alpha1,name=vtalosmachine.ichor.maesh.dev,admissionReviewVersions=v1

// machineValidator checks TalosMachines: approval against the control-plane
// count and the approve verb, disk roles after install, finalizers, and
// deletion (protection, last control plane, quorum, last worker).
type machineValidator struct{ *checker }

func (v *machineValidator) subject(m *ichorv1alpha1.TalosMachine) subject {
	return subject{kind: "TalosMachine", resource: guard.ResourceTalosMachines, namespace: m.Namespace, name: m.Name, cluster: m.Spec.ClusterName}
}

func (v *machineValidator) facts(ctx context.Context, m *ichorv1alpha1.TalosMachine) (guard.MachineFacts, error) {
	facts, err := guard.LoadMachineFacts(ctx, v.reader, m)
	if err != nil {
		return facts, internal(err)
	}
	return facts, nil
}

// ValidateCreate checks a new TalosMachine.
func (v *machineValidator) ValidateCreate(ctx context.Context, m *ichorv1alpha1.TalosMachine) (admission.Warnings, error) {
	facts, err := v.facts(ctx, m)
	if err != nil {
		return nil, err
	}
	w, err := v.decide(ctx, v.subject(m), withApprovalRecord(ctx, nil, m, guard.ValidateMachine(nil, m, facts)), guard.MachineRequirements(nil, m))
	if err != nil {
		return w, err
	}
	return append(w, guard.MachineWarnings(nil, m)...), nil
}

// withApprovalRecord adds the refusal of an approval that does not record the requesting user.
func withApprovalRecord(ctx context.Context, old, m *ichorv1alpha1.TalosMachine, refusals []guard.Refusal) []guard.Refusal {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return refusals
	}
	if r := guard.CheckApprovalRecord(old, m, req.UserInfo.Username); r != nil {
		refusals = append(refusals, *r)
	}
	return refusals
}

// ValidateUpdate checks a change to a TalosMachine.
func (v *machineValidator) ValidateUpdate(ctx context.Context, old, m *ichorv1alpha1.TalosMachine) (admission.Warnings, error) {
	reqs := guard.FinalizerRequirements(m.Namespace, m.Spec.ClusterName, old.Finalizers, m.Finalizers)
	if old.DeletionTimestamp != nil {
		// Removing the finalizer is the removal's last step; the spec it acts
		// on stays as it was (spec.forceRemove aside).
		var refusals []guard.Refusal
		if r := guard.CheckDeletingUnchanged(old, m); r != nil {
			refusals = append(refusals, *r)
		}
		if r := guard.TrustRequirement(old, m); r != nil {
			reqs = append(reqs, *r)
		}
		return v.decide(ctx, v.subject(m), refusals, reqs)
	}
	facts, err := v.facts(ctx, m)
	if err != nil {
		return nil, err
	}
	reqs = append(reqs, guard.MachineRequirements(old, m)...)
	w, err := v.decide(ctx, v.subject(m), withApprovalRecord(ctx, old, m, guard.ValidateMachine(old, m, facts)), reqs)
	if err != nil {
		return w, err
	}
	return append(w, guard.MachineWarnings(old, m)...), nil
}

// ValidateDelete checks the deletion of a TalosMachine.
func (v *machineValidator) ValidateDelete(ctx context.Context, m *ichorv1alpha1.TalosMachine) (admission.Warnings, error) {
	facts, err := v.facts(ctx, m)
	if err != nil {
		return nil, err
	}
	return v.decide(ctx, v.subject(m), guard.ValidateMachineDelete(m, facts), nil)
}
