package operation

// The cluster lock: taking, renewing and giving it back.

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
)

func (r *Reconciler) clusterKey(op *ichorv1alpha1.TalosOperation) types.NamespacedName {
	return types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName}
}

// acquire takes or renews the lock; when another holder has it, the
// operation waits (Pending before its first step) naming the holder.
func (r *Reconciler) acquire(ctx context.Context, op *ichorv1alpha1.TalosOperation) (bool, error) {
	res, err := r.Locker.Acquire(ctx, r.clusterKey(op), lock.OperationIdentity(op.Namespace, op.Name))
	if errors.Is(err, lock.ErrConflict) {
		return false, nil
	}

	if err != nil {
		return false, fmt.Errorf("take the cluster lock: %w", err)
	}

	if !res.Acquired {
		msg := fmt.Sprintf("waits for the cluster lock of %s, held by %s", op.Spec.ClusterName, res.Holder)
		if c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.LockAcquiredCondition); c == nil || c.Message != msg {
			r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, ichorv1alpha1.ClusterLockHeldReason, "Lock", "%s", msg)
		}

		setCond(op, ichorv1alpha1.LockAcquiredCondition, metav1.ConditionFalse, ichorv1alpha1.ClusterLockHeldReason, msg)
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ClusterLockHeldReason, msg)

		if op.Status.StartedAt == nil {
			op.Status.Phase = ichorv1alpha1.OperationPending
		}

		return false, nil
	}

	if res.TakenOverFrom != "" {
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "LockTakenOver", "Lock",
			"took the cluster lock over from %s, whose work is no longer active", res.TakenOverFrom)
	}

	setCond(op, ichorv1alpha1.LockAcquiredCondition, metav1.ConditionTrue, "Held", "holds the cluster lock as "+res.Holder)

	if op.Status.StartedAt == nil {
		now := metav1.NewTime(r.now())
		op.Status.StartedAt = &now
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "Started", "Lock", "took the cluster lock of %s and started", op.Spec.ClusterName)
	}

	return true, nil
}

func (r *Reconciler) release(ctx context.Context, op *ichorv1alpha1.TalosOperation) error {
	if _, err := r.Locker.Release(ctx, r.clusterKey(op), lock.OperationIdentity(op.Namespace, op.Name)); err != nil && !errors.Is(err, lock.ErrConflict) {
		return err
	}

	return nil
}
