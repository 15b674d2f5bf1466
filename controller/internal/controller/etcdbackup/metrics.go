package etcdbackup

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The backup metrics, on controller-runtime's registry (the controller's
// /metrics). Labels name the TalosEtcdBackup and its cluster, never a
// store, a key or a credential.
var (
	labels = []string{"namespace", "backup", "cluster"}

	snapshotsTaken = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ichor_etcd_backup_snapshots_total",
		Help: "Snapshots taken, verified, encrypted and stored, by TalosEtcdBackup.",
	}, labels)
	failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ichor_etcd_backup_failures_total",
		Help: "Snapshot attempts that failed, by TalosEtcdBackup and reason (the TalosEtcdBackup's condition reasons).",
	}, append(append([]string{}, labels...), "reason"))
	lastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ichor_etcd_backup_last_success_timestamp_seconds",
		Help: "Unix time of the last snapshot stored, by TalosEtcdBackup (0: none yet).",
	}, labels)
	stale = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ichor_etcd_backup_stale",
		Help: "1 when no snapshot was stored since two scheduled runs (the Stale condition), else 0.",
	}, labels)
	storedSnapshots = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ichor_etcd_backup_stored_snapshots",
		Help: "Snapshots of the cluster in the store after retention, by TalosEtcdBackup.",
	}, labels)
	lastSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ichor_etcd_backup_last_snapshot_bytes",
		Help: "Size of the last stored (encrypted) snapshot, by TalosEtcdBackup (0: none yet).",
	}, labels)
	duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ichor_etcd_backup_duration_seconds",
		Help:    "Time to snapshot, verify, encrypt and upload, by TalosEtcdBackup.",
		Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
	}, labels)
)

func init() { //nolint:gochecknoinits // metrics register with controller-runtime's registry once
	metrics.Registry.MustRegister(snapshotsTaken, failures, lastSuccess, stale, storedSnapshots, lastSize, duration)
}

// seeded holds the backups whose series this process has seeded.
var seeded sync.Map

// seed makes a backup's series exist from its first reconcile in this
// process, from what its status says, so that after a controller restart
// they are there and right before the next snapshot: the counter and the
// histogram at zero, the last success time (0: none yet), the snapshots
// stored and the last one's size. The attempts update them from then on.
func seed(b *ichorv1alpha1.TalosEtcdBackup) {
	labels := []string{b.Namespace, b.Name, b.Spec.ClusterName}
	if _, done := seeded.LoadOrStore(b.Namespace+"/"+b.Name+"/"+b.Spec.ClusterName, true); done {
		return
	}

	snapshotsTaken.WithLabelValues(labels...)
	duration.WithLabelValues(labels...)

	last := 0.0
	if b.Status.LastSuccessfulTime != nil {
		last = float64(b.Status.LastSuccessfulTime.Unix())
	}

	lastSuccess.WithLabelValues(labels...).Set(last)
	storedSnapshots.WithLabelValues(labels...).Set(float64(len(b.Status.Snapshots)))

	// The status lists the newest first.
	size := 0.0
	if len(b.Status.Snapshots) > 0 {
		size = float64(b.Status.Snapshots[0].SizeBytes)
	}

	lastSize.WithLabelValues(labels...).Set(size)
}
