package attention

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func backup(name, cluster string, stale bool, lastSuccess bool) ichorv1alpha1.TalosEtcdBackup {
	b := ichorv1alpha1.TalosEtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ichorv1alpha1.TalosEtcdBackupSpec{ClusterName: cluster}}
	st, reason := metav1.ConditionFalse, ichorv1alpha1.SnapshotRecentReason
	if stale {
		st, reason = metav1.ConditionTrue, ichorv1alpha1.SnapshotOverdueReason
	}
	b.Status.Conditions = []metav1.Condition{cond(ichorv1alpha1.StaleCondition, st, reason, "two scheduled runs have passed")}
	if lastSuccess {
		b.Status.LastSuccessfulTime = &metav1.Time{Time: t0.Add(-72 * time.Hour)}
	}
	b.Status.LastFailure = "StoreUnreachable: the store does not answer"
	return b
}

// A stale backup of the cluster is a warning with the command that tries
// at once; a recent one, and one of another cluster, are not listed.
func TestStaleBackups(t *testing.T) {
	got := Items(cluster(), nil, nil, []ichorv1alpha1.TalosEtcdBackup{
		backup("nightly", "prod", true, true), backup("hourly", "prod", false, true),
		backup("never", "prod", true, false), backup("other", "staging", true, true),
	}, testNow)
	if len(got) != 2 {
		t.Fatalf("want the two stale backups of prod, got %+v", got)
	}
	byName := map[string]Item{}
	for _, it := range got {
		byName[it.Subject] = it
	}
	n := byName["nightly"]
	if n.Kind != KindBackup || n.Severity != Warning || n.Command != "ichor etcd backup now nightly --wait" ||
		!strings.Contains(n.Summary, "no snapshot was stored for two scheduled runs") || !strings.Contains(n.Detail, "StoreUnreachable") ||
		!n.Since.Equal(t0) || n.Key != "TalosEtcdBackup/nightly/Stale" {
		t.Errorf("nightly: %+v", n)
	}
	if !strings.Contains(byName["never"].Summary, "never stored a snapshot") {
		t.Errorf("never: %+v", byName["never"])
	}
}
