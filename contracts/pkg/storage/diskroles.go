package storage

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Volume is a volume as the node reports it (Talos's VolumeStatus in the
// runtime namespace): its ID, phase, the disk it lives on and its size.
type Volume struct {
	ID     string
	Phase  string
	Parent string
	Size   uint64
}

// VolumePhaseReady is the VolumeStatus phase of a provisioned, mounted volume
// (machinery resources/block VolumePhaseReady).
const VolumePhaseReady = "ready"

// partitionSlack is what a partition may exceed its maxSize by without the
// cap being lowered: Talos aligns partitions (1 MiB).
const partitionSlack = 1 << 20

// NoEffect is a spec field Talos accepted but does not apply.
type NoEffect struct {
	Path string
	Why  string
}

// Reasons of the DiskRolesEffective condition besides AcceptedNoEffect.
const (
	DiskRolesInEffectReason  = "InEffect"
	VolumesUnreadableReason  = "VolumesUnreadable"
	NotInstalledReason       = "NotInstalled"
	DiskRolesWayOut          = "Talos keeps a provisioned volume on its disk and at its size (it finds it by its partition label before it reads the selector, and a partition only grows): to apply the change, reset and reinstall the node (ichor node remove, then approve the machine again with the new roles), or put the field back"
	acceptedNoEffectIntro    = "accepted, no effect: "
	diskRolesInEffectMessage = "every provisioned volume is on the disk and within the size its disk role gives"
)

// DiskRolesReport is the DiskRolesEffective condition and the paths without effect.
type DiskRolesReport struct {
	Status   metav1.ConditionStatus
	Reason   string
	Message  string
	NoEffect []NoEffect
}

// CheckDiskRoles decides DiskRolesEffective: the "accepted, no effect" cases
// of architecture "Disks". Talos locates an existing volume by its partition
// label before it consults the selector, so a volume that exists stays where
// it is whatever the selector now says (siderolabs/talos
// internal/app/machined/pkg/controllers/block/internal/volumes/locate.go,
// and the label locator volumeconfig/system_volumes.go and user_volumes.go
// set); and a partition only grows (volumes/grow.go returns when the size is
// at or beyond maxSize), so a lowered maxSize is ignored. Each intent whose
// volume exists on the node is checked against the disk it lives on (found
// in disks by its device path): a selector that does not name that disk, or
// a volume larger than the most its maxSize can give on that disk
// (render.VolumeSize.UpperBound), is a path without effect. Volumes not
// provisioned yet, or on a disk discovery did not see, are not judged.
func CheckDiskRoles(intents []render.VolumeIntent, volumes []Volume, disks []ichorv1alpha1.DiscoveredDisk) DiskRolesReport {
	byID := make(map[string]Volume, len(volumes))
	for _, v := range volumes {
		byID[v.ID] = v
	}

	var out []NoEffect

	for _, in := range intents {
		v, ok := byID[in.ID]
		if !ok || v.Parent == "" {
			continue
		}

		var disk *ichorv1alpha1.DiscoveredDisk

		for i := range disks {
			if disks[i].DevicePath == v.Parent {
				disk = &disks[i]
			}
		}

		if disk == nil {
			continue
		}

		if in.Disk != nil && !render.DiskMatches(*in.Disk, *disk) {
			out = append(out, NoEffect{Path: in.DiskPath, Why: fmt.Sprintf("volume %s stays on %s, which the selector no longer names", in.ID, v.Parent)})
		}

		if in.MaxSize == "" || disk.SizeBytes <= 0 {
			continue
		}

		size, err := render.ParseVolumeSize(in.MaxSize)
		if err != nil {
			continue
		}

		if bound, ok := size.UpperBound(uint64(disk.SizeBytes)); ok && v.Size > bound+partitionSlack {
			out = append(out, NoEffect{Path: in.SizePath, Why: fmt.Sprintf("volume %s keeps its %d bytes, more than maxSize %s allows: a partition never shrinks",
				in.ID, v.Size, in.MaxSize)})
		}
	}

	if len(out) == 0 {
		return DiskRolesReport{Status: metav1.ConditionTrue, Reason: DiskRolesInEffectReason, Message: diskRolesInEffectMessage}
	}

	parts := make([]string, 0, len(out))
	for _, n := range out {
		parts = append(parts, n.Path+" ("+n.Why+")")
	}

	return DiskRolesReport{
		Status: metav1.ConditionFalse, Reason: ichorv1alpha1.AcceptedNoEffectReason, NoEffect: out,
		Message: acceptedNoEffectIntro + strings.Join(parts, "; ") + ". " + DiskRolesWayOut,
	}
}

// NodeVolumesReady reports whether every storage volume of intents is
// provisioned on the node (phase ready), and names those that are not: the
// Talos side of a TalosStorage on one node.
func NodeVolumesReady(intents []render.VolumeIntent, volumes []Volume) (ready bool, missing []string) {
	byID := make(map[string]Volume, len(volumes))
	for _, v := range volumes {
		byID[v.ID] = v
	}

	for _, in := range intents {
		if !in.Storage {
			continue
		}

		if v, ok := byID[in.ID]; !ok || v.Phase != VolumePhaseReady {
			missing = append(missing, in.ID)
		}
	}

	return len(missing) == 0, missing
}
