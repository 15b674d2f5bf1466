package talosmachine

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// writeCounter counts the updates the API server reports for each
// TalosMachine of a namespace (every status patch is one), from a watch.
type writeCounter struct {
	mu     sync.Mutex
	writes map[string]int
	cancel context.CancelFunc
	done   chan struct{}
}

func countWrites(t testing.TB, namespace string) *writeCounter {
	t.Helper()

	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	testenv.Must(t, err)

	ctx, cancel := context.WithCancel(context.Background())

	w, err := wc.Watch(ctx, &ichorv1alpha1.TalosMachineList{}, client.InNamespace(namespace))
	if err != nil {
		cancel()
		t.Fatal(err)
	}

	c := &writeCounter{writes: map[string]int{}, cancel: cancel, done: make(chan struct{})}

	go func() {
		defer close(c.done)

		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*ichorv1alpha1.TalosMachine)
			if ev.Type == watch.Modified && ok {
				c.mu.Lock()
				c.writes[m.Name]++
				c.mu.Unlock()
			}
		}
	}()

	go func() {
		<-ctx.Done()
		w.Stop()
	}()

	t.Cleanup(c.stop)

	return c
}

func (c *writeCounter) stop() {
	c.cancel()
	<-c.done
}

func (c *writeCounter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()

	out := make(map[string]int, len(c.writes))
	for k, v := range c.writes {
		out[k] = v
	}

	return out
}

// TestTalosMachineReconciler_OneStatusWritePerChange: a no-reboot cluster
// patch costs each machine one status write, one dry run and one apply, and
// nothing more while the polls that follow find the node in sync.
func TestTalosMachineReconciler_OneStatusWritePerChange(t *testing.T) {
	ctx := context.Background()
	for _, n := range machineNames {
		inSync(t, n)
	}

	for _, n := range machineNames {
		em, err := world.Machine(n)
		testenv.Must(t, err)
		em.ResetRPCCounts()
	}

	writes := countWrites(t, ns)
	key := "net.core.netdev_max_backlog"
	p := patchObj("writes-cluster", ichorv1alpha1.LayerCluster, ichorv1alpha1.PatchTarget{}, sysctl(key, "5000"))
	testenv.Must(t, k8s.Create(ctx, p))

	for _, n := range machineNames {
		awaitNodeValue(t, n, sysctlPath(key), "5000")
		inSync(t, n)
	}

	for _, n := range machineNames {
		pollsPass(t, n)
	}

	writes.stop()

	got := writes.get()
	for _, n := range machineNames {
		if got[n] != 1 {
			t.Errorf("%s: %d status writes for one change, want 1", n, got[n])
		}

		if a := applyCalls(t, n); a != 2 {
			t.Errorf("%s: %d ApplyConfiguration calls, want 2 (the dry run and the apply)", n, a)
		}
	}

	testenv.Must(t, k8s.Delete(ctx, p))

	for _, n := range machineNames {
		awaitNodeValue(t, n, sysctlPath(key), nil)
		inSync(t, n)
	}
}
