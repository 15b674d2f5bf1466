package attention

import (
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// CertificateWarning is how long before a cluster CA expires the list says so.
const CertificateWarning = 30 * 24 * time.Hour

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

// certificateItems are the cluster's CAs that expire within
// CertificateWarning of now (status.certificates): a warning, an error once
// expired.
func certificateItems(c *ichorv1alpha1.TalosCluster, now time.Time) []Item {
	var out []Item

	certs := c.Status.Certificates
	for _, ca := range []struct {
		key, name string
		at        *metav1.Time
	}{
		{"talos", "Talos API CA", certs.TalosCAExpiry},
		{"kubernetes", "Kubernetes CA", certs.KubernetesCAExpiry},
		{"etcd", "etcd CA", certs.EtcdCAExpiry},
		{"client", "Talos client certificate of Ichor", certs.ClientCertificateExpiry},
	} {
		if ca.at == nil || ca.at.Sub(now) >= CertificateWarning {
			continue
		}

		it := Item{
			Key: KindCluster + "/" + c.Name + "/Certificate/" + ca.key, Kind: KindCluster, Subject: c.Name,
			Detail: ca.name + " not after " + ca.at.UTC().Format(time.RFC3339),
		}

		left := ca.at.Sub(now)
		if left <= 0 {
			it.Severity = Error
			it.Summary = fmt.Sprintf("the %s of cluster %s has expired", ca.name, c.Name)
			it.Since = ca.at.Time
		} else {
			it.Severity = Warning
			it.Summary = fmt.Sprintf("the %s of cluster %s expires in %s; rotate it before then", ca.name, c.Name, days(left))
		}

		out = append(out, it)
	}

	return out
}

// days is a duration in whole days, at least "1 day".
func days(d time.Duration) string {
	n := int(d / (24 * time.Hour))
	if n <= 1 {
		return "1 day"
	}

	return fmt.Sprintf("%d days", n)
}
