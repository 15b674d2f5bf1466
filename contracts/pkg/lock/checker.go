package lock

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// OperationLiveness is the liveness of an operation holding the lock: gone
// (nil), succeeded, failed, or paused on a failed step is Inactive; pending,
// running, waiting for credentials, or paused by a person is Active. A
// shutdown keeps the lock until it has completed, paused on a failed step
// too (architecture: "while the operation has not completed, the cluster
// lock refuses every other disruptive operation"): a cluster half shut down
// is no place for another operation; deleting the shutdown gives the lock up.
func OperationLiveness(op *ichorv1alpha1.TalosOperation) Liveness {
	if op == nil || op.DeletionTimestamp != nil {
		return Inactive
	}

	switch op.Status.Phase {
	case ichorv1alpha1.OperationSucceeded, ichorv1alpha1.OperationFailed:
		return Inactive
	case ichorv1alpha1.OperationPaused:
		if op.Spec.Type == ichorv1alpha1.OperationShutdown {
			return Active
		}

		if op.Status.FailureReason != "" || op.Status.FailedStep != "" {
			return Inactive
		}

		return Active
	default:
		return Active
	}
}

// ClientChecker decides liveness from the API: an operation by
// OperationLiveness; a machine's join or removal is Inactive once the
// TalosMachine is gone and otherwise left to the lease's expiry (the machine
// reconciler releases the lock when the join or removal ends); any other
// identity (the Cilium Helm Job, a foreign holder) is left to the expiry. The
// reader's scheme must know Ichor's types.
func ClientChecker(r client.Reader) Checker {
	return func(ctx context.Context, identity string) (Liveness, error) {
		kind, obj, ok := ParseIdentity(identity)
		if !ok {
			return Unknown, nil
		}

		switch kind {
		case KindOperation:
			var op ichorv1alpha1.TalosOperation
			if err := r.Get(ctx, obj, &op); err != nil {
				if apierrors.IsNotFound(err) {
					return Inactive, nil
				}

				return Unknown, fmt.Errorf("read TalosOperation %s: %w", obj, err)
			}

			return OperationLiveness(&op), nil
		case KindMachine:
			var m ichorv1alpha1.TalosMachine
			if err := r.Get(ctx, obj, &m); err != nil {
				if apierrors.IsNotFound(err) {
					return Inactive, nil
				}

				return Unknown, fmt.Errorf("read TalosMachine %s: %w", obj, err)
			}

			return Unknown, nil
		default:
			return Unknown, nil
		}
	}
}
