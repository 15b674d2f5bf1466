package lifecycle_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func setClusterPaused(t *testing.T, paused bool) {
	t.Helper()
	testenv.SetClusterPaused(t, k8s, ns, clusterName, paused)
}

// pausedRemoval removes the machine name on a paused cluster: the
// lifecycle reconciler marks it Paused and sends nothing (no drain, no
// Reset) until the pause ends, which it then ends.
func pausedRemoval(t *testing.T, name string, annotations map[string]string) {
	t.Helper()

	resets := rpcs(t, name, "Reset")

	setClusterPaused(t, true)
	t.Cleanup(func() { setClusterPaused(t, false) })

	// The marker: the lifecycle reconciler looked at the machine on the paused cluster.
	testenv.Eventually(t, waitTimeout, name+" shows the pause", func() error {
		if c := cond(getMachine(t, name), ichorv1alpha1.PausedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Paused %v", c)
		}

		return nil
	})

	remove(t, name, annotations, false)

	// One pass over the deleted machine, on the paused cluster.
	reconcileOnceInFreshController(t, name)

	if n := rpcs(t, name, "Reset") - resets; n != 0 {
		t.Fatalf("%s got %d Reset calls while its cluster was paused", name, n)
	}

	if m := getMachine(t, name); m.DeletionTimestamp == nil || m.Status.Removal != nil {
		t.Fatalf("the paused removal moved on: deletion %v, removal %+v", m.DeletionTimestamp, m.Status.Removal)
	}

	setClusterPaused(t, false)
}
