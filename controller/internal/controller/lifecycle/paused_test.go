package lifecycle_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func setClusterPaused(t *testing.T, paused bool) {
	t.Helper()

	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &ichorv1alpha1.TalosCluster{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}, c); err != nil {
			return err
		}

		c.Spec.Paused = paused

		return k8s.Update(context.Background(), c)
	}))
}

// pausedStops (TestPausedStops_Lifecycle's step): while the cluster's
// spec.paused is true, a machine's removal sends nothing (no drain, no
// Reset) and the machine says so in its Paused condition; unpausing lets the
// removal run, with one Reset.
func pausedStops(t *testing.T) {
	waitProvisioned(t, "w-1")

	resets := rpcs(t, "w-1", "Reset")

	setClusterPaused(t, true)
	t.Cleanup(func() { setClusterPaused(t, false) })

	// The marker: the lifecycle reconciler looked at w-1 on the paused cluster.
	eventually(t, "w-1 shows the pause", func() error {
		if c := cond(getMachine(t, "w-1"), ichorv1alpha1.PausedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Paused %v", c)
		}

		return nil
	})

	remove(t, "w-1", nil, false)

	// One pass over the deleted machine, on the paused cluster.
	reconcileOnceInFreshController(t, "w-1")

	if n := rpcs(t, "w-1", "Reset") - resets; n != 0 {
		t.Fatalf("w-1 got %d Reset calls while its cluster was paused", n)
	}

	if m := getMachine(t, "w-1"); m.DeletionTimestamp == nil || m.Status.Removal.Phase != "" {
		t.Fatalf("the paused removal moved on: deletion %v, removal %+v", m.DeletionTimestamp, m.Status.Removal)
	}

	setClusterPaused(t, false)
	waitGone(t, "w-1")

	if n := rpcs(t, "w-1", "Reset") - resets; n != 1 {
		t.Errorf("w-1 got %d Reset calls after unpausing, want 1", n)
	}
}
