package render

import (
	"fmt"

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

// storageDocs prepare the Talos side of machine m for the presets of the
// TalosStorages that select it (architecture, "Storage", layer 1).
//
// longhorn-v1: a UserVolumeConfig for each of the machine's storage disks,
// in disk order, the first named longhorn (Longhorn's data path
// /var/mnt/longhorn); a name a userVolume disk role already creates is
// skipped (that disk role is the volume). Longhorn's Talos guide
// asks for no kernel module or sysctl for the V1 data engine (only for V2:
// vm.nr_hugepages and nvme_tcp/vfio_pci), and its kubelet extraMounts of
// /var/mnt/longhorn is not rendered: Talos already mounts /var/mnt, where
// every user volume lives, into the kubelet (talos.dev, "User Volumes": the
// mount "gets automatically propagated into the kubelet container";
// siderolabs/talos internal/app/machined/pkg/system/services/kubelet.go), and
// the multi-document KubeletConfig has no extraMounts. The iscsi-tools and
// util-linux-tools extensions belong to the installer image (the schematic);
// the TalosStorage controller reports them, this layer cannot add them.
//
// longhorn-v2, raw and filesystem render nothing yet.
func storageDocs(m *ichorv1alpha1.TalosMachine, storages []ichorv1alpha1.TalosStorage) ([]doc, error) {
	presets := map[string]bool{}

	for i := range storages {
		ok, err := StorageSelects(&storages[i], m)
		if err != nil {
			return nil, err
		}

		if ok {
			presets[storages[i].Spec.Preset] = true
		}
	}

	if !presets[ichorv1alpha1.StoragePresetLonghornV1] {
		return nil, nil
	}

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
			name = LonghornVolumeName
			if next > 1 {
				name = fmt.Sprintf("%s-%d", LonghornVolumeName, next)
			}
		}

		taken[name] = true

		prov, err := volumeProvisioning(d)
		if err != nil {
			return nil, fmt.Errorf("machine %s: disks[%d]: %w", m.Name, i, err)
		}

		if d.MaxSize == "" {
			// A storage disk is the storage system's: the whole disk. Machinery
			// requires a size on a partition volume and takes a relative one
			// (config/types/block volume_config.go, ProvisioningSpec.Validate).
			prov["maxSize"] = "100%"
		}

		out = append(out, multidoc("UserVolumeConfig", doc{keyName: name, keyProvisioning: prov}))
	}

	return out, nil
}
