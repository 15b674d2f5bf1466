package talosupgrade_test

// The cluster shutdown runs last in this package (Go runs a package's tests
// in the order of their files): it powers the whole world off and on.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

const shutdownRPC = "/machine.MachineService/Shutdown"

var (
	workerNames       = []string{"w-1", "w-2"}
	controlPlaneNames = []string{"cp-1", "cp-2", "cp-3"}
)

// startShutdown creates a shutdown of the test cluster, as `ichor cluster shutdown` does.
func startShutdown(t testing.TB) string {
	t.Helper()

	op := nodeop.Shutdown(ns, clusterName)
	testenv.Must(t, k8s.Create(context.Background(), op))

	return op.Name
}

// allOff reports whether every machine of the world is powered off.
func allOff(t testing.TB) bool {
	t.Helper()

	for _, n := range machineNames {
		if emu(t, n).Powered() {
			return false
		}
	}

	return true
}

func powerOnAll(t testing.TB) {
	t.Helper()

	for _, n := range machineNames {
		testenv.Must(t, emu(t, n).PowerOn())
	}
}

// newShutdownCalls are the Shutdown requests each machine got after the counts in before.
func newShutdownCalls(t testing.TB, before map[string]int) map[string][]talosemu.ShutdownCall {
	t.Helper()

	out := map[string][]talosemu.ShutdownCall{}
	for _, n := range machineNames {
		out[n] = emu(t, n).ShutdownCalls()[before[n]:]
	}

	return out
}

// etcdVoters counts cp-1's etcd voters; an etcd that is still starting (the
// emulator answers Unavailable until its service runs) is an error to retry.
func etcdVoters(t testing.TB) (int, error) {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, "cp-1").IP(), theBun)
	if err != nil {
		return 0, err
	}

	defer n.Close()

	ms, err := n.EtcdMembers(context.Background())
	if err != nil {
		return 0, err
	}

	voters := 0

	for _, m := range ms {
		if !m.Learner {
			voters++
		}
	}

	return voters, nil
}

// TestClusterShutdown (architecture, "Upgrades", the shutdown paragraph):
// every worker gets one Shutdown (not forced: Talos drains it), all of them
// before any control plane; the control planes follow only once no worker
// answers, each with one forced Shutdown, the controller's own node (cp-2
// here) last; the operation holds the cluster lock while the cluster is
// off, removes no etcd member, and completes by itself once every machine
// answers on a new boot.
func TestClusterShutdown(t *testing.T) {
	waitHealthy(t)

	own := getMachine(t, "cp-2").Status.NodeName
	if own == "" {
		t.Fatal("cp-2 has no Node name")
	}

	restartOperations(t, own)

	before := map[string]int{}
	for _, n := range machineNames {
		before[n] = len(emu(t, n).ShutdownCalls())
	}

	name := startShutdown(t)

	var (
		mu       sync.Mutex
		problems []string
		steps    []string
	)

	stop := watchOp(name, func(op *ichorv1alpha1.TalosOperation) {
		mu.Lock()
		defer mu.Unlock()

		if len(steps) == 0 || steps[len(steps)-1] != op.Status.Step {
			steps = append(steps, op.Status.Step)
		}

		if op.Status.Step != "shutdown-control-planes" && op.Status.Step != "power-on" {
			return
		}

		// The control planes' stage begins only once every worker is off.
		for _, p := range op.Status.Machines {
			if p.Role != ichorv1alpha1.RoleControlPlane && p.Step != "off" && p.Step != "done" {
				problems = append(problems, fmt.Sprintf("step %s with worker %s at %s", op.Status.Step, p.Name, p.Step))
			}
		}
	})
	defer stop()

	testenv.Eventually(t, waitTimeout, "every machine off and the operation waiting for power-on", func() error {
		op := getOp(t, name)
		if op.Status.FailedStep != "" {
			t.Fatalf("paused: %s", op.Status.FailureReason)
		}

		if op.Status.Step != "power-on" || !allOff(t) {
			return fmt.Errorf("step %s, machines %+v", op.Status.Step, op.Status.Machines)
		}

		return nil
	})

	calls := newShutdownCalls(t, before)

	var lastWorker, firstCP, lastCP time.Time

	for _, n := range workerNames {
		if len(calls[n]) != 1 || calls[n][0].Force {
			t.Fatalf("worker %s got the Shutdown calls %+v, want one, not forced", n, calls[n])
		}

		if calls[n][0].At.After(lastWorker) {
			lastWorker = calls[n][0].At
		}
	}

	for _, n := range controlPlaneNames {
		if len(calls[n]) != 1 || !calls[n][0].Force {
			t.Fatalf("control plane %s got the Shutdown calls %+v, want one, forced", n, calls[n])
		}

		if at := calls[n][0].At; firstCP.IsZero() || at.Before(firstCP) {
			firstCP = at
		}

		if at := calls[n][0].At; at.After(lastCP) {
			lastCP = at
		}
	}

	if !lastWorker.Before(firstCP) {
		t.Errorf("a control plane was sent its Shutdown (%s) before the last worker (%s)", firstCP, lastWorker)
	}

	if !calls["cp-2"][0].At.Equal(lastCP) {
		t.Errorf("the controller's own node cp-2 was not the last: %+v", calls)
	}

	// The cluster is off; the shutdown holds the lock.
	if h, err := (&lock.Locker{Client: k8s}).Holder(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}); err != nil ||
		h != lock.OperationIdentity(ns, name) {
		t.Fatalf("the lock is held by %q (%v) while the cluster is off", h, err)
	}

	powerOnAll(t)
	op := waitPhase(t, name, ichorv1alpha1.OperationSucceeded)
	stop()

	mu.Lock()
	defer mu.Unlock()

	if len(problems) > 0 {
		t.Errorf("the control planes went before every worker was off: %v", problems)
	}

	if want := []string{"shutdown-workers", "shutdown-control-planes", "power-on"}; !containsInOrder(steps, want) {
		t.Errorf("steps %v, want %v in that order", steps, want)
	}

	for _, p := range op.Status.Machines {
		if p.Phase != ichorv1alpha1.MachineDone || p.Message != "answers again on a new boot" {
			t.Errorf("%s %+v", p.Name, p)
		}
	}

	if h, err := (&lock.Locker{Client: k8s}).Holder(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}); err != nil || h != "" {
		t.Errorf("the lock is still held by %q (%v)", h, err)
	}

	// No member was removed: the same three voters after power-on.
	testenv.Eventually(t, waitTimeout, "three etcd voters after power-on", func() error {
		if v, err := etcdVoters(t); err != nil || v != 3 {
			return fmt.Errorf("%d voters (%w)", v, err)
		}

		return nil
	})
	waitHealthy(t)
}

// containsInOrder reports whether want appears in got in that order.
func containsInOrder(got, want []string) bool {
	i := 0
	for _, s := range got {
		if i < len(want) && s == want[i] {
			i++
		}
	}

	return i == len(want)
}

// TestClusterShutdownChaos: with the controller killed after every reconcile
// (each reconcile a new controller process), every machine is still sent
// exactly one Shutdown (the emulator's counters), and the operation
// completes once the machines are powered on.
func TestClusterShutdownChaos(t *testing.T) {
	waitHealthy(t)
	stopOperations()

	before := map[string]int{}
	for _, n := range machineNames {
		before[n] = rpcs(t, n, shutdownRPC)
	}

	name := startShutdown(t)

	// The controller dies after each reconcile until every machine is off,
	// then (once a person powered them on) until the shutdown completes.
	run := func() ctrl.Result { return reconcileOnceInFreshController(t, name) }
	off := testworld.RunChaos(t, 2*waitTimeout, run, func() testworld.ChaosStep {
		op := getOp(t, name)
		st := testworld.OperationStep(op, nil)
		st.Done = op.Status.Step == "power-on" && allOff(t)

		return st
	})

	powerOnAll(t)

	on := testworld.RunChaos(t, 2*waitTimeout, run, func() testworld.ChaosStep { return testworld.OperationStep(getOp(t, name), nil) })
	t.Logf("completed after %d controller restarts", off.Deaths+on.Deaths)

	for _, m := range machineNames {
		if d := rpcs(t, m, shutdownRPC) - before[m]; d != 1 {
			t.Errorf("%s got %d Shutdown calls across the restarts, want exactly 1", m, d)
		}
	}

	if !slices.ContainsFunc(getOp(t, name).Status.Machines, func(p ichorv1alpha1.MachineProgress) bool { return p.Phase == ichorv1alpha1.MachineDone }) {
		t.Error("no machine is done")
	}

	waitHealthy(t)
}
