package render

import (
	"encoding/json"
	"fmt"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
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
	presets, err := selectedPresets(m, storages)
	if err != nil {
		return nil, err
	}

	var out []doc

	if len(presets[ichorv1alpha1.StoragePresetLonghornV2]) > 0 {
		out = append(out, longhornV2Docs(vc)...)
	}

	kind, base := diskPreset(presets)
	if kind == "" {
		return out, nil
	}

	vols, names, err := storageVolumes(m, kind, base)
	if err != nil {
		return nil, err
	}

	out = append(out, vols...)

	if len(presets[ichorv1alpha1.StoragePresetLonghornV1]) > 0 {
		if reg := longhornRegistration(storages, m, names, vc); reg != nil {
			out = append(out, reg)
		}
	}

	return out, nil
}

// selectedPresets are the presets of the TalosStorages selecting m, each
// with the names of those TalosStorages. longhorn-v1, filesystem and raw each
// claim the machine's storage disks, so two of them is an error naming both.
func selectedPresets(m *ichorv1alpha1.TalosMachine, storages []ichorv1alpha1.TalosStorage) (map[string][]string, error) {
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

	return presets, nil
}

// diskPreset is the volume document kind and base name the selected presets
// make of the storage disks; "" when none claims them (longhorn-v2 takes its
// disks whole, without a volume).
func diskPreset(presets map[string][]string) (kind, base string) {
	switch {
	case len(presets[ichorv1alpha1.StoragePresetLonghornV1]) > 0:
		return "UserVolumeConfig", LonghornVolumeName
	case len(presets[ichorv1alpha1.StoragePresetFilesystem]) > 0:
		return "UserVolumeConfig", StorageVolumeName
	case len(presets[ichorv1alpha1.StoragePresetRaw]) > 0:
		return "RawVolumeConfig", StorageVolumeName
	default:
		return "", ""
	}
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
// storage system's: without maxSize the volume takes the whole disk. Under
// systemDiskLayout shared the system disk comes first: its volume takes what
// EPHEMERAL leaves (100% of the space available once EPHEMERAL, provisioned
// in the earlier wave, has its share).
func storageVolumes(m *ichorv1alpha1.TalosMachine, kind, base string) ([]doc, []string, error) {
	var (
		out   []doc
		names []string
	)

	for _, v := range storageVolumeList(m, base) {
		prov, err := volumeProvisioning(v.Disk.DiskRole)
		if err != nil {
			return nil, nil, fmt.Errorf("machine %s: %s: %w", m.Name, v.Disk.path(), err)
		}

		if v.Disk.MaxSize == "" {
			// Machinery requires a size on a partition volume and takes a
			// relative one (config/types/block volume_config.go,
			// ProvisioningSpec.Validate).
			prov["maxSize"] = storageFullSize
		}

		out = append(out, multidoc(kind, doc{keyName: v.Name, keyProvisioning: prov}))
		names = append(names, v.Name)
	}

	return out, names, nil
}

// storageFullSize is the maxSize of a storage volume without one: the whole
// disk (what is available on it).
const storageFullSize = "100%"

// storageVolume is a storage disk and the name of its volume.
type storageVolume struct {
	Name string
	Disk storageDisk
}

// storageVolumeList names m's storage disks' volumes base, base-2, ...,
// skipping a name a userVolume disk role already creates.
func storageVolumeList(m *ichorv1alpha1.TalosMachine, base string) []storageVolume {
	taken := map[string]bool{}

	for _, d := range m.Spec.Disks {
		if d.Role == ichorv1alpha1.DiskRoleUserVolume {
			taken[d.VolumeName] = true
		}
	}

	disks := storageDisks(m)
	out := make([]storageVolume, 0, len(disks))
	next := 1

	for _, d := range disks {
		name := ""
		for ; name == "" || taken[name]; next++ {
			name = base
			if next > 1 {
				name = fmt.Sprintf("%s-%d", base, next)
			}
		}

		taken[name] = true
		out = append(out, storageVolume{Name: name, Disk: d})
	}

	return out
}

// storageDisk is a disk a storage preset makes a volume of: a spec.disks
// entry with the role storage (Index its position), or the system disk under
// the shared layout (Index -1).
type storageDisk struct {
	ichorv1alpha1.DiskRole
	Index int
}

func (d storageDisk) path() string {
	if d.Index < 0 {
		return "install.disk"
	}

	return fmt.Sprintf("disks[%d]", d.Index)
}

// storageDisks are machine m's storage disks in order: the system disk first
// under the shared layout, then the disks with the role storage.
func storageDisks(m *ichorv1alpha1.TalosMachine) []storageDisk {
	var out []storageDisk

	if SharedLayout(m) && m.Spec.Install.Disk != nil {
		out = append(out, storageDisk{DiskRole: ichorv1alpha1.DiskRole{Disk: *m.Spec.Install.Disk, Role: ichorv1alpha1.DiskRoleStorage}, Index: -1})
	}

	for i, d := range m.Spec.Disks {
		if d.Role == ichorv1alpha1.DiskRoleStorage {
			out = append(out, storageDisk{DiskRole: d, Index: i})
		}
	}

	return out
}

// Longhorn's disk registration through the Kubernetes Node: with the setting
// create-default-disk-labeled-nodes true, Longhorn creates the default disks
// of a node labelled node.longhorn.io/create-default-disk=config from the
// JSON list in its node.longhorn.io/default-disks-config annotation
// (longhorn-manager types/types.go, UnmarshalToDisks: a list of
// {"name","path","allowScheduling",...}; controller/node_controller.go,
// syncDefaultDisk, reads the label only when that setting is true). Longhorn
// reads them once, when it first sees the node with no disks (longhorn.io,
// "Configuring Defaults for Nodes and Disks").
const (
	LonghornCreateDefaultDiskLabel       = "node.longhorn.io/create-default-disk"
	LonghornCreateDefaultDiskConfig      = "config"
	LonghornDefaultDisksConfigAnnotation = "node.longhorn.io/default-disks-config"
)

// LonghornDisk is one entry of the default-disks-config annotation.
type LonghornDisk struct {
	Name            string `json:"name"`
	Path            string `json:"path"`
	AllowScheduling bool   `json:"allowScheduling"`
}

// RegistersDisks reports whether TalosStorage s hands its disks to the
// storage system through the Node (spec.diskRegistration NodeLabels, the
// default): only longhorn-v1 has such a mechanism Ichor renders.
func RegistersDisks(s *ichorv1alpha1.TalosStorage) bool {
	return s.Spec.Preset == ichorv1alpha1.StoragePresetLonghornV1 && s.Spec.DiskRegistration != ichorv1alpha1.DiskRegistrationNone
}

// longhornRegistration is the node label and annotation registering the
// machine's Longhorn volumes (mounted at /var/mnt/<name>) as Longhorn's
// default disks, when a longhorn-v1 TalosStorage selecting m registers disks.
// Talos writes them on the machine's Node and keeps them there: KubeNodeConfig
// labels and annotations (machine.nodeLabels and machine.nodeAnnotations
// under an older contract; siderolabs/talos
// internal/app/machined/pkg/controllers/k8s/node_label_spec.go and
// node_annotation_spec.go, applied by node_apply.go), so Ichor never writes
// the workload cluster's Node or Longhorn's CRs.
func longhornRegistration(storages []ichorv1alpha1.TalosStorage, m *ichorv1alpha1.TalosMachine, names []string, vc *coreconfig.VersionContract) doc {
	if len(names) == 0 {
		return nil
	}

	register := false

	for i := range storages {
		if ok, err := StorageSelects(&storages[i], m); err == nil && ok && RegistersDisks(&storages[i]) {
			register = true
		}
	}

	if !register {
		return nil
	}

	disks := make([]LonghornDisk, 0, len(names))
	for _, n := range names {
		disks = append(disks, LonghornDisk{Name: n, Path: constants.UserVolumeMountPoint + "/" + n, AllowScheduling: true})
	}

	raw, _ := json.Marshal(disks) //nolint:errchkjson // plain strings and a bool

	labels := doc{LonghornCreateDefaultDiskLabel: LonghornCreateDefaultDiskConfig}
	annotations := doc{LonghornDefaultDisksConfigAnnotation: string(raw)}

	if vc.MultidocKubernetesConfigSupported() {
		return multidoc("KubeNodeConfig", doc{"labels": labels, "annotations": annotations})
	}

	return legacy(doc{keyMachine: doc{"nodeLabels": labels, "nodeAnnotations": annotations}})
}
