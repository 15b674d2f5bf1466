package talosmachine

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// benchMachines is the size of the benchmark's world; ICHOR_BENCH_MACHINES
// overrides it (the figure is 200).
func benchMachines(b *testing.B) int {
	n := 50

	if v := os.Getenv("ICHOR_BENCH_MACHINES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("ICHOR_BENCH_MACHINES=%q: want a number of at least 2", v)
		}
	}

	return n
}

// BenchmarkConvergeClusterPatch converges a no-reboot cluster-level patch
// onto a world of emulated configured machines (one control plane, the rest
// workers) in their own namespace: the time until every machine reports the
// new render applied, and the status writes and ApplyConfiguration calls per
// machine and change.
func BenchmarkConvergeClusterPatch(b *testing.B) {
	// The testing package runs a benchmark function more than once; the
	// world is built by the first run and kept for the others.
	if bench == nil {
		bench = newBenchWorld(b)
	}

	ctx := context.Background()
	n, ems, p := len(bench.ems), bench.ems, bench.patch
	hashes := bench.hashes

	for _, em := range ems {
		em.ResetRPCCounts()
	}

	writes := countWrites(b, benchNS)

	b.ResetTimer()

	for range b.N {
		testenv.Must(b, k8s.Get(ctx, client.ObjectKeyFromObject(p), p))
		bench.value++
		p.Spec.Documents[0].SysctlConfig.Params["net.core.somaxconn"] = strconv.Itoa(bench.value)
		testenv.Must(b, k8s.Update(ctx, p))

		hashes = allApplied(b, n, hashes)
	}

	b.StopTimer()
	writes.stop()

	bench.hashes = hashes
	total, applies := 0, 0

	for _, v := range writes.get() {
		total += v
	}

	for _, em := range ems {
		applies += em.RPCCounts()["/machine.MachineService/ApplyConfiguration"]
	}

	b.ReportMetric(float64(total)/float64(n*b.N), "writes/machine")
	b.ReportMetric(float64(applies)/float64(n*b.N), "applies/machine")
	b.ReportMetric(float64(n), "machines")
}

const benchNS = "bench"

// benchWorld is the benchmark's world, built once.
type benchWorld struct {
	ems    []*talosemu.Machine
	patch  *ichorv1alpha1.TalosConfigPatch
	hashes map[string]string
	value  int
}

var bench *benchWorld

func newBenchWorld(b *testing.B) *benchWorld {
	ctx := context.Background()
	n := benchMachines(b)

	testenv.Must(b, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNS}}))

	spec := &talosemu.Spec{Subnet: "127.0.78.0/24", Durations: talosemu.Durations{
		Install: talosemu.Duration(100 * time.Millisecond),
		Reboot:  talosemu.Duration(100 * time.Millisecond),
		Boot:    talosemu.Duration(50 * time.Millisecond),
	}}
	for i := range n {
		role := talosemu.RoleHintWorker
		if i == 0 {
			role = talosemu.RoleHintControlPlane
		}

		spec.Machines = append(spec.Machines, talosemu.MachineSpec{Name: fmt.Sprintf("b-%03d", i), Role: role})
	}

	dir, err := os.MkdirTemp("", "talosmachine-bench-")
	testenv.Must(b, err)

	// The world lives until the process ends, across the benchmark's runs.
	w, err := talosemu.Start(ctx, spec, dir)
	testenv.Must(b, err)

	c := testCluster()
	c.Namespace = benchNS

	sec, err := bundle.Secret(benchNS, c.Spec.SecretsBundleRef, theBun)
	testenv.Must(b, err)
	testenv.Must(b, k8s.Create(ctx, sec))
	testenv.Must(b, k8s.Create(ctx, c))

	// The control plane first: workers get their API certificate from it.
	provision := func(em *talosemu.Machine) error {
		tm := testMachine(em.Name(), em.IP())
		tm.Namespace = benchNS

		if em.Name() == "b-000" {
			tm.Spec.Role = ichorv1alpha1.RoleControlPlane
		}

		if err := configure(ctx, c, tm, em); err != nil {
			return err
		}

		if err := k8s.Create(ctx, tm); err != nil {
			return err
		}

		tm.Status.Stage = ichorv1alpha1.StageRunning
		apimeta.SetStatusCondition(&tm.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", Message: "benchmark setup",
		})

		return k8s.Status().Update(ctx, tm)
	}

	ems := w.Machines()
	testenv.Must(b, provision(ems[0]))

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 8)
	)

	for _, em := range ems[1:] {
		wg.Add(1)

		go func() {
			defer wg.Done()

			sem <- struct{}{}
			defer func() { <-sem }()

			if err := provision(em); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", em.Name(), err))
				mu.Unlock()
			}
		}()
	}

	wg.Wait()

	if len(errs) > 0 {
		b.Fatal(errs)
	}

	hashes := allApplied(b, n, nil)
	p := patchObj("bench-cluster", ichorv1alpha1.LayerCluster, ichorv1alpha1.PatchTarget{})
	p.Namespace = benchNS
	p.Spec.Documents = append(p.Spec.Documents, sysctl("net.core.somaxconn", "1000"))
	testenv.Must(b, k8s.Create(ctx, p))

	hashes = allApplied(b, n, hashes)

	return &benchWorld{ems: ems, patch: p, hashes: hashes, value: 1000}
}

// allApplied waits until each of the n benchmark machines reports a render
// applied other than the one in prev, and returns the applied hashes.
func allApplied(b *testing.B, n int, prev map[string]string) map[string]string {
	ctx := context.Background()
	var hashes map[string]string

	testenv.Eventually(b, waitTimeout, "every benchmark machine converged", func() error {
		var list ichorv1alpha1.TalosMachineList
		if err := k8s.List(ctx, &list, client.InNamespace(benchNS)); err != nil {
			return err
		}

		hashes = map[string]string{}

		for _, m := range list.Items {
			s := m.Status
			if s.AppliedConfigHash == "" || s.AppliedConfigHash != s.RenderedConfigHash || s.AppliedConfigHash == prev[m.Name] ||
				!apimeta.IsStatusConditionTrue(s.Conditions, ichorv1alpha1.ReadyCondition) {
				return fmt.Errorf("%s: rendered %s applied %s, conditions %v", m.Name, s.RenderedConfigHash, s.AppliedConfigHash, s.Conditions)
			}

			hashes[m.Name] = s.AppliedConfigHash
		}

		if len(hashes) != n {
			return fmt.Errorf("%d of %d machines", len(hashes), n)
		}

		return nil
	})

	return hashes
}
