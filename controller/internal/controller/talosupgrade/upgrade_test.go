package talosupgrade_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/talosemu/longhorn"
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

	chaos := testworld.RunChaos(t, 3*waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, name) },
		func() testworld.ChaosStep { return testworld.OperationStep(getOp(t, name), nil) })
	steps := chaos.Steps

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

// crashedStatus lets the first status writes through (left of them) and
// fails the later ones, as a controller that stopped right after them leaves
// the API: what it wrote before stays, nothing after it arrives.
type crashedStatus struct {
	client.Client

	left *atomic.Int32
}

var errStopped = errors.New("the controller stopped")

func (c crashedStatus) Status() client.SubResourceWriter {
	return crashedWriter{SubResourceWriter: c.Client.Status(), left: c.left}
}

type crashedWriter struct {
	client.SubResourceWriter

	left *atomic.Int32
}

func (w crashedWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if w.left.Add(-1) < 0 {
		return errStopped
	}

	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w crashedWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if w.left.Add(-1) < 0 {
		return errStopped
	}

	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// allReleases are the Talos releases the world's release source offers for
// the tests after TestTalosUpgradeChaos.
var allReleases = append(slices.Clone(talosemu.DefaultReleases), "v1.14.4", "v1.14.5", "v1.14.6", "v1.14.7")

// Rule (engineering rule 10): the controller that sends a node its
// LifecycleService.Upgrade stops right after the call, having recorded it
// (step upgrading, written before the call) but not its answer. The next
// controller does not send it a second time by itself: it pauses the
// operation on step upgrade and says why; only a person's resume sends it
// again (installing into the inactive slot again replaces what is there),
// and the operation then ends with every node upgraded.
func TestTalosUpgradeStoppedMidUpgrade(t *testing.T) {
	world.SetReleases(allReleases)
	stopOperations()

	before := counts(t)

	setTalosVersion(t, "v1.14.5")
	name := talosOp(t, "v1.14.5")

	// Fresh controllers, one reconcile each, until cp-1 (the first machine)
	// is to be sent its Upgrade.
	deadline := time.Now().Add(2 * waitTimeout)
	for progressOf(getOp(t, name), "cp-1").Step != "upgrade" {
		if op := getOp(t, name); op.Status.FailedStep != "" || time.Now().After(deadline) {
			t.Fatalf("cp-1 never reached step upgrade: %s, machines %+v", op.Status.FailureReason, op.Status.Machines)
		}

		reconcileOnceInFreshController(t, name)
	}

	// The controller that sends it stops after the call: one status write
	// (the record of the call) reaches the API, the one after it does not.
	left := &atomic.Int32{}
	left.Store(1)
	reconcileOnceInFreshController(t, name, func(r *operation.Reconciler) { r.Client = crashedStatus{Client: r.Client, left: left} })

	if p := progressOf(getOp(t, name), "cp-1"); p.Step != "upgrading" {
		t.Fatalf("the Upgrade was not recorded before it was sent: cp-1 %+v", p)
	}

	if d := rpcs(t, "cp-1", upgradeRPC) - before["cp-1"][0]; d != 1 {
		t.Fatalf("cp-1 got %d Upgrade calls from the controller that stopped, want 1", d)
	}

	if info := emu(t, "cp-1").Info(); info.PendingVersion != "v1.14.5" {
		t.Fatalf("cp-1 did not stage the upgrade: %+v", info)
	}

	// The next controllers: the operation pauses on the step; the Upgrade is
	// not sent again, nor the Reboot, and no other machine moves. Three
	// reconciles that each finished are the positive marker.
	for range 3 {
		reconcileOnceInFreshController(t, name)
	}

	op := getOp(t, name)
	if op.Status.Phase != ichorv1alpha1.OperationPaused || op.Status.FailedStep != "upgrade" ||
		!strings.Contains(op.Status.FailureReason, "the controller stopped while the Upgrade of cp-1 was being sent") ||
		!strings.Contains(op.Status.FailureReason, "Resuming sends it again") {
		t.Fatalf("phase %s, failed step %q, reason %q", op.Status.Phase, op.Status.FailedStep, op.Status.FailureReason)
	}

	if c := counts(t)["cp-1"]; c[0]-before["cp-1"][0] != 1 || c[1] != before["cp-1"][1] {
		t.Fatalf("cp-1 got %d Upgrade and %d Reboot calls after the restart, want 1 and 0", c[0]-before["cp-1"][0], c[1]-before["cp-1"][1])
	}

	for _, n := range machineNames[1:] {
		if p := progressOf(op, n); p.Phase != ichorv1alpha1.MachinePending {
			t.Errorf("%s moved while the operation is paused: %+v", n, p)
		}
	}

	// A person resumes: the Upgrade goes again, and the rest follows.
	testenv.Must(t, retryUpdateOp(name, func(o *ichorv1alpha1.TalosOperation) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}

		o.Annotations[ichorv1alpha1.ResumeAnnotation] = "after-the-stop"
	}))
	restartOperations(t, "")
	waitPhase(t, name, ichorv1alpha1.OperationSucceeded)

	after := counts(t)
	for _, n := range machineNames {
		want := [2]int{1, 1}
		if n == "cp-1" {
			want = [2]int{2, 1}
		}

		if d := [2]int{after[n][0] - before[n][0], after[n][1] - before[n][1]}; d != want {
			t.Errorf("%s got %d Upgrade and %d Reboot calls, want %v", n, d[0], d[1], want)
		}

		if v := emu(t, n).Info().Version; v != "v1.14.5" {
			t.Errorf("%s runs %s", n, v)
		}
	}
}

// talosOpOf is a talos operation to version, created as a person would (the
// starter then creates none: one talos operation of the cluster at a time).
// startTalosOp starts a talos operation of the test's own making as `ichor
// upgrade talos` would have the starter make it: the operation first,
// paused (an unfinished talos operation keeps the starter from making its
// own for the new version), then the cluster's spec.talosVersion, then the
// pause lifted (the pre-checks want the operation's target to be the
// cluster's spec, and run only once it is).
func startTalosOp(t testing.TB, op *ichorv1alpha1.TalosOperation) {
	t.Helper()

	op.Spec.Paused = true
	testenv.Must(t, k8s.Create(context.Background(), op))
	setTalosVersion(t, op.Spec.Talos.Version)

	patch := client.MergeFrom(op.DeepCopy())
	op.Spec.Paused = false
	testenv.Must(t, k8s.Patch(context.Background(), op, patch))
}

func talosOpOf(name, version string, mutate func(*ichorv1alpha1.TalosOperation)) *ichorv1alpha1.TalosOperation {
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: clusterName, Type: ichorv1alpha1.OperationTalos, Talos: &ichorv1alpha1.TalosUpgrade{Version: version},
		},
	}
	mutate(op)

	return op
}

// longhornNode reads a Longhorn node's spec.allowScheduling.
func longhornAllowsScheduling(t testing.TB, dyn dynamic.Interface, node string) bool {
	t.Helper()

	o, err := dyn.Resource(longhorn.NodeResource).Namespace(longhorn.Namespace).Get(context.Background(), node, metav1.GetOptions{})
	testenv.Must(t, err)

	allow, _, _ := unstructured.NestedBool(o.Object, "spec", "allowScheduling")

	return allow
}

// Rule (architecture, "Storage"): a Talos upgrade of machines a longhorn-v1
// TalosStorage selects evacuates each node's replicas before its drain and
// its Upgrade (scheduling off first, then eviction); a node whose
// evacuation reaches spec.evacuationTimeout with replicas left pauses the
// operation (phase Paused, Ready EvacuationPaused, the replica named) and is
// neither drained nor sent its Upgrade; once the volume has a healthy
// replica elsewhere, the operation goes on by itself, and every node's
// Longhorn scheduling comes back.
func TestTalosUpgradeStorageHook(t *testing.T) {
	world.SetReleases(allReleases)
	restartOperations(t, "")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cfg := workloadConfig(t)
	testenv.Must(t, longhorn.Install(ctx, cfg))

	dyn, err := dynamic.NewForConfig(cfg)
	testenv.Must(t, err)

	kube, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	node := map[string]string{}
	for _, n := range []string{"cp-1", "w-1", "w-2"} {
		if node[n] = getMachine(t, n).Status.NodeName; node[n] == "" {
			t.Fatalf("%s has no Node name", n)
		}
	}

	for _, n := range []string{"w-1", "w-2"} {
		testenv.Must(t, longhorn.CreateNode(ctx, dyn, node[n], "longhorn"))
	}

	for _, r := range []longhorn.Replica{
		{Name: "vol-a-r-w1", Volume: "vol-a", Node: node["w-1"], Disk: "longhorn", Healthy: true},
		{Name: "vol-a-r-cp1", Volume: "vol-a", Node: node["cp-1"], Disk: "longhorn", Healthy: true},
		// vol-b's only healthy replica is on w-2: Longhorn keeps it there.
		{Name: "vol-b-r-w2", Volume: "vol-b", Node: node["w-2"], Disk: "longhorn", Healthy: true},
	} {
		testenv.Must(t, longhorn.CreateReplica(ctx, dyn, r))
	}

	before := counts(t)

	// At each eviction: the Upgrade calls its node had got, and whether its Node was cordoned.
	type atEviction struct {
		upgrades int
		cordoned bool
	}

	var (
		mu      sync.Mutex
		evicted = map[string]atEviction{}
		owner   = map[string]string{"vol-a-r-w1": "w-1", "vol-b-r-w2": "w-2"}
	)

	standIn := &longhorn.VolumeControllerStandIn{Client: dyn, Deleted: func(name string) {
		m, ok := owner[name]
		if !ok {
			return
		}

		n, err := kube.CoreV1().Nodes().Get(ctx, node[m], metav1.GetOptions{})

		mu.Lock()
		evicted[name] = atEviction{upgrades: rpcs(t, m, upgradeRPC) - before[m][0], cordoned: err != nil || n.Spec.Unschedulable}
		mu.Unlock()
	}}

	go standIn.Run(ctx)

	ts := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lh"},
		Spec: ichorv1alpha1.TalosStorageSpec{
			ClusterName: clusterName, Preset: ichorv1alpha1.StoragePresetLonghornV1,
			EvacuationTimeout: &metav1.Duration{Duration: 5 * time.Second},
		},
	}
	testenv.Must(t, k8s.Create(ctx, ts))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ts) })

	for _, n := range []string{"w-1", "w-2"} {
		updateMachine(t, n, func(m *ichorv1alpha1.TalosMachine) {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}

			m.Labels["ichor-test/pool"] = "workers"
		})
	}

	// Only the workers, which the TalosStorage selects.
	startTalosOp(t, talosOpOf("hook-v1-14-6", "v1.14.6", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"ichor-test/pool": "workers"}}
	}))

	// w-2's evacuation reaches its timeout: the operation pauses there.
	testenv.Eventually(t, waitTimeout, "the operation paused by w-2's evacuation timeout", func() error {
		op := getOp(t, "hook-v1-14-6")
		c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition)

		if op.Status.Phase != ichorv1alpha1.OperationPaused || c == nil || c.Reason != ichorv1alpha1.EvacuationPausedReason {
			return fmt.Errorf("phase %s, Ready %+v, machines %+v", op.Status.Phase, c, op.Status.Machines)
		}

		for _, want := range []string{"w-2", "vol-b-r-w2", "spec.evacuationTimeout of TalosStorage lh"} {
			if !strings.Contains(c.Message, want) {
				return fmt.Errorf("Ready %q does not name %q", c.Message, want)
			}
		}

		return nil
	})

	op := getOp(t, "hook-v1-14-6")
	if op.Status.FailedStep != "" || progressOf(op, "w-1").Phase != ichorv1alpha1.MachineDone || progressOf(op, "w-2").Step != "drain" {
		t.Fatalf("failed step %q, machines %+v", op.Status.FailedStep, op.Status.Machines)
	}

	// w-1 was evacuated before its drain and its Upgrade.
	mu.Lock()
	if e, ok := evicted["vol-a-r-w1"]; !ok || e.upgrades != 0 || e.cordoned {
		t.Errorf("vol-a-r-w1 evicted %t, with %d Upgrade calls to w-1 before and its Node cordoned %t", ok, e.upgrades, e.cordoned)
	}
	mu.Unlock()

	// w-2 is neither drained nor upgraded while its evacuation is paused.
	n, err := kube.CoreV1().Nodes().Get(ctx, node["w-2"], metav1.GetOptions{})
	testenv.Must(t, err)

	if n.Spec.Unschedulable {
		t.Fatal("Node w-2 was cordoned while its evacuation was paused")
	}

	if d := rpcs(t, "w-2", upgradeRPC) - before["w-2"][0]; d != 0 {
		t.Fatalf("w-2 got %d Upgrade calls while its evacuation was paused", d)
	}

	// vol-b gets a healthy replica elsewhere, as a rebuild gives it: the
	// evacuation ends and the operation goes on by itself.
	testenv.Must(t, longhorn.CreateReplica(ctx, dyn, longhorn.Replica{Name: "vol-b-r-cp1", Volume: "vol-b", Node: node["cp-1"], Disk: "longhorn", Healthy: true}))
	waitPhase(t, "hook-v1-14-6", ichorv1alpha1.OperationSucceeded)

	mu.Lock()
	if e, ok := evicted["vol-b-r-w2"]; !ok || e.upgrades != 0 || e.cordoned {
		t.Errorf("vol-b-r-w2 evicted %t, with %d Upgrade calls to w-2 before and its Node cordoned %t", ok, e.upgrades, e.cordoned)
	}
	mu.Unlock()

	after := counts(t)
	for _, n := range machineNames {
		want := 0
		if strings.HasPrefix(n, "w-") {
			want = 1
		}

		if d := after[n][0] - before[n][0]; d != want {
			t.Errorf("%s got %d Upgrade calls, want %d", n, d, want)
		}
	}

	for _, m := range []string{"w-1", "w-2"} {
		if !longhornAllowsScheduling(t, dyn, node[m]) {
			t.Errorf("Longhorn's node %s does not allow scheduling again after the upgrade", node[m])
		}
	}
}

// Rule (architecture, "Upgrades": "maxUnavailable for workers, a per-machine
// hold annotation, and label-based ordering" are shared by the upgrade
// kinds): a talos operation takes the control planes one at a time in the
// order of spec.orderBy's label, skips a machine with the hold annotation
// (Held) and goes on with the others, takes spec.maxUnavailable workers at
// once, and upgrades the held machine once the annotation is removed.
func TestTalosUpgradeHoldOrderAndBudget(t *testing.T) {
	world.SetReleases(allReleases)
	restartOperations(t, "")

	const rack = "ichor-test/rack"

	for n, r := range map[string]string{"cp-3": "a", "cp-1": "b", "cp-2": "c", "w-2": "a", "w-1": "b"} {
		updateMachine(t, n, func(m *ichorv1alpha1.TalosMachine) {
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}

			m.Labels[rack] = r
		})
	}

	updateMachine(t, "cp-2", func(m *ichorv1alpha1.TalosMachine) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}

		m.Annotations[ichorv1alpha1.HoldUpgradeAnnotation] = "maintenance window"
	})

	before := counts(t)

	var (
		mu         sync.Mutex
		started    []string
		cpsAtOnce  int
		workersMax int
	)

	stop := watchOp("order-v1-14-7", func(op *ichorv1alpha1.TalosOperation) {
		mu.Lock()
		defer mu.Unlock()

		cps, workers := 0, 0

		for _, p := range op.Status.Machines {
			if p.Phase != ichorv1alpha1.MachineInProgress {
				continue
			}

			if !slices.Contains(started, p.Name) {
				started = append(started, p.Name)
			}

			if p.Role == ichorv1alpha1.RoleControlPlane {
				cps++
			} else {
				workers++
			}
		}

		cpsAtOnce, workersMax = max(cpsAtOnce, cps), max(workersMax, workers)
	})
	defer stop()

	startTalosOp(t, talosOpOf("order-v1-14-7", "v1.14.7", func(op *ichorv1alpha1.TalosOperation) {
		op.Spec.OrderBy = rack
		op.Spec.MaxUnavailable = new(intstr.FromInt32(2))
	}))

	// Every other machine is done; cp-2 waits for its hold to go.
	testenv.Eventually(t, 2*waitTimeout, "every machine but the held cp-2 upgraded", func() error {
		op := getOp(t, "order-v1-14-7")
		c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition)

		if c == nil || c.Reason != ichorv1alpha1.HeldReason || !strings.Contains(c.Message, "cp-2") {
			return fmt.Errorf("phase %s, Ready %+v, machines %+v", op.Status.Phase, c, op.Status.Machines)
		}

		return nil
	})

	op := getOp(t, "order-v1-14-7")
	if p := progressOf(op, "cp-2"); p.Phase != ichorv1alpha1.MachineHeld || !strings.Contains(p.Message, ichorv1alpha1.HoldUpgradeAnnotation) {
		t.Fatalf("cp-2 %+v", p)
	}

	if d := rpcs(t, "cp-2", upgradeRPC) - before["cp-2"][0]; d != 0 {
		t.Fatalf("cp-2 got %d Upgrade calls while held", d)
	}

	updateMachine(t, "cp-2", func(m *ichorv1alpha1.TalosMachine) { delete(m.Annotations, ichorv1alpha1.HoldUpgradeAnnotation) })
	waitPhase(t, "order-v1-14-7", ichorv1alpha1.OperationSucceeded)
	stop()

	mu.Lock()
	defer mu.Unlock()

	// The control planes by rack (cp-3 a, cp-1 b; cp-2 c, held, last), the
	// workers by rack (w-2 a, w-1 b), two at a time.
	if want := []string{"cp-3", "cp-1", "w-2", "w-1", "cp-2"}; !slices.Equal(started, want) {
		t.Errorf("machines started in the order %v, want %v", started, want)
	}

	if cpsAtOnce != 1 || workersMax != 2 {
		t.Errorf("at most %d control planes and %d workers at once, want 1 and 2 (spec.maxUnavailable)", cpsAtOnce, workersMax)
	}

	after := counts(t)
	for _, n := range machineNames {
		if d := after[n][0] - before[n][0]; d != 1 {
			t.Errorf("%s got %d Upgrade calls, want 1", n, d)
		}

		if v := emu(t, n).Info().Version; v != "v1.14.7" {
			t.Errorf("%s runs %s", n, v)
		}
	}
}
