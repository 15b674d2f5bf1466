package storage_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
)

const gib = 1 << 30

var hwDisks = []ichorv1alpha1.DiscoveredDisk{
	{DevicePath: "/dev/sda", WWID: "naa.sys", SizeBytes: 100 * gib},
	{DevicePath: "/dev/sdb", Serial: "DATA1", SizeBytes: 200 * gib},
	{DevicePath: "/dev/sdc", Serial: "DATA2", SizeBytes: 200 * gib},
}

func worker(disks ...ichorv1alpha1.DiskRole) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Role: ichorv1alpha1.RoleWorker,
			Install: ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{WWID: "naa.sys"}},
			Disks:   disks,
		},
	}
}

func userVolume(serial, maxSize string) ichorv1alpha1.DiskRole {
	return ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: serial}, Role: ichorv1alpha1.DiskRoleUserVolume, VolumeName: "data", MaxSize: maxSize}
}

// TestDiskRolesEffective: a changed selector or a lowered maxSize of a volume
// the node already provisioned is reported with its spec path and the way
// out (reset and reinstall); raised sizes, volumes not provisioned yet and
// unchanged roles are in effect.
func TestDiskRolesEffective(t *testing.T) {
	t.Parallel()

	onB := func(size uint64) []storage.Volume {
		return []storage.Volume{
			{ID: "EPHEMERAL", Phase: storage.VolumePhaseReady, Parent: "/dev/sda", Size: 90 * gib},
			{ID: "u-data", Phase: storage.VolumePhaseReady, Parent: "/dev/sdb", Size: size},
		}
	}
	lh := ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lh"},
		Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: "prod", Preset: ichorv1alpha1.StoragePresetLonghornV1},
	}

	for _, tc := range []struct {
		name     string
		m        *ichorv1alpha1.TalosMachine
		storages []ichorv1alpha1.TalosStorage
		volumes  []storage.Volume
		paths    []string // nil: in effect
	}{
		{"as provisioned", worker(userVolume("DATA1", "100GiB")), nil, onB(100 * gib), nil},
		{"whole disk", worker(userVolume("DATA1", "")), nil, onB(200 * gib), nil},
		{"maxSize raised", worker(userVolume("DATA1", "150GiB")), nil, onB(100 * gib), nil},
		{"not provisioned yet", worker(userVolume("DATA2", "10GiB")), nil, onB(100 * gib)[:1], nil},
		{"selector changed", worker(userVolume("DATA2", "100GiB")), nil, onB(100 * gib), []string{"spec.disks[0].disk"}},
		{"maxSize lowered", worker(userVolume("DATA1", "50GiB")), nil, onB(100 * gib), []string{"spec.disks[0].maxSize"}},
		{"maxSize lowered as a percentage", worker(userVolume("DATA1", "25%")), nil, onB(100 * gib), []string{"spec.disks[0].maxSize"}},
		{"maxSize lowered as space to leave free", worker(userVolume("DATA1", "-150GiB")), nil, onB(100 * gib), []string{"spec.disks[0].maxSize"}},
		{"both", worker(userVolume("DATA2", "50GiB")), nil, onB(100 * gib), []string{"spec.disks[0].disk", "spec.disks[0].maxSize"}},
		{
			"ephemeral disk moved",
			worker(ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: "DATA2"}, Role: ichorv1alpha1.DiskRoleEphemeral}),
			nil, []storage.Volume{{ID: "EPHEMERAL", Phase: storage.VolumePhaseReady, Parent: "/dev/sdb", Size: 200 * gib}},
			[]string{"spec.disks[0].disk"},
		},
		{
			"storage disk moved",
			worker(ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: "DATA2"}, Role: ichorv1alpha1.DiskRoleStorage}),
			[]ichorv1alpha1.TalosStorage{lh},
			[]storage.Volume{{ID: "u-longhorn", Phase: storage.VolumePhaseReady, Parent: "/dev/sdb", Size: 200 * gib}},
			[]string{"spec.disks[0].disk"},
		},
		{
			"shared cap lowered",
			func() *ichorv1alpha1.TalosMachine {
				m := worker(ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, Role: ichorv1alpha1.DiskRoleSystem, MaxSize: "20GiB"})
				m.Spec.Install.SystemDiskLayout = ichorv1alpha1.SystemDiskLayoutShared

				return m
			}(),
			nil, []storage.Volume{{ID: "EPHEMERAL", Phase: storage.VolumePhaseReady, Parent: "/dev/sda", Size: 50 * gib}},
			[]string{"spec.disks[0].maxSize"},
		},
		{"disk unknown to discovery", worker(userVolume("DATA2", "1GiB")), nil,
			[]storage.Volume{{ID: "u-data", Phase: storage.VolumePhaseReady, Parent: "/dev/nvme9n1", Size: 100 * gib}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			intents, err := render.VolumeIntents(tc.m, tc.storages)
			if err != nil {
				t.Fatal(err)
			}

			rep := storage.CheckDiskRoles(intents, tc.volumes, hwDisks)

			var got []string
			for _, n := range rep.NoEffect {
				got = append(got, n.Path)
			}

			if strings.Join(got, ",") != strings.Join(tc.paths, ",") {
				t.Fatalf("paths without effect %v, want %v (%s)", got, tc.paths, rep.Message)
			}

			if tc.paths == nil {
				if rep.Status != metav1.ConditionTrue || rep.Reason != storage.DiskRolesInEffectReason {
					t.Errorf("condition %s/%s, want True/InEffect", rep.Status, rep.Reason)
				}

				return
			}

			if rep.Status != metav1.ConditionFalse || rep.Reason != ichorv1alpha1.AcceptedNoEffectReason {
				t.Errorf("condition %s/%s, want False/AcceptedNoEffect", rep.Status, rep.Reason)
			}

			for _, want := range append(tc.paths, "accepted, no effect", "reset and reinstall") {
				if !strings.Contains(rep.Message, want) {
					t.Errorf("message %q does not name %q", rep.Message, want)
				}
			}
		})
	}
}

// TestNodeVolumesReady: a node is ready on the Talos side when every volume
// of its storage preset is provisioned; disk-role volumes do not count.
func TestNodeVolumesReady(t *testing.T) {
	t.Parallel()

	m := worker(userVolume("DATA1", ""),
		ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: "DATA2"}, Role: ichorv1alpha1.DiskRoleStorage})
	lh := ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lh"},
		Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: "prod", Preset: ichorv1alpha1.StoragePresetLonghornV1},
	}

	intents, err := render.VolumeIntents(m, []ichorv1alpha1.TalosStorage{lh})
	if err != nil {
		t.Fatal(err)
	}

	if ok, missing := storage.NodeVolumesReady(intents, nil); ok || strings.Join(missing, ",") != "u-longhorn" {
		t.Errorf("no volumes: ready %t, missing %v; want u-longhorn missing", ok, missing)
	}

	waiting := []storage.Volume{{ID: "u-longhorn", Phase: "waiting"}}
	if ok, _ := storage.NodeVolumesReady(intents, waiting); ok {
		t.Error("a waiting volume counts as ready")
	}

	ready := []storage.Volume{{ID: "u-longhorn", Phase: storage.VolumePhaseReady, Parent: "/dev/sdc"}}
	if ok, missing := storage.NodeVolumesReady(intents, ready); !ok {
		t.Errorf("ready volume: missing %v", missing)
	}
}
