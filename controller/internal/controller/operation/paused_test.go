package operation_test

import (
	"context"
	"fmt"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// setClusterPaused sets the cluster's spec.paused and waits until the
// manager's cache shows it: the machines' Paused condition (written by the
// configuration reconciler from the same cache) follows it.
func setClusterPaused(t *testing.T, paused bool) {
	t.Helper()
	testenv.SetClusterPaused(t, k8s, ns, clusterName, paused)

	testenv.Eventually(t, waitTimeout, fmt.Sprintf("the machines show paused=%t", paused), func() error {
		for _, name := range machineNames {
			m := &ichorv1alpha1.TalosMachine{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
				return err
			}

			if got := apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.PausedCondition); got != paused {
				return fmt.Errorf("%s: Paused %t", name, got)
			}
		}

		return nil
	})
}

// TestPausedStops_Operation: a config operation of a paused cluster takes no
// lock and starts no step (its Paused condition says why); unpausing runs it.
func TestPausedStops_Operation(t *testing.T) {
	ctx := context.Background()

	setClusterPaused(t, true)
	t.Cleanup(func() { setClusterPaused(t, false) })

	testenv.Must(t, k8s.Create(ctx, configOp("paused-rollout")))

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, waitTimeout, "the operation shows the pause", func() error {
		op = getOp(t, "paused-rollout")
		if c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.PausedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Paused %v, phase %q", c, op.Status.Phase)
		}

		return nil
	})

	if op.Status.StartedAt != nil || apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.LockAcquiredCondition) != nil ||
		op.Status.Phase != ichorv1alpha1.OperationPending || len(op.Status.Machines) != 0 {
		t.Fatalf("an operation of a paused cluster started: %+v", op.Status)
	}

	setClusterPaused(t, false)
	op = waitPhase(t, "paused-rollout", ichorv1alpha1.OperationSucceeded)

	if apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.PausedCondition) != nil {
		t.Errorf("Paused stays after unpausing: %+v", op.Status.Conditions)
	}
}
