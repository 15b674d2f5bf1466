package render_test

import (
	"encoding/json"
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// singleDisk is a worker with one disk, installed with the shared layout.
func singleDisk(maxSize string) *ichorv1alpha1.TalosMachine {
	m := machine("w-1", ichorv1alpha1.RoleWorker)
	m.Spec.Install = ichorv1alpha1.MachineInstall{
		Disk: &ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, SystemDiskLayout: ichorv1alpha1.SystemDiskLayoutShared,
	}
	m.Spec.Disks = nil

	if maxSize != "" {
		m.Spec.Disks = []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, Role: ichorv1alpha1.DiskRoleSystem, MaxSize: maxSize}}
	}

	return m
}

// TestSystemDiskShared: the shared layout caps EPHEMERAL on the system disk
// (no selector, grow off) at the system role's maxSize or 50%, and a storage
// preset puts its first volume on the system disk, taking what is left;
// what cannot work (a cap under 2 GiB, space to leave free, an ephemeral
// disk beside it) is an error naming the field.
func TestSystemDiskShared(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ name, maxSize, want string }{
		{"default cap", "", render.DefaultSharedEphemeralMaxSize},
		{"system role cap", "40GiB", "40GiB"},
		{"relative cap", "30%", "30%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Machine = singleDisk(tc.maxSize)
			in.Storages = []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}

			r := renderOK(t, in)
			wantSystem(t, r, render.PatchVolumes, map[string]any{
				"VolumeConfig/EPHEMERAL:provisioning.maxSize": tc.want,
				"VolumeConfig/EPHEMERAL:provisioning.grow":    false,
			})
			wantSystem(t, r, render.PatchStorage, map[string]any{
				"UserVolumeConfig/longhorn:provisioning.diskSelector.match": `disk.wwid == "naa.sys"`,
				"UserVolumeConfig/longhorn:provisioning.maxSize":            "100%",
			})

			if _, ok := get(values(t, r), "VolumeConfig/EPHEMERAL:provisioning.diskSelector.match"); ok {
				t.Error("EPHEMERAL has a disk selector: Talos's default (the system disk) is what the shared layout needs")
			}

			validates(t, r)
		})
	}

	t.Run("dedicated renders no EPHEMERAL cap", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Machine = singleDisk("")
		in.Machine.Spec.Install.SystemDiskLayout = ichorv1alpha1.SystemDiskLayoutDedicated
		in.Storages = []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}

		r := renderOK(t, in)
		if got := dump(t, r, "VolumeConfig", "UserVolumeConfig"); strings.Contains(strings.Join(got, " "), "provisioning") {
			t.Errorf("a dedicated single disk rendered volume provisioning: %v", got)
		}
	})

	for _, tc := range []struct{ name, maxSize, want string }{
		{"under 2GiB", "1GiB", "spec.disks[0].maxSize: EPHEMERAL needs at least 2GiB"},
		{"space to leave free", "-10GiB", "spec.disks[0].maxSize: the shared layout's EPHEMERAL cap \"-10GiB\" must be a size or a percentage"},
		{"not a size", "lots", `size "lots"`},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			t.Parallel()

			in := input(t)
			in.Machine = singleDisk(tc.maxSize)

			if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Render: %v, want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("refused: an ephemeral disk beside it", func(t *testing.T) {
		t.Parallel()

		in := input(t)
		in.Machine = singleDisk("")
		in.Machine.Spec.Disks = []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{Serial: "E1"}, Role: ichorv1alpha1.DiskRoleEphemeral}}

		if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "systemDiskLayout shared") {
			t.Errorf("Render: %v, want the ephemeral disk refused", err)
		}
	})
}

// TestLonghornDiskRegistration: a longhorn-v1 TalosStorage registers the
// machine's Longhorn volumes through the Node label and annotation Longhorn
// reads (KubeNodeConfig under the v1.14 contract); diskRegistration None and
// the other presets render neither.
func TestLonghornDiskRegistration(t *testing.T) {
	t.Parallel()

	in := input(t)
	in.Machine = storageWorker()
	in.Storages = []ichorv1alpha1.TalosStorage{storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)}

	r := renderOK(t, in)
	v := values(t, r)

	label, _ := get(v, "KubeNodeConfig:labels[\""+render.LonghornCreateDefaultDiskLabel+"\"]")
	if label != render.LonghornCreateDefaultDiskConfig {
		t.Errorf("label %s = %v, want config; KubeNodeConfig: %v", render.LonghornCreateDefaultDiskLabel, label, dump(t, r, "KubeNodeConfig"))
	}

	ann, _ := get(v, "KubeNodeConfig:annotations[\""+render.LonghornDefaultDisksConfigAnnotation+"\"]")

	var disks []render.LonghornDisk
	if err := json.Unmarshal([]byte(ann.(string)), &disks); err != nil { //nolint:forcetypeassert // a failing test says so
		t.Fatalf("annotation %q: %v", ann, err)
	}

	want := []render.LonghornDisk{
		{Name: "longhorn", Path: "/var/mnt/longhorn", AllowScheduling: true},
		{Name: "longhorn-2", Path: "/var/mnt/longhorn-2", AllowScheduling: true},
	}
	if len(disks) != len(want) || disks[0] != want[0] || disks[1] != want[1] {
		t.Errorf("default disks %+v, want %+v", disks, want)
	}

	// The machine's own labels survive beside the registration.
	if x, _ := get(v, `KubeNodeConfig:labels["example.com/rack"]`); x != "r1" {
		t.Errorf("the machine's label is lost: %v", dump(t, r, "KubeNodeConfig"))
	}

	validates(t, r)

	for _, tc := range []struct {
		name string
		s    ichorv1alpha1.TalosStorage
	}{
		{"diskRegistration None", func() ichorv1alpha1.TalosStorage {
			s := storage("lh", ichorv1alpha1.StoragePresetLonghornV1, nil)
			s.Spec.DiskRegistration = ichorv1alpha1.DiskRegistrationNone

			return s
		}()},
		{"filesystem preset", storage("fs", ichorv1alpha1.StoragePresetFilesystem, nil)},
	} {
		in := input(t)
		in.Machine = storageWorker()
		in.Storages = []ichorv1alpha1.TalosStorage{tc.s}

		r := renderOK(t, in)
		if got := strings.Join(dump(t, r, "KubeNodeConfig"), " "); strings.Contains(got, "longhorn.io") {
			t.Errorf("%s: registration rendered: %s", tc.name, got)
		}
	}
}
