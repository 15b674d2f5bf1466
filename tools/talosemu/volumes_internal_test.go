package talosemu

import (
	"context"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

const gib = 1 << 30

// volumesOf applies docs to a machine state with an NVMe system disk and a
// 50 GiB SATA disk (serial DATA-A) and returns its VolumeStatuses by ID.
func volumesOf(ctx context.Context, t *testing.T, st state.State, docs string) map[string]block.VolumeStatusSpec {
	t.Helper()

	cfg, err := configloader.NewFromBytes([]byte(docs), configloader.WithNoValidation())
	if err != nil {
		t.Fatal(err)
	}

	disks := []diskHW{{Name: "nvme0n1", Size: 100 * gib}, {Name: "sda", Size: 50 * gib, Serial: "DATA-A"}}
	if err := setVolumeStatuses(ctx, st, cfg, disks, "nvme0n1"); err != nil {
		t.Fatal(err)
	}

	list, err := safe.StateListAll[*block.VolumeStatus](ctx, st)
	if err != nil {
		t.Fatal(err)
	}

	out := map[string]block.VolumeStatusSpec{}
	for v := range list.All() {
		out[v.Metadata().ID()] = *v.TypedSpec()
	}

	return out
}

// TestVolumePlacement: EPHEMERAL takes its maxSize on the system disk first,
// user and raw volumes go to the disk their selector matches with the size
// their maxSize resolves to, an edited document leaves an existing volume
// where and as large as it is, and a selector no disk matches fails.
func TestVolumePlacement(t *testing.T) {
	ctx := context.Background()

	st, err := newMachineState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	disks := []diskHW{{Name: "nvme0n1", Size: 100 * gib, Type: DiskNVMe}, {Name: "sda", Size: 50 * gib, Serial: "DATA-A", Type: DiskSATA}}
	if err := seedHardware(ctx, st, hwSpec{Disks: disks}); err != nil {
		t.Fatal(err)
	}

	got := volumesOf(ctx, t, st, `apiVersion: v1alpha1
kind: VolumeConfig
name: EPHEMERAL
provisioning:
  maxSize: 50%
---
apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: disk.serial == "DATA-A"
  maxSize: 20GiB
---
apiVersion: v1alpha1
kind: RawVolumeConfig
name: raw
provisioning:
  diskSelector:
    match: disk.serial == "DATA-A"
  maxSize: -10GiB
---
apiVersion: v1alpha1
kind: UserVolumeConfig
name: nowhere
provisioning:
  diskSelector:
    match: disk.serial == "NOPE"
  maxSize: 1GiB
`)

	eph, data, raw := got["EPHEMERAL"], got["u-data"], got["r-raw"]
	if eph.ParentLocation != "/dev/nvme0n1" || eph.Size < 45*gib || eph.Size > 50*gib {
		t.Errorf("EPHEMERAL %s %d bytes, want about half of nvme0n1", eph.ParentLocation, eph.Size)
	}

	if data.ParentLocation != "/dev/sda" || data.Size != 20*gib || data.Phase != block.VolumePhaseReady || data.MountSpec.TargetPath != "/var/mnt/data" {
		t.Errorf("u-data %+v, want 20GiB on /dev/sda mounted at /var/mnt/data", data)
	}

	if raw.ParentLocation != "/dev/sda" || raw.Size > 20*gib || raw.Size < 19*gib {
		t.Errorf("r-raw %s %d bytes, want the rest of sda less 10GiB", raw.ParentLocation, raw.Size)
	}

	if got["u-nowhere"].Phase != block.VolumePhaseFailed {
		t.Errorf("u-nowhere %+v, want failed", got["u-nowhere"])
	}

	// Edited: another disk, a lower maxSize. Talos keeps the volume.
	got = volumesOf(ctx, t, st, `apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: system_disk
  maxSize: 5GiB
`)

	if d := got["u-data"]; d.ParentLocation != "/dev/sda" || d.Size != 20*gib {
		t.Errorf("edited u-data %s %d bytes, want it kept on /dev/sda at 20GiB", d.ParentLocation, d.Size)
	}

	if _, ok := got["r-raw"]; ok {
		t.Error("r-raw remains after its document went")
	}
}
