package lifecycle_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestLifecycle is the life of a cluster's machines, in order: the first
// control plane, a worker whose maintenance certificate changed, two more
// control planes, a removal refused below the declared count and then for
// quorum and then allowed, a wiped worker re-installed, the removal of a
// machine whose address answers as a control plane refused, a worker removed and
// back in maintenance, a forced removal, a control-plane removal with the
// controller killed between every step, and a machine with no recorded
// fingerprint whose first probe records it and sends nothing. The worker's
// removal first waits while the cluster is paused.
func TestLifecycle(t *testing.T) {
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"FirstControlPlane", firstControlPlane},
		{"ChangedFingerprintRefused", changedFingerprint},
		{"MoreControlPlanesJoinEtcd", moreControlPlanes},
		{"RemovalBelowDeclaredCountRefused", belowCountRefused},
		{"QuorumBreakRefused", quorumRefused},
		{"WipedWorkerReinstalled", wipedWorkerReinstalled},
		{"NodeIdentityMismatchResetRefused", identityMismatchRemoval},
		{"PausedStopsWorkerRemovalThenBackInMaintenance", workerRemoved},
		{"ForcedRemovalWithoutWipe", forcedRemoval},
		{"ChaosOneResetPerRemoval", chaosRemoval},
		{"FirstProbeRecordsFingerprintSendsLater", firstProbeRecords},
		{"LostApplyAnswerFollowedNotFingerprintChanged", lostApplyAnswer},
		{"ResetRecordedNeverSentIsSentAgain", lostResetRequest},
	}

	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			t.Fatalf("%s failed; the later steps build on it", s.name)
		}
	}
}

func firstControlPlane(t *testing.T) {
	approve(t, "cp-1", ichorv1alpha1.RoleControlPlane)

	// The RPC returning means "stored"; the machine follows the stages and
	// waits for the etcd bootstrap (ichor init's step).
	testenv.Eventually(t, waitTimeout, "cp-1 runs and waits for the bootstrap", func() error {
		m := getMachine(t, "cp-1")
		if c := cond(m, ichorv1alpha1.ReadyCondition); c == nil || c.Reason != ichorv1alpha1.JoiningReason || m.Status.Stage != ichorv1alpha1.StageRunning {
			return fmt.Errorf("stage %q, Ready %v", m.Status.Stage, c)
		}

		return nil
	})

	m := getMachine(t, "cp-1")
	if m.Status.ConfigSentAt == nil || m.Status.MaintenanceFingerprint != emu(t, "cp-1").MaintenanceFingerprint() {
		t.Fatalf("configSentAt %v, fingerprint %q", m.Status.ConfigSentAt, m.Status.MaintenanceFingerprint)
	}

	if h := lockHolder(t); !strings.Contains(h, "cp-1") {
		t.Errorf("a joining control plane holds the cluster lock; holder %q", h)
	}

	_, err := cp1(t).Client().MachineClient.Bootstrap(context.Background(), &machine.BootstrapRequest{})
	testenv.Must(t, err)

	m = waitProvisioned(t, "cp-1")
	if !m.Status.Installed || m.Status.NodeName != "cp-1" || cond(m, ichorv1alpha1.ReadyCondition).Status != metav1.ConditionTrue {
		t.Errorf("installed %t, node %q, Ready %v", m.Status.Installed, m.Status.NodeName, cond(m, ichorv1alpha1.ReadyCondition))
	}

	if n := rpcs(t, "cp-1", "ApplyConfiguration"); n != 1 {
		t.Errorf("cp-1 got %d ApplyConfiguration calls before it was provisioned, want 1", n)
	}

	// The join is written to status before the topology is read and the lock
	// given up (provision.go), so the release follows the Provisioned
	// condition by a step: wait for it rather than read it once.
	testenv.Eventually(t, waitTimeout, "the cluster lock released after the join", func() error {
		if h := lockHolder(t); h != "" {
			return fmt.Errorf("still held by %q", h)
		}

		return nil
	})

	if !slices.Contains(getMachine(t, "cp-1").Finalizers, ichorv1alpha1.MachineFinalizer) {
		t.Error("an approved machine has no removal finalizer")
	}
}

func changedFingerprint(t *testing.T) {
	fp, err := emu(t, "w-1").ReplaceMaintenanceCert()
	testenv.Must(t, err)

	approve(t, "w-1", ichorv1alpha1.RoleWorker)

	testenv.Eventually(t, waitTimeout, "w-1 refused for its fingerprint", func() error {
		c := cond(getMachine(t, "w-1"), ichorv1alpha1.FingerprintTrustedCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ichorv1alpha1.FingerprintChangedReason || !strings.Contains(c.Message, fp) {
			return fmt.Errorf("FingerprintTrusted %v", c)
		}

		return nil
	})

	// Two more passes over the machine (run here, so they surely happen
	// after the refusal), and still nothing sent.
	reconcileOnceInFreshController(t, "w-1")
	reconcileOnceInFreshController(t, "w-1")

	if n := rpcs(t, "w-1", "ApplyConfiguration"); n != 0 {
		t.Fatalf("the configuration was sent to a node with another maintenance certificate (%d calls)", n)
	}

	if !slices.ContainsFunc(events(t, "w-1"), func(e string) bool { return strings.HasPrefix(e, ichorv1alpha1.FingerprintChangedReason) }) {
		t.Error("no FingerprintChanged Event")
	}

	// A person verified the new fingerprint.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, "w-1")
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[ichorv1alpha1.TrustMaintenanceFingerprintAnnotation] = fp

		return k8s.Update(context.Background(), m)
	}))

	m := waitProvisioned(t, "w-1")
	if m.Status.MaintenanceFingerprint != fp {
		t.Errorf("the accepted fingerprint is not recorded: %q", m.Status.MaintenanceFingerprint)
	}
}

func moreControlPlanes(t *testing.T) {
	approve(t, "cp-2", ichorv1alpha1.RoleControlPlane)
	approve(t, "cp-3", ichorv1alpha1.RoleControlPlane)
	waitProvisioned(t, "cp-2")
	waitProvisioned(t, "cp-3")

	members, err := cp1(t).EtcdMembers(context.Background())
	testenv.Must(t, err)

	voters := 0

	for _, m := range members {
		if !m.Learner {
			voters++
		}
	}

	if voters != 3 {
		t.Errorf("etcd has %d voters, want 3: %+v", voters, members)
	}

	testenv.Eventually(t, waitTimeout, "three control planes are not a transition", func() error { return transitioning(t, false) })

	// The provisioning of cp-3 lets the lock go in the reconcile after it
	// recorded the machine provisioned; it must not keep it.
	testenv.Eventually(t, waitTimeout, "the cluster lock released with an odd number of control planes", func() error {
		if h := lockHolder(t); h != "" {
			return fmt.Errorf("the cluster lock is held by %q", h)
		}

		return nil
	})
}

// transitioning checks the cluster's TopologyTransitioning condition.
func transitioning(t *testing.T, want bool) error {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: clusterName}, c))

	got := apimeta.IsStatusConditionTrue(c.Status.Conditions, ichorv1alpha1.TopologyTransitioningCondition)
	if got != want || apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.TopologyTransitioningCondition) == nil {
		return fmt.Errorf("TopologyTransitioning %v", apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.TopologyTransitioningCondition))
	}

	return nil
}

func belowCountRefused(t *testing.T) {
	remove(t, "cp-3", nil, false)

	testenv.Eventually(t, waitTimeout, "removal of cp-3 refused below the declared count", func() error {
		return refused(t, "cp-3", "fewer")
	})

	if n := rpcs(t, "cp-3", "Reset"); n != 0 {
		t.Fatalf("a refused removal reset the node (%d calls)", n)
	}
}

// quorumRefused: with cp-2 down, removing the healthy cp-3 would leave
// {cp-1, cp-2} with one healthy member of two: refused. cp-2 back, it goes on.
func quorumRefused(t *testing.T) {
	testenv.Must(t, emu(t, "cp-2").PowerOff())

	// The person lowers the declared count: the count no longer refuses.
	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: clusterName}, c))
	c.Spec.ControlPlane.Count = 1
	testenv.Must(t, k8s.Update(context.Background(), c))

	testenv.Eventually(t, waitTimeout, "removal of cp-3 refused for quorum", func() error { return refused(t, "cp-3", "quorum") })

	if n := rpcs(t, "cp-3", "Reset"); n != 0 {
		t.Fatalf("a removal refused for quorum reset the node (%d calls)", n)
	}

	testenv.Must(t, emu(t, "cp-2").PowerOn())
	waitGone(t, "cp-3")

	if n := rpcs(t, "cp-3", "Reset"); n != 1 {
		t.Errorf("cp-3 got %d Reset calls, want 1", n)
	}

	members, err := cp1(t).EtcdMembers(context.Background())
	testenv.Must(t, err)

	if len(members) != 2 {
		t.Errorf("etcd still has %d members after cp-3's removal: %+v", len(members), members)
	}

	testenv.Eventually(t, waitTimeout, "two control planes show as transitioning", func() error { return transitioning(t, true) })
}

func refused(t *testing.T, name, why string) error {
	t.Helper()

	m := getMachine(t, name)

	c := cond(m, ichorv1alpha1.ReadyCondition)
	if c == nil || c.Reason != ichorv1alpha1.RemovalRefusedReason || !strings.Contains(c.Message, why) {
		return fmt.Errorf("Ready %v, removal %+v", c, m.Status.Removal)
	}

	return nil
}

func wipedWorkerReinstalled(t *testing.T) {
	em := emu(t, "w-1")
	testenv.Must(t, em.WipeSystemDisk())
	testenv.Must(t, em.PowerOff())
	testenv.Must(t, em.PowerOn())

	testenv.Eventually(t, waitTimeout, "w-1 re-installed", func() error {
		m := getMachine(t, "w-1")
		c := cond(m, ichorv1alpha1.ProvisionedCondition)
		if m.Status.Reinstalls != 1 || c == nil || c.Status != metav1.ConditionTrue || c.Reason != ichorv1alpha1.ReinstalledReason {
			return fmt.Errorf("reinstalls %d, Provisioned %v, Ready %v", m.Status.Reinstalls, c, cond(m, ichorv1alpha1.ReadyCondition))
		}

		return nil
	})

	if !slices.ContainsFunc(events(t, "w-1"), func(e string) bool { return strings.HasPrefix(e, ichorv1alpha1.ReinstalledReason) }) {
		t.Error("no Reinstalled Warning Event")
	}
}

func workerRemoved(t *testing.T) {
	before := rpcs(t, "w-1", "Reset")

	// While the cluster is paused the removal waits (TestPausedStops for the
	// lifecycle reconciler, paused_test.go); then it runs.
	pausedRemoval(t, "w-1", map[string]string{ichorv1alpha1.RemoveRebootAnnotation: "true"})
	waitGone(t, "w-1")

	if n := rpcs(t, "w-1", "Reset") - before; n != 1 {
		t.Errorf("w-1 got %d Reset calls, want exactly 1", n)
	}

	testenv.Eventually(t, waitTimeout, "w-1 back in maintenance", func() error {
		if s := emu(t, "w-1").Stage(); s != talosruntime.MachineStageMaintenance {
			return fmt.Errorf("stage %s", s)
		}

		return nil
	})

	k := workload(t)
	if _, err := k.CoreV1().Nodes().Get(context.Background(), "w-1", metav1.GetOptions{}); err == nil {
		t.Error("the Node of the removed worker still exists")
	}
}

// forcedRemoval removes a running control plane with forceRemove: no drain,
// no reset, its member removed through cp-1, and an Event saying it was not wiped.
func forcedRemoval(t *testing.T) {
	remove(t, "cp-2", nil, true)

	waitGone(t, "cp-2")

	if n := rpcs(t, "cp-2", "Reset"); n != 0 {
		t.Errorf("a forced removal sent %d resets", n)
	}

	if !slices.ContainsFunc(events(t, "cp-2"), func(e string) bool { return strings.HasPrefix(e, ichorv1alpha1.RemovedWithoutWipeReason) }) {
		t.Error("no RemovedWithoutWipe Event")
	}

	members, err := cp1(t).EtcdMembers(context.Background())
	testenv.Must(t, err)

	if len(members) != 1 {
		t.Errorf("etcd has %d members after cp-2's forced removal: %+v", len(members), members)
	}

	testenv.Must(t, emu(t, "cp-2").PowerOff()) // dead hardware, as forceRemove says
}

// chaosRemoval stops the controller, then removes cp-3 (provisioned again)
// with a new manager for every reconcile: each one is a controller that
// starts, does one step and is killed. The emulator counts the Resets.
func chaosRemoval(t *testing.T) {
	// cp-3 came back in maintenance after its removal: a person approves it again.
	recreate(t, "cp-3")
	approve(t, "cp-3", ichorv1alpha1.RoleControlPlane)
	waitProvisioned(t, "cp-3")

	stopMgr()

	before := rpcs(t, "cp-3", "Reset")

	remove(t, "cp-3", nil, false)

	chaos := testworld.RunChaos(t, waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, "cp-3") }, func() testworld.ChaosStep {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "cp-3"}, m); err != nil {
			testenv.Must(t, client.IgnoreNotFound(err))

			return testworld.ChaosStep{Done: true}
		}

		if m.Status.Removal == nil {
			return testworld.ChaosStep{}
		}

		return testworld.ChaosStep{At: map[string]string{"cp-3": m.Status.Removal.Phase}}
	})
	phases := chaos.Steps["cp-3"]

	want := []string{ichorv1alpha1.RemovalEvacuating, ichorv1alpha1.RemovalDraining, ichorv1alpha1.RemovalLeavingEtcd,
		ichorv1alpha1.RemovalResetting, ichorv1alpha1.RemovalDeletingNode, ichorv1alpha1.RemovalDone}
	if !slices.Equal(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}

	if n := rpcs(t, "cp-3", "Reset") - before; n != 1 {
		t.Errorf("cp-3 got %d Reset calls across the restarts, want exactly 1", n)
	}
}

// reconcileOnceInFreshController is a controller process that starts,
// runs one reconcile of the machine with a new lifecycle reconciler and
// dies; then it waits 100 ms, as the machine's work waits on its node (a
// drain, a reset) between reconciles.
func reconcileOnceInFreshController(t *testing.T, name string) ctrl.Result {
	t.Helper()

	defer time.Sleep(100 * time.Millisecond)

	return testworld.ReconcileOnce(t, suite().NewManager, func(ctx context.Context, mgr ctrl.Manager) ctrlreconcile.Reconciler {
		testenv.Must(t, machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()))

		r := newLifecycle()
		r.Client, r.APIReader, r.Recorder = mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("chaos")

		return r
	}, client.ObjectKey{Namespace: ns, Name: name})
}

// remove marks and deletes a machine the way `ichor node remove [--force]` does: one update, then the delete.
func remove(t *testing.T, name string, annotations map[string]string, force bool) {
	t.Helper()

	// The controllers write the machine too: a conflict is retried on a fresh read.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, name)
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}

		m.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = "true"
		for k, v := range annotations {
			m.Annotations[k] = v
		}

		m.Spec.ForceRemove = force

		return k8s.Update(context.Background(), m)
	}))
	testenv.Must(t, k8s.Delete(context.Background(), getMachine(t, name)))
}

func waitGone(t *testing.T, name string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, name+" removed", func() error {
		m := &ichorv1alpha1.TalosMachine{}

		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m)
		if err == nil {
			return fmt.Errorf("still there: removal %+v, Ready %v", m.Status.Removal, cond(m, ichorv1alpha1.ReadyCondition))
		}

		return client.IgnoreNotFound(err)
	})
}

// recreate creates the pending machine discovery would create for a node back in maintenance.
func recreate(t *testing.T, name string) {
	t.Helper()

	em := emu(t, name)
	_ = em.PowerOn() // a reset without reboot powered it off; an error means it runs

	testenv.Eventually(t, waitTimeout, name+" in maintenance", func() error {
		if s := em.Stage(); s != talosruntime.MachineStageMaintenance {
			return fmt.Errorf("stage %s", s)
		}

		return nil
	})

	testenv.Must(t, k8s.Create(context.Background(), pendingMachine(name, em)))
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tm := getMachine(t, name)
		tm.Status.MaintenanceFingerprint = em.MaintenanceFingerprint()

		return k8s.Status().Update(context.Background(), tm)
	}))
}

func lockHolder(t *testing.T) string {
	t.Helper()

	h, err := (&lock.Locker{Client: k8s}).Holder(context.Background(), types.NamespacedName{Namespace: ns, Name: clusterName})
	testenv.Must(t, err)

	return h
}

func workload(t *testing.T) kubernetes.Interface {
	t.Helper()

	kc, err := cp1(t).Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	k, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	return k
}

// lostApplyAnswer: the answer to the configuration's send is lost (on a
// real node the connection may close as the node leaves maintenance mode).
// The node then presents its cluster certificate, not the pinned
// maintenance one: that is the install it is, and is followed; it is never
// reported as a changed maintenance certificate (which waits for a person),
// and the configuration is not sent again. Each reconcile runs in a fresh
// controller, so nothing carries over but what the API holds.
func lostApplyAnswer(t *testing.T) {
	em := emu(t, "w-1")
	was := getMachine(t, "w-1").Status.Reinstalls
	before := rpcs(t, "w-1", "ApplyConfiguration")
	count := func(reason string) int {
		return len(slices.DeleteFunc(events(t, "w-1"), func(e string) bool { return !strings.HasPrefix(e, reason+":") }))
	}
	changedEvents, refusedEvents := count(ichorv1alpha1.FingerprintChangedReason), count(ichorv1alpha1.ApplyFailedReason)

	// The disk is wiped: the node comes back in maintenance mode and is
	// re-installed, and the answer to that send is lost.
	testenv.Must(t, em.WipeSystemDisk())
	testenv.Must(t, em.PowerOff())
	em.LoseNextApplyAnswer()
	testenv.Must(t, em.PowerOn())

	// Every poll on the way goes back at low priority (Reconcile), so that
	// with a thousand machines installing a change is not queued behind them.
	poll := func() ctrl.Result {
		res := reconcileOnceInFreshController(t, "w-1")
		if res.RequeueAfter > 0 && (res.Priority == nil || *res.Priority != handler.LowPriority) {
			t.Fatalf("a poll (requeue after %s) goes back at priority %v, want handler.LowPriority", res.RequeueAfter, res.Priority)
		}

		return res
	}

	testworld.RunChaos(t, waitTimeout, poll, func() testworld.ChaosStep {
		m := getMachine(t, "w-1")
		if c := cond(m, ichorv1alpha1.FingerprintTrustedCondition); c != nil && c.Reason == ichorv1alpha1.FingerprintChangedReason {
			t.Fatalf("the node whose answer was lost was reported as presenting another certificate: %s", c.Message)
		}

		c := cond(m, ichorv1alpha1.ProvisionedCondition)

		return testworld.ChaosStep{At: map[string]string{"w-1": m.Status.Stage}, Done: m.Status.Reinstalls > was && c != nil && c.Status == metav1.ConditionTrue}
	})

	if sent := rpcs(t, "w-1", "ApplyConfiguration") - before; sent != 1 {
		t.Errorf("w-1 got %d ApplyConfiguration calls for one re-install whose answer was lost, want exactly 1", sent)
	}

	if n := count(ichorv1alpha1.FingerprintChangedReason); n != changedEvents {
		t.Errorf("%d FingerprintChanged Events for the node whose answer was lost", n-changedEvents)
	}

	// A lost answer is not the node refusing the configuration.
	if n := count(ichorv1alpha1.ApplyFailedReason); n != refusedEvents {
		t.Errorf("%d ApplyFailed Events (\"the node refused the configuration\") for an answer that was lost", n-refusedEvents)
	}
}

// lostResetRequest: a controller killed between recording a Reset
// (status.resetRequestedAt) and sending it leaves a removal that waits for a
// reset the node never received. Once the grace has passed and the node
// still runs its configuration, the reset is recorded again and sent: the
// removal ends, with exactly one Reset on the node.
func lostResetRequest(t *testing.T) {
	before := rpcs(t, "w-1", "Reset")

	remove(t, "w-1", map[string]string{ichorv1alpha1.RemoveRebootAnnotation: "true"}, false)

	// Fresh controllers take the removal up to its reset phase, not into it.
	testworld.RunChaos(t, waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, "w-1") }, func() testworld.ChaosStep {
		m := getMachine(t, "w-1")

		return testworld.ChaosStep{Done: m.Status.Removal != nil && m.Status.Removal.Phase == ichorv1alpha1.RemovalResetting}
	})

	// What the killed controller wrote before its Reset call: the record,
	// older than the grace.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, "w-1")
		if m.Status.ResetRequestedAt != nil {
			t.Fatal("the reset was recorded before the test could stand in for the killed controller")
		}

		at := metav1.NewTime(time.Now().Add(-lifecycle.DefaultResetGrace - time.Minute))
		m.Status.ResetRequestedAt = &at

		return k8s.Status().Update(context.Background(), m)
	}))

	testworld.RunChaos(t, waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, "w-1") }, func() testworld.ChaosStep {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "w-1"}, m); err != nil {
			testenv.Must(t, client.IgnoreNotFound(err))

			return testworld.ChaosStep{Done: true}
		}

		return testworld.ChaosStep{}
	})

	if n := rpcs(t, "w-1", "Reset") - before; n != 1 {
		t.Errorf("w-1 got %d Reset calls for a reset recorded and never sent, want exactly 1", n)
	}

	if !slices.ContainsFunc(events(t, "w-1"), func(e string) bool { return strings.HasPrefix(e, "ResetNotStarted") }) {
		t.Error("no ResetNotStarted Event")
	}
}
