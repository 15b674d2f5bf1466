package render

import (
	"fmt"
	"strings"

	blockcfg "github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// EphemeralMinSize is EPHEMERAL's minimum size, 2 GiB: Talos provisions
// EPHEMERAL with minSize defaulting to quirks PartitionSizes.EphemeralMinSize
// (machinery imager/quirks/partitions.go; siderolabs/talos
// internal/app/machined/pkg/controllers/block/internal/volumes/volumeconfig/system_volumes.go,
// GetEphemeralVolumeTransformer).
const EphemeralMinSize uint64 = 2 << 30

// DefaultSharedEphemeralMaxSize is EPHEMERAL's cap under systemDiskLayout
// shared when no spec.disks entry with the role system gives one: half of
// the system disk's free space after Talos's own partitions (a relative size
// is a percentage of the space available, PartitionSpec.ResolveMaxSize).
const DefaultSharedEphemeralMaxSize = "50%"

// VolumeSize is a parsed volume size as Talos reads maxSize: bytes, or a
// percentage of the available space; Negative means the value is space to
// leave free (machinery config/types/block size.go, PercentageSize and
// ByteSize).
type VolumeSize struct {
	Bytes    uint64
	Percent  uint64
	Relative bool
	Negative bool
}

// ParseVolumeSize parses a maxSize as machinery does ("50GiB", "80%",
// "-10GiB", "-25%"); an empty string is no size.
func ParseVolumeSize(s string) (VolumeSize, error) {
	var sz blockcfg.Size
	if err := sz.UnmarshalText([]byte(s)); err != nil {
		return VolumeSize{}, fmt.Errorf("size %q: %w", s, err)
	}

	switch {
	case sz.PercentageSize != nil:
		raw, _ := sz.PercentageSize.MarshalText() // never fails: it returns what it parsed

		return VolumeSize{Percent: sz.PercentageSize.Value(), Relative: true, Negative: len(raw) > 0 && raw[0] == '-'}, nil
	case sz.ByteSize != nil:
		return VolumeSize{Bytes: sz.ByteSize.Value(), Negative: sz.ByteSize.IsNegative()}, nil
	default:
		return VolumeSize{}, nil
	}
}

// UpperBound is the most a volume of this maxSize can have been given on a
// disk of diskSize bytes: the available space is at most the disk, so a
// percentage is at most that share of the disk and a negative value at most
// the disk less the reservation. ok is false for no size.
func (v VolumeSize) UpperBound(diskSize uint64) (bound uint64, ok bool) {
	switch {
	case v.Relative && v.Negative:
		return diskSize - diskSize*v.Percent/100, true
	case v.Relative:
		return diskSize * v.Percent / 100, v.Percent > 0
	case v.Negative:
		if v.Bytes >= diskSize {
			return 0, true
		}

		return diskSize - v.Bytes, true
	default:
		return v.Bytes, v.Bytes > 0
	}
}

// SharedLayout reports whether machine m puts storage beside EPHEMERAL on its
// system disk (spec.install.systemDiskLayout: shared).
func SharedLayout(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Install.SystemDiskLayout == ichorv1alpha1.SystemDiskLayoutShared
}

// SharedEphemeralMaxSize is EPHEMERAL's cap under the shared layout and the
// path it comes from: the maxSize of the spec.disks entry with the role
// system, else DefaultSharedEphemeralMaxSize. An absolute cap below
// EphemeralMinSize is an error: Talos would not provision EPHEMERAL.
func SharedEphemeralMaxSize(m *ichorv1alpha1.TalosMachine) (size, path string, err error) {
	size, path = DefaultSharedEphemeralMaxSize, "spec.install.systemDiskLayout"

	for i, d := range m.Spec.Disks {
		if d.Role == ichorv1alpha1.DiskRoleSystem && d.MaxSize != "" {
			size, path = d.MaxSize, fmt.Sprintf("spec.disks[%d].maxSize", i)

			break
		}
	}

	v, err := ParseVolumeSize(size)
	if err != nil {
		return "", path, err
	}

	switch {
	case v.Negative:
		return "", path, fmt.Errorf("%s: the shared layout's EPHEMERAL cap %q must be a size or a percentage, not space to leave free", path, size)
	case !v.Relative && v.Bytes < EphemeralMinSize:
		return "", path, fmt.Errorf("%s: EPHEMERAL needs at least 2GiB, the shared layout's cap is %s", path, size)
	case v.Relative && v.Percent == 0:
		return "", path, fmt.Errorf("%s: the shared layout's EPHEMERAL cap %q leaves EPHEMERAL no space", path, size)
	}

	return size, path, nil
}

// sharedEphemeralDoc is the EPHEMERAL VolumeConfig of the shared layout: no
// disk selector (Talos then keeps EPHEMERAL on the system disk, its default
// selector, system_volumes.go), the cap as maxSize and grow off, so a later
// boot does not grow EPHEMERAL into the storage volume's space (Talos grows a
// partition up to an absolute maxSize only, volumes/grow.go). Talos
// provisions EPHEMERAL in the system disk's wave, before user volumes, so the
// storage volume takes what is left.
func sharedEphemeralDoc(m *ichorv1alpha1.TalosMachine) (doc, error) {
	size, _, err := SharedEphemeralMaxSize(m)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.Name, err)
	}

	return multidoc("VolumeConfig", doc{keyName: constants.EphemeralPartitionLabel, keyProvisioning: doc{"maxSize": size, "grow": false}}), nil
}

// VolumeIntent is a volume the render places on a disk, by its VolumeStatus
// ID on the node (EPHEMERAL, u-<name> for a user volume, r-<name> for a raw
// one), with the spec fields that place and size it.
type VolumeIntent struct {
	// ID is the volume's VolumeStatus ID.
	ID string
	// Disk selects the disk; nil is Talos's default, the system disk.
	Disk *ichorv1alpha1.DiskSelector
	// MaxSize is the rendered maxSize ("" for none).
	MaxSize string
	// DiskPath and SizePath are the spec fields behind Disk and MaxSize.
	DiskPath, SizePath string
	// Storage is true for a volume a storage preset makes.
	Storage bool
}

// VolumeIntents are the volumes the render of machine m places on its disks:
// EPHEMERAL (an ephemeral disk role, or the shared layout's cap), the user
// volumes of its disk roles, and the volumes of the storage preset of the
// TalosStorages selecting it, in that order.
func VolumeIntents(m *ichorv1alpha1.TalosMachine, storages []ichorv1alpha1.TalosStorage) ([]VolumeIntent, error) {
	var out []VolumeIntent

	if SharedLayout(m) {
		size, path, err := SharedEphemeralMaxSize(m)
		if err != nil {
			return nil, err
		}

		out = append(out, VolumeIntent{ID: constants.EphemeralPartitionLabel, MaxSize: size, DiskPath: "spec.install.disk", SizePath: path})
	}

	for i, d := range m.Spec.Disks {
		var id string

		switch d.Role {
		case ichorv1alpha1.DiskRoleEphemeral:
			id = constants.EphemeralPartitionLabel
		case ichorv1alpha1.DiskRoleUserVolume:
			id = constants.UserVolumePrefix + d.VolumeName
		default:
			continue
		}

		size := d.MaxSize
		if size == "" && d.Role == ichorv1alpha1.DiskRoleUserVolume {
			size = storageFullSize
		}

		out = append(out, VolumeIntent{
			ID: id, Disk: &m.Spec.Disks[i].Disk, MaxSize: size,
			DiskPath: fmt.Sprintf("spec.disks[%d].disk", i), SizePath: fmt.Sprintf("spec.disks[%d].maxSize", i),
		})
	}

	presets, err := selectedPresets(m, storages)
	if err != nil {
		return nil, err
	}

	kind, base := diskPreset(presets)
	if kind == "" {
		return out, nil
	}

	prefix := constants.UserVolumePrefix
	if kind == "RawVolumeConfig" {
		prefix = constants.RawVolumePrefix
	}

	for _, v := range storageVolumeList(m, base) {
		size := v.Disk.MaxSize
		if size == "" {
			size = storageFullSize
		}

		in := VolumeIntent{ID: prefix + v.Name, Disk: &v.Disk.Disk, MaxSize: size, Storage: true}
		if v.Disk.Index < 0 {
			in.DiskPath, in.SizePath = "spec.install.disk", "spec.install.systemDiskLayout"
		} else {
			in.DiskPath, in.SizePath = fmt.Sprintf("spec.disks[%d].disk", v.Disk.Index), fmt.Sprintf("spec.disks[%d].maxSize", v.Disk.Index)
		}

		out = append(out, in)
	}

	return out, nil
}

// DiskMatches reports whether the disk selector s names disk d.
func DiskMatches(s ichorv1alpha1.DiskSelector, d ichorv1alpha1.DiscoveredDisk) bool {
	switch {
	case s.WWID != "":
		return s.WWID == d.WWID
	case s.Serial != "":
		return s.Serial == d.Serial
	case s.ByID != "":
		return strings.TrimPrefix(s.ByID, "/dev/disk/by-id/") == strings.TrimPrefix(d.ByID, "/dev/disk/by-id/")
	case s.BusPath != "":
		return s.BusPath == d.BusPath
	default:
		return s.DevicePath != "" && s.DevicePath == d.DevicePath
	}
}
