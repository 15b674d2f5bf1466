package attention

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// backupItems are the cluster's stale etcd backups: no snapshot stored for
// two scheduled runs (the Stale condition).
func backupItems(cluster string, backups []ichorv1alpha1.TalosEtcdBackup) []Item {
	var out []Item

	for i := range backups {
		b := &backups[i]
		if cluster != "" && b.Spec.ClusterName != cluster {
			continue
		}

		stale := apimeta.FindStatusCondition(b.Status.Conditions, ichorv1alpha1.StaleCondition)
		if stale == nil || stale.Status != metav1.ConditionTrue {
			continue
		}

		summary := fmt.Sprintf("etcd backup %s is stale: no snapshot was stored for two scheduled runs", b.Name)
		if b.Status.LastSuccessfulTime == nil {
			summary = fmt.Sprintf("etcd backup %s is stale: it has never stored a snapshot", b.Name)
		}

		d := detail(stale)
		if b.Status.LastFailure != "" {
			d += "; the last attempt: " + b.Status.LastFailure
		}

		out = append(out, Item{
			Key: KindBackup + "/" + b.Name + "/" + ichorv1alpha1.StaleCondition, Severity: Warning, Kind: KindBackup, Subject: b.Name,
			Summary: summary, Detail: d, Since: stale.LastTransitionTime.Time,
			Command: "ichor etcd backup now " + b.Name + " --wait",
		})
	}

	return out
}
