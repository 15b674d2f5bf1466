package attention

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// WithStorages adds the cluster's TalosStorages' problems to items, in the
// same order Items keeps: a storage system that ignores Ichor's disk
// registration (StorageConsistent False) and missing extensions
// (ExtensionsPresent False) are warnings; machines not prepared on the Talos
// side yet (NodesPrepared False) are work in progress.
func WithStorages(items []Item, cluster string, storages []ichorv1alpha1.TalosStorage) []Item {
	out := append([]Item(nil), items...)

	for i := range storages {
		s := &storages[i]
		if cluster != "" && s.Spec.ClusterName != cluster {
			continue
		}

		for _, w := range []struct {
			typ      string
			bad      metav1.ConditionStatus
			severity Severity
			summary  string
		}{
			{ichorv1alpha1.StorageConsistentCondition, metav1.ConditionFalse, Warning, "the storage system ignores the disks storage %s registers on the Nodes"},
			{ichorv1alpha1.ExtensionsPresentCondition, metav1.ConditionFalse, Warning, "nodes of storage %s lack system extensions its preset needs"},
			{ichorv1alpha1.NodesPreparedCondition, metav1.ConditionFalse, Info, "storage %s waits for the Talos side of its machines"},
		} {
			c := apimeta.FindStatusCondition(s.Status.Conditions, w.typ)
			if c == nil || c.Status != w.bad {
				continue
			}

			out = append(out, Item{
				Key: KindStorage + "/" + s.Name + "/" + w.typ, Severity: w.severity, Kind: KindStorage, Subject: s.Name,
				Summary: fmt.Sprintf(w.summary, s.Name), Detail: detail(c), Since: c.LastTransitionTime.Time,
				Command: "kubectl -n " + s.Namespace + " get talosstorage " + s.Name + " -o yaml",
			})
		}
	}

	sortItems(out)

	return out
}
