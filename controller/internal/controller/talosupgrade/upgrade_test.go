package talosupgrade_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// watchOp polls an operation until stop, calling see with each snapshot.
func watchOp(name string, see func(op *ichorv1alpha1.TalosOperation)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())

	var wg sync.WaitGroup

	wg.Add(1)

	go func() {
		defer wg.Done()

		for ctx.Err() == nil {
			op := &ichorv1alpha1.TalosOperation{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, op); err == nil {
				see(op)
			}

			time.Sleep(100 * time.Millisecond)
		}
	}()

	return func() { cancel(); wg.Wait() }
}

// Rule: a change of spec.talosVersion starts a talos operation that
// upgrades every machine, control planes first, one machine at a time
// (maxUnavailable 1), with one LifecycleService.Upgrade and one Reboot each,
// etcd healthy between control planes; the candidates came from the release
// source first.
func TestTalosUpgrade(t *testing.T) {
	// The candidates of v1.14.1 from the world's release source.
	testenv.Eventually(t, waitTimeout, "candidates in status", func() error {
		u := getCluster(t).Status.TalosUpgrade
		if u.Version != "v1.14.1" || len(u.Candidates) != 2 || u.Candidates[0].Version != "v1.14.3" || !u.Candidates[0].Default ||
			u.Candidates[1].Version != "v1.14.2" || u.Candidates[1].Group != ichorv1alpha1.CandidatePatch {
			return fmt.Errorf("status.talosUpgrade %+v", u)
		}

		return nil
	})

	before := counts(t)

	setTalosVersion(t, "v1.14.2")
	name := talosOp(t, "v1.14.2")

	var (
		mu        sync.Mutex
		started   []string
		problems  []string
		cpsDone   int
		unhealthy []string
	)

	stop := watchOp(name, func(op *ichorv1alpha1.TalosOperation) {
		mu.Lock()
		defer mu.Unlock()

		var active []string

		done := 0

		for _, p := range op.Status.Machines {
			if p.Phase == ichorv1alpha1.MachineInProgress {
				active = append(active, p.Name)

				if !slices.Contains(started, p.Name) {
					started = append(started, p.Name)
				}
			}

			if p.Role == ichorv1alpha1.RoleControlPlane && (p.Phase == ichorv1alpha1.MachineDone || p.Phase == ichorv1alpha1.MachineSkipped) {
				done++
			}
		}

		if len(active) > 1 {
			problems = append(problems, fmt.Sprintf("%v in progress at once", active))
		}

		if done > cpsDone && done < 3 {
			// Between two control planes: the next one has not gone down yet
			// (its check step asks etcd first), so every member answers.
			if bad := etcdHealthy(context.Background()); bad != "" {
				unhealthy = append(unhealthy, fmt.Sprintf("after %d control plane(s): %s", done, bad))
			}
		}

		cpsDone = done
	})

	op := waitPhase(t, name, ichorv1alpha1.OperationSucceeded)
	stop()

	mu.Lock()
	defer mu.Unlock()

	if len(problems) > 0 {
		t.Errorf("more than one machine at a time: %v", problems)
	}

	if !slices.Equal(started, machineNames) {
		t.Errorf("machines upgraded in the order %v, want %v", started, machineNames)
	}

	if len(unhealthy) > 0 {
		t.Errorf("etcd not healthy between control planes: %v", unhealthy)
	}

	after := counts(t)

	for _, n := range machineNames {
		if v := emu(t, n).Info().Version; v != "v1.14.2" {
			t.Errorf("%s runs %s, want v1.14.2", n, v)
		}

		if d := [3]int{after[n][0] - before[n][0], after[n][1] - before[n][1], after[n][2] - before[n][2]}; d != [3]int{1, 1, 0} {
			t.Errorf("%s got %d LifecycleService.Upgrade, %d Reboot and %d legacy Upgrade calls, want 1, 1, 0", n, d[0], d[1], d[2])
		}

		if p := progressOf(op, n); p.Phase != ichorv1alpha1.MachineDone || p.Version != "v1.14.1" {
			t.Errorf("%s progress %+v", n, p)
		}
	}

	if op.Status.From != "v1.14.1" || op.Status.To != "v1.14.2" || !apimetaTrue(op, ichorv1alpha1.PreChecksPassedCondition) {
		t.Errorf("from %q to %q, conditions %+v", op.Status.From, op.Status.To, op.Status.Conditions)
	}

	if getCluster(t).Spec.VersionContract != "v1.14" {
		t.Error("the version contract moved")
	}

	testenv.Eventually(t, waitTimeout, "the cluster records v1.14.2", func() error {
		if u := getCluster(t).Status.TalosUpgrade; u.Version != "v1.14.2" || len(u.Candidates) != 1 || u.Candidates[0].Version != "v1.14.3" {
			return fmt.Errorf("status.talosUpgrade %+v", u)
		}

		return nil
	})
}

// Rule: a node that comes back on the previous A/B slot fails its step and
// pauses the operation with a failureReason; nothing else moves; resuming
// sends the Upgrade again and the operation goes on.
func TestTalosUpgradeABFallback(t *testing.T) {
	testenv.Must(t, emu(t, "cp-1").FailNextUpgrade(true))

	before := counts(t)

	setTalosVersion(t, "v1.14.3")
	name := talosOp(t, "v1.14.3")

	op := waitPhase(t, name, ichorv1alpha1.OperationPaused)
	if op.Status.FailedStep != "upgrade" || !strings.Contains(op.Status.FailureReason, "previous A/B slot") ||
		!strings.Contains(op.Status.FailureReason, "cp-1") || !strings.Contains(op.Status.FailureReason, "ichor operation resume") {
		t.Fatalf("failed step %q, reason %q", op.Status.FailedStep, op.Status.FailureReason)
	}

	if info := emu(t, "cp-1").Info(); info.Version != "v1.14.2" || !info.LastUpgradeFailed {
		t.Fatalf("cp-1 %+v", info)
	}

	for _, n := range []string{"cp-2", "cp-3", "w-1", "w-2"} {
		if p := progressOf(op, n); p.Phase != ichorv1alpha1.MachinePending {
			t.Errorf("%s moved while the operation is paused: %+v", n, p)
		}
	}

	// The allowed neighbour: resumed, the Upgrade is sent again and the rest follows.
	testenv.Must(t, retryUpdateOp(name, func(o *ichorv1alpha1.TalosOperation) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}

		o.Annotations[ichorv1alpha1.ResumeAnnotation] = "1"
	}))

	waitPhase(t, name, ichorv1alpha1.OperationSucceeded)

	after := counts(t)
	for _, n := range machineNames {
		want := 1
		if n == "cp-1" {
			want = 2
		}

		if d := after[n][0] - before[n][0]; d != want {
			t.Errorf("%s got %d Upgrade calls, want %d", n, d, want)
		}

		if v := emu(t, n).Info().Version; v != "v1.14.3" {
			t.Errorf("%s runs %s", n, v)
		}
	}
}

// Rule (chaos): with the controller killed after every reconcile (each one a
// new controller process, as the lifecycle chaos test does), every node is
// upgraded exactly once: one LifecycleService.Upgrade and one Reboot each
// (the emulator's counters). A kill inside the reconcile that sends the
// Upgrade (between its recording and its answer) is not exercised here: the
// next controller finds step "upgrading" and pauses rather than send it again.
func TestTalosUpgradeChaos(t *testing.T) {
	world.SetReleases(append(slices.Clone(talosemu.DefaultReleases), "v1.14.4"))
	stopOperations()

	before := counts(t)

	setTalosVersion(t, "v1.14.4")
	name := talosOp(t, "v1.14.4")

	steps := map[string][]string{}
	deadline := time.Now().Add(3 * waitTimeout)

	for restarts := 0; ; restarts++ {
		if time.Now().After(deadline) {
			t.Fatalf("not finished after %d controller restarts; steps %v", restarts, steps)
		}

		res := reconcileOnceInFreshController(t, name)

		op := getOp(t, name)
		for _, p := range op.Status.Machines {
			if s := steps[p.Name]; p.Step != "" && (len(s) == 0 || s[len(s)-1] != p.Step) {
				steps[p.Name] = append(s, p.Step)
			}
		}

		if op.Status.Phase == ichorv1alpha1.OperationSucceeded {
			t.Logf("succeeded after %d controller restarts", restarts+1)

			break
		}

		if op.Status.FailedStep != "" {
			t.Fatalf("paused: %s", op.Status.FailureReason)
		}

		if res.RequeueAfter > 100*time.Millisecond {
			time.Sleep(100 * time.Millisecond)
		}
	}

	after := counts(t)

	for _, n := range machineNames {
		if d := [2]int{after[n][0] - before[n][0], after[n][1] - before[n][1]}; d != [2]int{1, 1} {
			t.Errorf("%s got %d Upgrade and %d Reboot calls across the restarts, want exactly 1 each", n, d[0], d[1])
		}

		if v := emu(t, n).Info().Version; v != "v1.14.4" {
			t.Errorf("%s runs %s", n, v)
		}

		// check runs in the reconcile that starts the machine, so it is never the recorded step.
		for _, s := range []string{"drain", "upgrade", "reboot-upgrade", "wait-upgrade", "uncordon", "done"} {
			if !slices.Contains(steps[n], s) {
				t.Errorf("%s never seen at step %s: %v", n, s, steps[n])
			}
		}
	}
}

func progressOf(op *ichorv1alpha1.TalosOperation, name string) ichorv1alpha1.MachineProgress {
	for _, p := range op.Status.Machines {
		if p.Name == name {
			return p
		}
	}

	return ichorv1alpha1.MachineProgress{}
}

func apimetaTrue(op *ichorv1alpha1.TalosOperation, typ string) bool {
	for _, c := range op.Status.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}

	return false
}

func retryUpdateOp(name string, f func(*ichorv1alpha1.TalosOperation)) error {
	var err error

	for range 10 {
		op := &ichorv1alpha1.TalosOperation{}
		if err = k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op); err != nil {
			return err
		}

		f(op)

		if err = k8s.Update(context.Background(), op); err == nil {
			return nil
		}
	}

	return err
}
