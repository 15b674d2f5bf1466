package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// identityPaused reports whether the machine stands paused because the node
// at its address answered as another machine.
func identityPaused(m *ichorv1alpha1.TalosMachine) bool {
	c := findCond(m, ichorv1alpha1.IdentityConflictCondition)

	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ichorv1alpha1.IdentityMismatchReason
}

// verify checks that n reaches this machine before a step that changes it
// (talos.Node has no method that changes a node; Verified has). It
// returns nil when the step must not go on: on a mismatch (the machine is
// paused, with both identities named) and on the step that finds the right
// machine again after a pause (the pause is lifted; the work resumes at the
// next step, not in this one). err is a read that failed.
func (r *Reconciler) verify(ctx context.Context, m *ichorv1alpha1.TalosMachine, n *talos.Node, step string) (*talos.Verified, error) {
	v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(m))
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		r.identityMismatch(m, mm, step)

		return nil, nil
	}

	if err != nil {
		return nil, err
	}

	if identityPaused(m) {
		msg := fmt.Sprintf("the node at %s is this machine again (%s); the work resumes", m.Spec.Address, v.Identity())
		setCond(m, ichorv1alpha1.IdentityConflictCondition, metav1.ConditionFalse, ichorv1alpha1.IdentityConfirmedReason, msg)
		r.eventf(m, corev1.EventTypeNormal, ichorv1alpha1.IdentityConfirmedReason, step, "%s", msg)

		return nil, nil
	}

	return v, nil
}

// identityMismatch refuses the step: IdentityConflict (reason
// IdentityMismatch) names both identities and says how to go on, Ready says
// the machine is paused, and a Warning Event is left once per message.
func (r *Reconciler) identityMismatch(m *ichorv1alpha1.TalosMachine, mm *talos.IdentityMismatchError, step string) {
	msg := mm.Paused(m.Name, m.Spec.Address)

	was := findCond(m, ichorv1alpha1.IdentityConflictCondition)
	setCond(m, ichorv1alpha1.IdentityConflictCondition, metav1.ConditionTrue, ichorv1alpha1.IdentityMismatchReason, msg)
	progress(m, ichorv1alpha1.IdentityMismatchReason, msg)

	if m.Status.Removal != nil {
		m.Status.Removal.Message = step + " refused: " + msg
	}

	if was == nil || was.Message != msg {
		warnf(r, m, ichorv1alpha1.IdentityMismatchReason, step, "%s refused: %s", step, msg)
	}
}

// survivor dials another provisioned control plane of m's cluster whose etcd
// answers and which is verified to be its own machine; nil when none is.
func (r *Reconciler) survivor(ctx context.Context, m *ichorv1alpha1.TalosMachine, b *secrets.Bundle) (*talos.Verified, error) {
	cps, err := r.controlPlanes(ctx, m.Namespace, m.Spec.ClusterName, m.Name)
	if err != nil {
		return nil, err
	}

	for i := range cps {
		n, err := r.Nodes.Dial(ctx, cps[i].Spec.Address, b)
		if err != nil {
			continue
		}

		// A control plane whose address answers as another machine is no survivor.
		v, err := n.VerifyIdentity(ctx, talos.MachineIdentity(&cps[i]))
		if err == nil && v.EtcdHealthy(ctx) {
			return v, nil
		}

		n.Close()
	}

	return nil, nil
}

// removeMember removes m's etcd member through sv; a member whose name is not
// m's (another machine's member at a reused address) pauses m instead.
func (r *Reconciler) removeMember(ctx context.Context, m *ichorv1alpha1.TalosMachine, sv *talos.Verified, member *talos.EtcdMember, step string) (bool, error) {
	err := sv.RemoveEtcdMember(ctx, *member, talos.MachineIdentity(m))

	var mm *talos.IdentityMismatchError
	if errors.As(err, &mm) {
		r.identityMismatch(m, mm, step)

		return false, nil
	}

	return err == nil, err
}
