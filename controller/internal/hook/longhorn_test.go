package hook_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/tools/talosemu/longhorn"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// cluster is the provisioned cluster with Longhorn's CRDs and a Longhorn
// node per machine, made once for the package's tests.
var (
	clusterOnce sync.Once
	clusterErr  error
	theDyn      dynamic.Interface
	theKube     kubernetes.Interface
)

func cluster(t *testing.T) (dynamic.Interface, kubernetes.Interface) {
	t.Helper()

	clusterOnce.Do(func() {
		ok := t.Run("Provision", func(t *testing.T) { provision(t) })
		if !ok {
			clusterErr = fmt.Errorf("provisioning the cluster failed")
		}
	})

	if clusterErr != nil {
		t.Fatal(clusterErr)
	}

	return theDyn, theKube
}

func provision(t *testing.T) {
	ctx := context.Background()

	approve(t, "cp-1", ichorv1alpha1.RoleControlPlane)
	testenv.Eventually(t, waitTimeout, "cp-1 waits for the bootstrap", func() error {
		if s := getMachine(t, "cp-1").Status.Stage; s != ichorv1alpha1.StageRunning {
			return fmt.Errorf("stage %q", s)
		}

		return nil
	})

	n, err := (&talos.Dialer{}).Dial(ctx, emu(t, "cp-1").IP(), theBun)
	testenv.Must(t, err)
	_, err = n.Client().MachineClient.Bootstrap(ctx, &machine.BootstrapRequest{})
	n.Close()
	testenv.Must(t, err)

	waitProvisioned(t, "cp-1")
	approve(t, "w-1", ichorv1alpha1.RoleWorker)
	waitProvisioned(t, "w-1")

	cfg := workloadConfig(t)
	testenv.Must(t, longhorn.Install(ctx, cfg))

	theDyn, err = dynamic.NewForConfig(cfg)
	testenv.Must(t, err)

	theKube, err = kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	for _, node := range []string{"cp-1", "w-1"} {
		testenv.Must(t, longhorn.CreateNode(ctx, theDyn, node, "longhorn"))
	}
}

// TestStorageHookEvacuatesBeforeRemoval removes a worker a longhorn-v1
// TalosStorage selects: the replicas on it are evicted before its drain
// (scheduling off first, then eviction); a volume with no other healthy
// replica pauses the removal at the evacuation timeout, with a message and
// no drain; once the volume has one, the removal finishes.
func TestStorageHookEvacuatesBeforeRemoval(t *testing.T) {
	dyn, kube := cluster(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, r := range []longhorn.Replica{
		{Name: "pvc-a-r-w1", Volume: "pvc-a", Node: "w-1", Disk: "longhorn", Healthy: true},
		{Name: "pvc-a-r-cp1", Volume: "pvc-a", Node: "cp-1", Disk: "longhorn", Healthy: true},
		// pvc-b's only healthy replica is on w-1: Longhorn keeps it there.
		{Name: "pvc-b-r-w1", Volume: "pvc-b", Node: "w-1", Disk: "longhorn", Healthy: true},
	} {
		testenv.Must(t, longhorn.CreateReplica(ctx, dyn, r))
	}

	// Every state Longhorn's node w-1 goes through, from a watch.
	states := watchNode(t, ctx, dyn, "w-1")

	// The stand-in of Longhorn's controllers, recording whether the Node was
	// already cordoned at each eviction.
	var (
		mu       sync.Mutex
		evicted  = map[string]bool{} // replica -> Node w-1 was cordoned when it went
		standIn  = &longhorn.VolumeControllerStandIn{Client: dyn}
		deleted  = make(chan string, 8)
		timeout  = 5 * time.Second
		storageN = "lh"
	)

	standIn.Deleted = func(name string) {
		node, err := kube.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		mu.Lock()
		evicted[name] = err == nil && node.Spec.Unschedulable
		mu.Unlock()
		deleted <- name
	}

	go standIn.Run(ctx)

	ts := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: storageN},
		Spec: ichorv1alpha1.TalosStorageSpec{
			ClusterName: clusterName, Preset: ichorv1alpha1.StoragePresetLonghornV1,
			EvacuationTimeout: &metav1.Duration{Duration: timeout},
		},
	}
	testenv.Must(t, k8s.Create(ctx, ts))

	resetsBefore := emu(t, "w-1").RPCCounts()["/machine.MachineService/Reset"]

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, "w-1")
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}

		m.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = "true"

		return k8s.Update(ctx, m)
	}))
	testenv.Must(t, k8s.Delete(ctx, getMachine(t, "w-1")))

	// The removal pauses at the timeout, with pvc-b's replica named.
	testenv.Eventually(t, waitTimeout, "w-1's removal paused by the evacuation timeout", func() error {
		m := getMachine(t, "w-1")
		c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.DeletingCondition)

		if m.Status.Removal == nil || c == nil || c.Reason != ichorv1alpha1.EvacuationPausedReason {
			return fmt.Errorf("removal %+v, Deleting %v", m.Status.Removal, c)
		}

		if m.Status.Removal.Phase != ichorv1alpha1.RemovalEvacuating {
			return fmt.Errorf("phase %s while the evacuation is paused", m.Status.Removal.Phase)
		}

		return contains(m.Status.Removal.Message, "did not finish within 5s", "pvc-b-r-w1", "spec.evacuationTimeout of TalosStorage lh", "spec.forceRemove")
	})

	// The positive marker is there; now what did not happen: no drain, no reset.
	node, err := kube.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
	testenv.Must(t, err)

	if node.Spec.Unschedulable {
		t.Fatal("Node w-1 was cordoned while its evacuation was paused")
	}

	if n := emu(t, "w-1").RPCCounts()["/machine.MachineService/Reset"] - resetsBefore; n != 0 {
		t.Fatalf("w-1 got %d Reset calls while its evacuation was paused", n)
	}

	// pvc-a had a healthy replica elsewhere: its replica on w-1 went already.
	waitDeleted(t, deleted, "pvc-a-r-w1")

	// pvc-b gets a healthy replica on cp-1 (as a rebuild would give it): the
	// evacuation ends and the removal goes on.
	testenv.Must(t, longhorn.CreateReplica(ctx, dyn, longhorn.Replica{Name: "pvc-b-r-cp1", Volume: "pvc-b", Node: "cp-1", Disk: "longhorn", Healthy: true}))
	waitDeleted(t, deleted, "pvc-b-r-w1")

	testenv.Eventually(t, waitTimeout, "w-1 removed", func() error {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-1"}, m); err == nil {
			return fmt.Errorf("still there: removal %+v", m.Status.Removal)
		}

		return nil
	})

	mu.Lock()
	defer mu.Unlock()

	for name, cordoned := range evicted {
		if cordoned {
			t.Errorf("replica %s was evicted after Node w-1 was cordoned: the drain ran before the evacuation finished", name)
		}
	}

	// Scheduling went off before the eviction was requested, and the
	// eviction was never requested on a schedulable node.
	seq := states()
	if len(seq) < 2 || seq[0] != (nodeState{allow: true}) {
		t.Fatalf("Longhorn node w-1 went through %v", seq)
	}

	sawOff, sawEvict := false, false

	for _, s := range seq {
		if s.evict && s.allow {
			t.Errorf("eviction was requested while Longhorn node w-1 still allowed scheduling: %v", seq)
		}

		sawOff = sawOff || !s.allow
		sawEvict = sawEvict || s.evict
	}

	if !sawOff || !sawEvict {
		t.Errorf("Longhorn node w-1 went through %v: scheduling off %t, eviction requested %t", seq, sawOff, sawEvict)
	}
}

// TestStorageHookRestore evacuates cp-1 through the hook (a TalosStorage
// selecting it by label), then restores it: eviction off, scheduling back,
// the annotations gone; a node whose scheduling its owner had disabled
// stays disabled.
func TestStorageHookRestore(t *testing.T) {
	dyn, _ := cluster(t)
	ctx := context.Background()

	// pvc-c's only replica is on cp-1: the evacuation waits.
	testenv.Must(t, longhorn.CreateReplica(ctx, dyn, longhorn.Replica{Name: "pvc-c-r-cp1", Volume: "pvc-c", Node: "cp-1", Disk: "longhorn", Healthy: true}))

	ts := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lh-cp"},
		Spec: ichorv1alpha1.TalosStorageSpec{
			ClusterName: clusterName, Preset: ichorv1alpha1.StoragePresetLonghornV1,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{ichorv1alpha1.ClusterLabel: clusterName}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, ts))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ts) })

	testenv.Eventually(t, waitTimeout, "the hook's cache sees TalosStorage lh-cp", func() error {
		var list ichorv1alpha1.TalosStorageList
		if err := storageHook.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}

		for _, s := range list.Items {
			if s.Name == "lh-cp" {
				return nil
			}
		}

		return fmt.Errorf("not yet")
	})

	m := getMachine(t, "cp-1")

	for _, ownerDisabled := range []bool{false, true} {
		if ownerDisabled {
			setSpec(t, dyn, "cp-1", map[string]any{"allowScheduling": false})
		}

		done, msg, err := storageHook.Evacuate(ctx, m)
		testenv.Must(t, err)

		if done {
			t.Fatalf("cp-1's evacuation done with its volumes' last replicas on it: %s", msg)
		}

		testenv.Must(t, contains(msg, "pvc-c-r-cp1", "still on node cp-1"))

		if s := getState(t, dyn, "cp-1"); s.allow || !s.evict || s.annotations == 0 {
			t.Fatalf("after Evacuate Longhorn node cp-1 is %+v", s)
		}

		testenv.Must(t, hook.Restore(ctx, storageHook, m))

		want := nodeState{allow: !ownerDisabled}
		if s := getState(t, dyn, "cp-1"); s != want {
			t.Errorf("owner disabled scheduling %t: after Restore Longhorn node cp-1 is %+v, want %+v", ownerDisabled, s, want)
		}
	}
}

type nodeState struct {
	allow, evict bool
	annotations  int
}

func stateOf(o *unstructured.Unstructured) nodeState {
	allow, _, _ := unstructured.NestedBool(o.Object, "spec", "allowScheduling")
	evict, _, _ := unstructured.NestedBool(o.Object, "spec", "evictionRequested")

	n := 0

	for _, k := range []string{hook.EvacuationMachineAnnotation, hook.EvacuationStartedAnnotation, hook.EvacuationAllowSchedulingAnnotation} {
		if _, ok := o.GetAnnotations()[k]; ok {
			n++
		}
	}

	return nodeState{allow: allow, evict: evict, annotations: n}
}

func getState(t *testing.T, dyn dynamic.Interface, name string) nodeState {
	t.Helper()

	o, err := dyn.Resource(longhorn.NodeResource).Namespace(longhorn.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	testenv.Must(t, err)

	s := stateOf(o)
	s.annotations = min(s.annotations, 1)

	return s
}

func setSpec(t *testing.T, dyn dynamic.Interface, name string, fields map[string]any) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := dyn.Resource(longhorn.NodeResource).Namespace(longhorn.Namespace)

		o, err := c.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		for k, v := range fields {
			if err := unstructured.SetNestedField(o.Object, v, "spec", k); err != nil {
				return err
			}
		}

		_, err = c.Update(context.Background(), o, metav1.UpdateOptions{})

		return err
	}))
}

// watchNode records the (allowScheduling, evictionRequested) states a
// Longhorn node goes through, each distinct from the one before.
func watchNode(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string) func() []nodeState {
	t.Helper()

	w, err := dyn.Resource(longhorn.NodeResource).Namespace(longhorn.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	testenv.Must(t, err)

	var (
		mu  sync.Mutex
		seq []nodeState
	)

	go func() {
		defer w.Stop()

		for ev := range w.ResultChan() {
			o, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Error {
				continue
			}

			s := stateOf(o)
			s.annotations = 0

			mu.Lock()
			if len(seq) == 0 || seq[len(seq)-1] != s {
				seq = append(seq, s)
			}
			mu.Unlock()
		}
	}()

	return func() []nodeState {
		mu.Lock()
		defer mu.Unlock()

		return append([]nodeState(nil), seq...)
	}
}

func waitDeleted(t *testing.T, deleted <-chan string, name string) {
	t.Helper()

	deadline := time.After(waitTimeout)

	for {
		select {
		case got := <-deleted:
			if got == name {
				return
			}
		case <-deadline:
			t.Fatalf("replica %s was never evicted", name)
		}
	}
}
