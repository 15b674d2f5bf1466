package talosmachine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func storageObj(name string, sel *metav1.LabelSelector) *ichorv1alpha1.TalosStorage {
	return &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosStorageSpec{
			ClusterName: clusterName, Preset: ichorv1alpha1.StoragePresetLonghornV1, NodeSelector: sel,
		},
	}
}

func setDisks(t *testing.T, name string, disks []ichorv1alpha1.DiskRole) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, name)
		m.Spec.Disks = disks

		return k8s.Update(context.Background(), m)
	}))
}

// TestTalosMachineReconciler_StorageMapsToSelectedMachines: a TalosStorage
// wakes exactly the machines it selects (an empty selector: the workers).
func TestTalosMachineReconciler_StorageMapsToSelectedMachines(t *testing.T) {
	r := &Reconciler{Client: cached}
	ctx := context.Background()

	names := func(s *ichorv1alpha1.TalosStorage) []string {
		reqs := r.machinesOfStorage(ctx, s)
		if len(reqs) == 0 {
			return nil
		}

		out := make([]string, 0, len(reqs))
		for _, req := range reqs {
			out = append(out, req.Name)
		}

		slices.Sort(out)

		return out
	}

	for _, tc := range []struct {
		sel  *metav1.LabelSelector
		want []string
	}{
		{nil, []string{"w-1", "w-2"}},
		{&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "w-2"}}, []string{"w-2"}},
		{&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cp-1"}}, []string{"cp-1"}},
		{&metav1.LabelSelector{MatchLabels: map[string]string{"pool": "none"}}, nil},
	} {
		if got := names(storageObj("s", tc.sel)); !slices.Equal(got, tc.want) {
			t.Errorf("selector %v: %v, want %v", tc.sel, got, tc.want)
		}
	}

	// Being deleted, it still maps to the machines it prepared; another cluster's maps to none of these.
	s := storageObj("s", nil)
	s.DeletionTimestamp = &metav1.Time{}

	if got := names(s); !slices.Equal(got, []string{"w-1", "w-2"}) {
		t.Errorf("deleted storage: %v", got)
	}

	s = storageObj("s", nil)
	s.Spec.ClusterName = "staging"

	if got := names(s); got != nil {
		t.Errorf("another cluster's storage: %v", got)
	}
}

// TestTalosMachineReconciler_StoragePresetRendered: a longhorn-v1
// TalosStorage selecting w-2 puts its storage disk's UserVolumeConfig into
// w-2's render (and only w-2's); deleting it takes it out again.
func TestTalosMachineReconciler_StoragePresetRendered(t *testing.T) {
	ctx := context.Background()

	const name = "w-2"

	before := map[string]string{}
	for _, n := range machineNames {
		before[n] = inSync(t, n).Status.RenderedConfigHash
	}

	// A storage disk alone renders nothing: no TalosStorage prepares it.
	setDisks(t, name, []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.storage"}, Role: ichorv1alpha1.DiskRoleStorage}})
	observed := func() error {
		m := getMachine(t, name)
		if m.Status.ObservedGeneration != m.Generation {
			return fmt.Errorf("observed %d of %d", m.Status.ObservedGeneration, m.Generation)
		}

		return nil
	}

	t.Cleanup(func() {
		setDisks(t, name, nil)
		testenv.Eventually(t, waitTimeout, name+" observed the disks removed", observed)
		inSync(t, name)
	})

	testenv.Eventually(t, waitTimeout, name+" observed the disk", func() error {
		m := getMachine(t, name)
		if m.Status.ObservedGeneration != m.Generation {
			return fmt.Errorf("observed %d of %d", m.Status.ObservedGeneration, m.Generation)
		}

		if m.Status.RenderedConfigHash != before[name] {
			return fmt.Errorf("a storage disk without a TalosStorage changed the render")
		}

		return nil
	})

	s := storageObj("longhorn", &metav1.LabelSelector{MatchLabels: map[string]string{"pool": name}})
	testenv.Must(t, k8s.Create(ctx, s))
	t.Cleanup(func() { _ = k8s.Delete(ctx, s) })

	want := currentRender(t)

	vals, err := render.ConfigValues(want)
	testenv.Must(t, err)

	if x, ok := valueAt(vals, "UserVolumeConfig/longhorn:provisioning.diskSelector.match"); !ok || x != `disk.wwid == "naa.storage"` {
		t.Fatalf("the render with the storage has no longhorn volume: %v", x)
	}

	testenv.Eventually(t, waitTimeout, name+" renders the storage preset", func() error {
		if got := getMachine(t, name).Status.RenderedConfigHash; got != render.Hash(want) {
			return fmt.Errorf("rendered %s, want %s", got, render.Hash(want))
		}

		return nil
	})

	for _, n := range []string{"cp-1", "w-1"} {
		if got := getMachine(t, n).Status.RenderedConfigHash; got != before[n] {
			t.Errorf("%s not selected but its render changed", n)
		}
	}

	testenv.Must(t, k8s.Delete(ctx, s))

	testenv.Eventually(t, waitTimeout, name+" drops the storage preset", func() error {
		var list ichorv1alpha1.TalosStorageList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}

		if len(list.Items) > 0 {
			return fmt.Errorf("%d storages remain", len(list.Items))
		}

		if got := getMachine(t, name).Status.RenderedConfigHash; got != render.Hash(currentRender(t)) {
			return fmt.Errorf("rendered %s", got)
		}

		return nil
	})
}
