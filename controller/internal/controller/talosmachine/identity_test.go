package talosmachine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestNodeIdentityMismatchApplyRefused: a machine whose address answers as
// another machine (here: w-1's machine, at w-2's address) gets no
// configuration: the reconcile is refused before any apply, InSync (reason
// IdentityMismatch) names both SMBIOS UUIDs, and a Warning Event says so. The allowed
// neighbour: the same change reaches w-1 at its own address.
func TestNodeIdentityMismatchApplyRefused(t *testing.T) {
	ctx := context.Background()

	for _, n := range machineNames {
		inSync(t, n)
	}

	w1, err := world.Machine("w-1")
	testenv.Must(t, err)
	w2, err := world.Machine("w-2")
	testenv.Must(t, err)

	w2.ResetRPCCounts()

	// What an address reused by another machine looks like: the machine's
	// identity is w-1's, its address answers as w-2. It is created so (not
	// repointed): an approved machine's address cannot change.
	moved := testMachine("w-1-moved", w2.IP())
	moved.Spec.Identity.UUID = w1.UUID()
	moved.Spec.Hostname = "w-1"
	moved.Labels = map[string]string{"pool": "w-1"}
	testenv.Must(t, k8s.Create(ctx, moved))

	t.Cleanup(func() {
		_ = k8s.Delete(ctx, moved)

		// Later tests list the cluster's machines through the manager's cache.
		testenv.Eventually(t, waitTimeout, "w-1-moved gone from the cache", func() error {
			err := cached.Get(ctx, client.ObjectKeyFromObject(moved), &ichorv1alpha1.TalosMachine{})
			if apierrors.IsNotFound(err) {
				return nil
			}

			return fmt.Errorf("still there (%w)", err)
		})
	})

	moved.Status.Stage = ichorv1alpha1.StageRunning
	moved.Status.Installed = true
	moved.Status.NodeName = "w-1"
	apimeta.SetStatusCondition(&moved.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", Message: "test setup",
	})
	status := moved.Status
	testenv.UpdateStatus(t, k8s, moved, func(cur *ichorv1alpha1.TalosMachine) { cur.Status = status })

	refused := func() error {
		m := getMachine(t, "w-1-moved")

		// The configuration reconciler says so in its own condition
		// (IdentityConflict belongs to the lifecycle reconciler, not running here).
		c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.InSyncCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ichorv1alpha1.IdentityMismatchReason {
			return fmt.Errorf("InSync %+v", c)
		}

		if !strings.Contains(c.Message, w1.UUID()) || !strings.Contains(c.Message, w2.UUID()) {
			return fmt.Errorf("the condition does not name both UUIDs (%s, %s): %s", w1.UUID(), w2.UUID(), c.Message)
		}

		if r := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ReadyCondition); r == nil || r.Reason != ichorv1alpha1.IdentityMismatchReason {
			return fmt.Errorf("Ready %+v", r)
		}

		return nil
	}

	testenv.Eventually(t, waitTimeout, "w-1-moved refused for its identity", refused)
	awaitEvent(t, "w-1-moved", ichorv1alpha1.IdentityMismatchReason, w2.UUID())

	before := getMachine(t, "w-1-moved").Status.RenderedConfigHash
	w1Applies := applyCalls(t, "w-1")

	// A change both machines' renders carry: w-1 gets it; w-1-moved renders
	// it (the positive marker that it reconciled after the change) and is
	// refused again.
	p := patchObj("identity-neighbour", ichorv1alpha1.LayerSelector,
		ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "w-1"}}},
		sysctl("net.ipv4.tcp_keepalive_time", "600"))
	testenv.Must(t, k8s.Create(ctx, p))

	t.Cleanup(func() {
		_ = k8s.Delete(ctx, p)
		awaitNodeValue(t, "w-1", sysctlPath("net.ipv4.tcp_keepalive_time"), nil)
	})

	awaitNodeValue(t, "w-1", sysctlPath("net.ipv4.tcp_keepalive_time"), "600")

	if n := applyCalls(t, "w-1"); n <= w1Applies {
		t.Errorf("the right machine got no ApplyConfiguration (%d before, %d after)", w1Applies, n)
	}

	testenv.Eventually(t, waitTimeout, "w-1-moved rendered the change and stayed refused", func() error {
		if h := getMachine(t, "w-1-moved").Status.RenderedConfigHash; h == before {
			return fmt.Errorf("rendered hash still %s", h)
		}

		return refused()
	})

	if n := applyCalls(t, "w-2"); n != 0 {
		t.Fatalf("the node at w-1-moved's address (w-2) got %d ApplyConfiguration calls: the identity check did not stop them", n)
	}

	if _, p := nodeValues(t, "w-2"); p != nil {
		if v, ok := valueAt(p, sysctlPath("net.ipv4.tcp_keepalive_time")); ok {
			t.Fatalf("w-2 stores w-1-moved's configuration (%v)", v)
		}
	}
}
