package discovery

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"k8s.io/client-go/util/retry"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestPausedStops_Discovery: a paused cluster's addresses are not probed (no
// RPC reaches the node) and no machine is created; unpausing discovers it.
func TestPausedStops_Discovery(t *testing.T) {
	ctx := context.Background()
	held := emMachine("held")
	held.ResetRPCCounts()

	before := reconcile.PausedSkips(ControllerName)

	c := testCluster("paused", ichorv1alpha1.DiscoverySpec{Addresses: []string{held.IP()}})
	c.Spec.Paused = true
	testenv.Must(t, k8s.Create(ctx, c))

	testenv.Eventually(t, waitTimeout, "discovery looks at the paused cluster", func() error {
		if reconcile.PausedSkips(ControllerName) <= before {
			return errors.New("no paused reconcile yet")
		}

		return nil
	})

	if n := len(held.RPCCounts()); n != 0 {
		t.Fatalf("the node of a paused cluster was probed: %v", held.RPCCounts())
	}

	if ms := machinesOf(t, "paused"); len(ms) != 0 {
		t.Fatalf("a paused cluster got %d machines", len(ms))
	}

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, "paused")
		cur.Spec.Paused = false

		return k8s.Update(ctx, cur)
	}))

	testenv.Eventually(t, waitTimeout, "the held machine discovered after unpausing", func() error {
		if ms := machinesOf(t, "paused"); len(ms) != 1 {
			return fmt.Errorf("%d machines", len(ms))
		}

		return nil
	})
}
