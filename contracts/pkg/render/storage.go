package render

import (
	"fmt"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// LonghornVolumeName is the user volume Longhorn's data path lives on: Talos
// mounts a UserVolumeConfig at /var/mnt/<name>, and Longhorn's Talos guide
// (longhorn.io, "Talos Linux Support", Talos v1.10 and later) names it
// longhorn, /var/mnt/longhorn. A second and further storage disk of the
// machine become longhorn-2, longhorn-3, ... (disks the user registers with
// Longhorn as additional disks).
const LonghornVolumeName = "longhorn"

// StorageSelects reports whether TalosStorage s prepares machine m: the same
// namespace and cluster, s not being deleted, and its nodeSelector matching
// the machine's labels; an empty nodeSelector selects every worker.
func StorageSelects(s *ichorv1alpha1.TalosStorage, m *ichorv1alpha1.TalosMachine) (bool, error) {
	if s.Namespace != m.Namespace || s.Spec.ClusterName != m.Spec.ClusterName || s.DeletionTimestamp != nil {
		return false, nil
	}

	sel := s.Spec.NodeSelector
	if sel == nil || len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		return m.Spec.Role == ichorv1alpha1.RoleWorker, nil
	}

	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, fmt.Errorf("TalosStorage %s: spec.nodeSelector: %w", s.Name, err)
	}

	return ls.Matches(labels.Set(m.Labels)), nil
}

// StorageVolumeName is the volume the filesystem and raw presets make of a
// machine's first storage disk; the second and further are storage-2,
// storage-3, ... A filesystem volume is mounted at /var/mnt/storage, a raw one
// is the partition labelled r-storage (/dev/disk/by-partlabel/r-storage).
const StorageVolumeName = "storage"

// LonghornV2HugePages is vm.nr_hugepages for Longhorn's V2 data engine: SPDK
// needs 2 GiB of 2 MiB huge pages on each node (longhorn.io, "V2 Data Engine",
// Prerequisites).
const LonghornV2HugePages = "1024"

// LonghornV2KernelModules are the kernel modules Longhorn's V2 data engine
// needs loaded (longhorn.io, "V2 Data Engine", Prerequisites).
var LonghornV2KernelModules = []string{"nvme_tcp", "vfio_pci", "uio_pci_generic"}

// storageDocs prepare the Talos side of machine m for the presets of the
// TalosStorages that select it (architecture, "Storage", layer 1).
//
// longhorn-v1: a UserVolumeConfig for each of the machine's storage disks,
// in disk order, the first named longhorn (Longhorn's data path
// /var/mnt/longhorn); a name a userVolume disk role already creates is
// skipped (that disk role is the volume). Longhorn's Talos guide
// asks for no kernel module or sysctl for the V1 data engine, and its kubelet
// extraMounts of /var/mnt/longhorn is not rendered: Talos already mounts
// /var/mnt, where every user volume lives, into the kubelet (talos.dev, "User
// Volumes": the mount "gets automatically propagated into the kubelet
// container"; siderolabs/talos
// internal/app/machined/pkg/system/services/kubelet.go), and the
// multi-document KubeletConfig has no extraMounts. The iscsi-tools and
// util-linux-tools extensions belong to the installer image (the schematic);
// the TalosStorage controller reports them, this layer cannot add them.
//
// longhorn-v2: the huge pages (vm.nr_hugepages) and the kernel modules
// nvme_tcp, vfio_pci and uio_pci_generic the V2 data engine's SPDK needs, as
// SysctlConfig and KernelModuleConfig documents (machine.sysctls and
// machine.kernel.modules under an older contract). Its disks are block disks
// Longhorn takes whole, so the storage disks get no volume: Talos leaves a
// disk without a volume document alone.
//
// filesystem: a UserVolumeConfig per storage disk, storage, storage-2, ...,
// formatted (Talos's default, xfs) and mounted at /var/mnt/<name> for a
// consumer that takes a directory.
//
// raw: a RawVolumeConfig per storage disk, storage, storage-2, ...: a
// partition Talos creates and never formats, /dev/disk/by-partlabel/r-<name>
// (machinery config/types/block raw_volume_config.go: "raw volumes are
// intended to be used with CSI provisioners"), for Rook/Ceph-style consumers.
//
// longhorn-v1, filesystem and raw each claim the machine's storage disks, so
// two of them selecting one machine is an error naming both.
func storageDocs(m *ichorv1alpha1.TalosMachine, storages []ichorv1alpha1.TalosStorage, vc *coreconfig.VersionContract) ([]doc, error) {
	presets := map[string][]string{}

	for i := range storages {
		ok, err := StorageSelects(&storages[i], m)
		if err != nil {
			return nil, err
		}

		if ok {
			presets[storages[i].Spec.Preset] = append(presets[storages[i].Spec.Preset], storages[i].Name)
		}
	}

	var claims []string

	for _, p := range []string{ichorv1alpha1.StoragePresetLonghornV1, ichorv1alpha1.StoragePresetFilesystem, ichorv1alpha1.StoragePresetRaw} {
		if len(presets[p]) > 0 {
			claims = append(claims, fmt.Sprintf("%s (TalosStorage %s)", p, strings.Join(presets[p], ", ")))
		}
	}

	if len(claims) > 1 {
		return nil, fmt.Errorf("machine %s is selected by TalosStorages of the presets %s, and each of them claims its storage disks: "+
			"change their spec.nodeSelector so that one of them selects the machine", m.Name, strings.Join(claims, " and "))
	}

	var out []doc

	if len(presets[ichorv1alpha1.StoragePresetLonghornV2]) > 0 {
		out = append(out, longhornV2Docs(vc)...)
	}

	switch {
	case len(presets[ichorv1alpha1.StoragePresetLonghornV1]) > 0:
		vols, err := storageVolumes(m, "UserVolumeConfig", LonghornVolumeName)
		if err != nil {
			return nil, err
		}

		out = append(out, vols...)
	case len(presets[ichorv1alpha1.StoragePresetFilesystem]) > 0:
		vols, err := storageVolumes(m, "UserVolumeConfig", StorageVolumeName)
		if err != nil {
			return nil, err
		}

		out = append(out, vols...)
	case len(presets[ichorv1alpha1.StoragePresetRaw]) > 0:
		vols, err := storageVolumes(m, "RawVolumeConfig", StorageVolumeName)
		if err != nil {
			return nil, err
		}

		out = append(out, vols...)
	}

	return out, nil
}

// longhornV2Docs are the huge pages and kernel modules of Longhorn's V2 data
// engine, as documents when the contract has them.
func longhornV2Docs(vc *coreconfig.VersionContract) []doc {
	var out []doc

	if vc.MultidocSysctlConfigSupported() {
		out = append(out, multidoc("SysctlConfig", doc{"params": doc{"vm.nr_hugepages": LonghornV2HugePages}}))
	} else {
		out = append(out, legacy(doc{keyMachine: doc{"sysctls": doc{"vm.nr_hugepages": LonghornV2HugePages}}}))
	}

	if vc.MultidocKernelModuleConfigSupported() {
		for _, mod := range LonghornV2KernelModules {
			out = append(out, multidoc("KernelModuleConfig", doc{keyName: mod}))
		}

		return out
	}

	mods := make([]any, 0, len(LonghornV2KernelModules))
	for _, mod := range LonghornV2KernelModules {
		mods = append(mods, doc{keyName: mod})
	}

	return append(out, legacy(doc{keyMachine: doc{"kernel": doc{"modules": mods}}}))
}

// storageVolumes is a volume document of kind per storage disk of m, in disk
// order, named base, base-2, ...; a name a userVolume disk role already
// creates is skipped (that disk role is the volume). A storage disk is the
// storage system's: without maxSize the volume takes the whole disk.
func storageVolumes(m *ichorv1alpha1.TalosMachine, kind, base string) ([]doc, error) {
	taken := map[string]bool{}

	for _, d := range m.Spec.Disks {
		if d.Role == ichorv1alpha1.DiskRoleUserVolume {
			taken[d.VolumeName] = true
		}
	}

	var out []doc

	next := 1

	for i, d := range m.Spec.Disks {
		if d.Role != ichorv1alpha1.DiskRoleStorage {
			continue
		}

		name := ""
		for ; name == "" || taken[name]; next++ {
			name = base
			if next > 1 {
				name = fmt.Sprintf("%s-%d", base, next)
			}
		}

		taken[name] = true

		prov, err := volumeProvisioning(d)
		if err != nil {
			return nil, fmt.Errorf("machine %s: disks[%d]: %w", m.Name, i, err)
		}

		if d.MaxSize == "" {
			// Machinery requires a size on a partition volume and takes a
			// relative one (config/types/block volume_config.go,
			// ProvisioningSpec.Validate).
			prov["maxSize"] = "100%"
		}

		out = append(out, multidoc(kind, doc{keyName: name, keyProvisioning: prov}))
	}

	return out, nil
}
