package talosmachine

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// setPaused sets the cluster's spec.paused and waits until the manager's
// cache, which the reconciler reads, shows it.
func setPaused(t *testing.T, paused bool) {
	t.Helper()

	key := types.NamespacedName{Namespace: ns, Name: clusterName}

	testenv.SetClusterPaused(t, k8s, ns, clusterName, paused)

	testenv.Eventually(t, 0, "the cache shows the pause", func() error {
		c := &ichorv1alpha1.TalosCluster{}
		if err := cached.Get(context.Background(), key, c); err != nil {
			return err
		}

		if c.Spec.Paused != paused {
			return errors.New("not yet")
		}

		return nil
	})
}

// TestPausedStops_TalosMachine: while the cluster's spec.paused is true a new
// patch reaches no node (no ApplyConfiguration); unpausing applies it.
func TestPausedStops_TalosMachine(t *testing.T) {
	ctx := context.Background()
	inSync(t, "w-1")

	before := reconcile.PausedSkips(ControllerName)

	setPaused(t, true)
	t.Cleanup(func() { setPaused(t, false) })

	// The manager's reconciler has looked at a paused machine.
	testenv.Eventually(t, 0, "a paused reconcile", func() error {
		if reconcile.PausedSkips(ControllerName) <= before {
			return errors.New("none yet")
		}

		return nil
	})

	applies := applyCalls(t, "w-1")
	p := patchObj("paused-sysctl", ichorv1alpha1.LayerMachine, ichorv1alpha1.PatchTarget{MachineName: "w-1"}, sysctl("net.ipv4.tcp_keepalive_time", "600"))
	testenv.Must(t, k8s.Create(ctx, p))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })

	// A pass over the machine after the patch exists, on the paused cluster
	// (the cache already shows both: the manager's reconciler sees no less).
	testenv.Eventually(t, 0, "the cache holds the patch", func() error {
		return cached.Get(ctx, types.NamespacedName{Namespace: ns, Name: p.Name}, &ichorv1alpha1.TalosConfigPatch{})
	})

	r := &Reconciler{Client: cached, APIReader: k8s, Recorder: nil, Nodes: &talos.Dialer{}, DriftInterval: driftInterval}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "w-1"}})
	testenv.Must(t, err)

	if n := applyCalls(t, "w-1"); n != applies {
		t.Fatalf("w-1 got %d ApplyConfiguration calls while its cluster was paused", n-applies)
	}

	setPaused(t, false)
	awaitNodeValue(t, "w-1", sysctlPath("net.ipv4.tcp_keepalive_time"), "600")

	// Leave w-1 as the other tests expect it: without the patch, in sync.
	testenv.Must(t, k8s.Delete(ctx, p))
	awaitNodeValue(t, "w-1", sysctlPath("net.ipv4.tcp_keepalive_time"), nil)
	inSync(t, "w-1")
}
