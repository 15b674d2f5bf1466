package lifecycle

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
)

// topology reports an even number of provisioned control planes as
// TopologyTransitioning on the cluster and keeps the cluster lock held by the
// control plane that made it even (so no other disruptive work starts until a
// removal makes it odd again: 3→4→3, never 3→2). It returns whether the count
// is even.
func (r *Reconciler) topology(ctx context.Context, m *ichorv1alpha1.TalosMachine) (bool, error) {
	cps, err := r.controlPlanes(ctx, m.Namespace, m.Spec.ClusterName, "")
	if err != nil {
		return false, err
	}

	n := 0

	for i := range cps {
		if cps[i].DeletionTimestamp.IsZero() {
			n++
		}
	}

	c, err := r.cluster(ctx, m)
	if err != nil {
		return false, client.IgnoreNotFound(err)
	}

	even := n%2 == 0 && n > 0
	before := c.DeepCopy()

	st, reason, msg := metav1.ConditionFalse, ichorv1alpha1.OddControlPlanesReason, fmt.Sprintf("%d control planes (declared %d)", n, c.Spec.ControlPlane.Count)
	if even {
		st, reason = metav1.ConditionTrue, ichorv1alpha1.EvenControlPlanesReason
		msg = fmt.Sprintf("%d control planes (declared %d): an even number exists only while one is replaced (add, then remove); "+
			"the cluster lock is held until the count is odd again", n, c.Spec.ControlPlane.Count)
	}

	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.TopologyTransitioningCondition, Status: st, Reason: reason, Message: msg, ObservedGeneration: c.Generation,
	})

	if !equality.Semantic.DeepEqual(before.Status, c.Status) {
		if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return even, err
		}
	}

	return even, nil
}

// takeOverTransition lets a control plane's join or removal take the cluster lock
// from the control plane whose join made the count even: that join is over,
// and this join or removal is what ends the transition.
func (r *Reconciler) takeOverTransition(ctx context.Context, m *ichorv1alpha1.TalosMachine, holder string) (bool, error) {
	kind, obj, ok := lock.ParseIdentity(holder)
	if !ok || kind != lock.KindMachine || obj.Namespace != m.Namespace || obj.Name == m.Name {
		return false, nil
	}

	var h ichorv1alpha1.TalosMachine
	if err := r.Client.Get(ctx, obj, &h); err != nil {
		return false, client.IgnoreNotFound(err)
	}

	if h.Spec.ClusterName != m.Spec.ClusterName || h.Spec.Role != ichorv1alpha1.RoleControlPlane || !provisioned(&h) || !h.DeletionTimestamp.IsZero() {
		return false, nil
	}

	released, err := r.Locker.Release(ctx, r.lockKey(m), holder)
	if err != nil {
		return false, err
	}

	return released, nil
}
