package etcdbackup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus/testutil"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/verify"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func get(t *testing.T, name string) *ichorv1alpha1.TalosEtcdBackup {
	t.Helper()

	b := &ichorv1alpha1.TalosEtcdBackup{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b))

	return b
}

// waitBackup waits until cond holds on the backup.
func waitBackup(t *testing.T, name, what string, cond func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string)) *ichorv1alpha1.TalosEtcdBackup {
	t.Helper()

	var last *ichorv1alpha1.TalosEtcdBackup

	testenv.EventuallyOK(t, waitTimeout, what, func() (bool, string) {
		last = get(t, name)

		return cond(last)
	})

	return last
}

func condition(b *ichorv1alpha1.TalosEtcdBackup, typ string) metav1.Condition {
	if c := apimeta.FindStatusCondition(b.Status.Conditions, typ); c != nil {
		return *c
	}

	return metav1.Condition{}
}

// request asks for a snapshot now, as `ichor etcd backup now` does.
func request(t *testing.T, name, token string) {
	t.Helper()

	b := get(t, name)
	patch := client.MergeFrom(b.DeepCopy())

	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}

	b.Annotations[ichorv1alpha1.BackupRequestedAnnotation] = token
	testenv.Must(t, k8s.Patch(context.Background(), b, patch))
}

// handled waits until the controller acted on the request token.
func handled(t *testing.T, name, token string) *ichorv1alpha1.TalosEtcdBackup {
	t.Helper()

	return waitBackup(t, name, "the request "+token+" is handled", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		return b.Status.LastHandledRequest == token, fmt.Sprintf("lastHandledRequest %q, conditions %+v", b.Status.LastHandledRequest, b.Status.Conditions)
	})
}

// storeKeys lists the objects under a backup's prefix, oldest first.
func storeKeys(t *testing.T, prefix string) []string {
	t.Helper()

	c, err := s3.Client()
	testenv.Must(t, err)

	var keys []string

	for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix + "/", Recursive: true}) {
		testenv.Must(t, o.Err)
		keys = append(keys, o.Key)
	}

	return keys
}

// noSecrets checks that neither the S3 secret key nor the age identity
// shows in the backup's status or in any Event of the namespace.
func noSecrets(t *testing.T, b *ichorv1alpha1.TalosEtcdBackup) {
	t.Helper()

	raw, err := json.Marshal(b)
	testenv.Must(t, err)

	var evs eventsv1.EventList
	testenv.Must(t, k8s.List(context.Background(), &evs, client.InNamespace(ns)))

	for _, e := range evs.Items {
		raw = append(raw, []byte(e.Note)...)
	}

	for what, secret := range map[string]string{"the S3 secret key": s3.SecretAccessKey, "the S3 access key": s3.AccessKeyID, "the age identity": identity.String()} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("%s leaked into the status or an Event", what)
		}
	}
}

// TestBackupNow: the backup-requested-at annotation takes one snapshot at
// once, from a healthy non-leader control plane; the object in the store is
// the verified snapshot encrypted to the backup's recipient, with its
// metadata; a token already handled takes none. A request that cannot be
// met (no encryption Secret) fails with a reason, counts in the failure
// metric and uploads nothing.
func TestBackupNow(t *testing.T) {
	ctx := context.Background()
	testenv.Must(t, k8s.Create(ctx, newBackup("now")))

	waitBackup(t, "now", "Ready before any snapshot", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		c := condition(b, ichorv1alpha1.ReadyCondition)
		return c.Reason == ichorv1alpha1.WaitingForFirstSnapshotReason, fmt.Sprintf("%+v", c)
	})

	if keys := storeKeys(t, "now"); len(keys) != 0 {
		t.Fatalf("a daily schedule took a snapshot before its time: %v", keys)
	}

	request(t, "now", "t1")
	b := handled(t, "now", "t1")

	if c := condition(b, ichorv1alpha1.ReadyCondition); c.Status != metav1.ConditionTrue || c.Reason != ichorv1alpha1.SnapshotStoredReason {
		t.Fatalf("Ready after the request: %+v (last failure %q)", c, b.Status.LastFailure)
	}

	if len(b.Status.Snapshots) != 1 || b.Status.LastSuccessfulTime == nil {
		t.Fatalf("status lists %d snapshots (want 1), last success %v", len(b.Status.Snapshots), b.Status.LastSuccessfulTime)
	}

	snap := b.Status.Snapshots[0]
	if keys := storeKeys(t, "now"); !slices.Equal(keys, []string{snap.Name}) {
		t.Fatalf("the store holds %v, status lists %s", keys, snap.Name)
	}

	if !strings.HasPrefix(snap.Name, "now/"+ns+"/"+clusterName+"/snapshots/") || snap.EtcdRevision <= 0 || snap.SizeBytes <= 0 || snap.SHA256 == "" {
		t.Fatalf("snapshot entry %+v", snap)
	}

	// Read from a member that does not lead.
	em, err := world.Machine(snap.Node)
	testenv.Must(t, err)

	n, err := (&talos.Dialer{}).Dial(ctx, em.IP(), theBun)
	testenv.Must(t, err)

	st, err := n.EtcdMemberStatus(ctx)
	n.Close()
	testenv.Must(t, err)

	if st.IsLeader() {
		t.Errorf("the snapshot was read from %s, the etcd leader, while another member was healthy", snap.Node)
	}

	checkStoredSnapshot(t, snap)

	// The same token again is no new request.
	request(t, "now", "t1")
	request(t, "now", "t2")
	handled(t, "now", "t2")

	if got := testutil.ToFloat64(snapshotsTaken.WithLabelValues(ns, "now", clusterName)); got != 2 {
		t.Errorf("ichor_etcd_backup_snapshots_total = %v after two tokens (t1 twice, t2), want 2", got)
	}

	// A request that cannot be met.
	testenv.Must(t, k8s.Create(ctx, newBackup("nokey", func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.EncryptionKeyRef.Name = "missing" })))
	request(t, "nokey", "t1")
	nk := handled(t, "nokey", "t1")

	if c := condition(nk, ichorv1alpha1.ReadyCondition); c.Status != metav1.ConditionFalse || c.Reason != ichorv1alpha1.EncryptionKeyUnavailableReason ||
		!strings.Contains(c.Message, `"missing"`) {
		t.Errorf("Ready of a backup without its encryption Secret: %+v", c)
	}

	if nk.Status.LastFailureTime == nil || !strings.Contains(nk.Status.LastFailure, "create it") {
		t.Errorf("last failure %v %q", nk.Status.LastFailureTime, nk.Status.LastFailure)
	}

	if got := testutil.ToFloat64(failures.WithLabelValues(ns, "nokey", clusterName, ichorv1alpha1.EncryptionKeyUnavailableReason)); got < 1 {
		t.Errorf("ichor_etcd_backup_failures_total{reason=EncryptionKeyUnavailable} = %v", got)
	}

	if keys := storeKeys(t, "nokey"); len(keys) != 0 {
		t.Errorf("a failed attempt left objects: %v", keys)
	}

	noSecrets(t, get(t, "now"))
	noSecrets(t, nk)
}

// checkStoredSnapshot downloads a snapshot, checks its digest and metadata,
// decrypts it with the test's identity and checks it with etcd's code.
func checkStoredSnapshot(t *testing.T, snap ichorv1alpha1.SnapshotInfo) {
	t.Helper()

	ctx := context.Background()

	c, err := s3.Client()
	testenv.Must(t, err)

	info, err := c.StatObject(ctx, bucket, snap.Name, minio.StatObjectOptions{})
	testenv.Must(t, err)

	meta, err := etcdbackup.ParseMetadata(info.UserMetadata)
	testenv.Must(t, err)

	if meta.Cluster != clusterName || meta.Namespace != ns || meta.Revision != snap.EtcdRevision || meta.ObjectSHA256 != snap.SHA256 ||
		meta.KubernetesVersion != "1.37.2" || meta.TalosVersion == "" || meta.Node != snap.Node || meta.Encryption != "age" {
		t.Fatalf("metadata %+v does not describe %+v", meta, snap)
	}

	obj, err := c.GetObject(ctx, bucket, snap.Name, minio.GetObjectOptions{})
	testenv.Must(t, err)

	defer obj.Close() //nolint:errcheck // test

	ids, err := etcdbackup.ParseIdentities([]byte(identity.String()))
	testenv.Must(t, err)

	plain, err := etcdbackup.Decrypt(obj, ids)
	testenv.Must(t, err)

	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.Create(path)
	testenv.Must(t, err)

	_, err = io.Copy(f, plain)
	testenv.Must(t, err)
	testenv.Must(t, f.Close())

	v, err := verify.Snapshot(path)
	testenv.Must(t, err)

	if v.Revision != meta.Revision || v.SHA256 != meta.SnapshotSHA256 || v.Hash != meta.EtcdHash || v.Size != meta.SnapshotSize {
		t.Fatalf("the decrypted snapshot (%+v) is not the one the metadata describes (%+v)", v, meta)
	}
}

// TestBackupScheduleAndRetention: snapshots follow the schedule; retention
// keeps the newest count of them in the store and in status, and deletes
// those past maxAge (never the newest); a backup whose attempts fail turns
// Stale, with the metric, while a healthy one stays fresh.
func TestBackupScheduleAndRetention(t *testing.T) {
	ctx := context.Background()
	testenv.Must(t, k8s.Create(ctx, newBackup("sched", func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Spec.Schedule = "@every 2s"
		b.Spec.Retention.Count = 2
	})))

	waitBackup(t, "sched", "three scheduled snapshots", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		n := testutil.ToFloat64(snapshotsTaken.WithLabelValues(ns, "sched", clusterName))
		return n >= 3, fmt.Sprintf("%v snapshots taken, conditions %+v", n, b.Status.Conditions)
	})

	// The status written after the third may lag the metric by one reconcile.
	b := waitBackup(t, "sched", "retention lists two", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		return len(b.Status.Snapshots) == 2 && len(storeKeys(t, "sched")) == 2,
			fmt.Sprintf("status lists %d, the store holds %v", len(b.Status.Snapshots), storeKeys(t, "sched"))
	})

	if !b.Status.Snapshots[0].TakenAt.After(b.Status.Snapshots[1].TakenAt.Time) {
		t.Errorf("status does not list the newest first: %+v", b.Status.Snapshots)
	}

	if c := condition(b, ichorv1alpha1.StaleCondition); c.Status != metav1.ConditionFalse {
		t.Errorf("Stale of a backup that succeeds on schedule: %+v", c)
	}

	if got := testutil.ToFloat64(stale.WithLabelValues(ns, "sched", clusterName)); got != 0 {
		t.Errorf("ichor_etcd_backup_stale = %v for a fresh backup", got)
	}

	testenv.Must(t, k8s.Delete(ctx, b)) // stop its snapshots

	// maxAge: an old snapshot goes, the newest stays even past it.
	c, err := s3.Client()
	testenv.Must(t, err)

	old := etcdbackup.SnapshotKey("aged", ns, clusterName, time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC), 7)
	_, err = c.PutObject(ctx, bucket, old, strings.NewReader("old"), 3, minio.PutObjectOptions{})
	testenv.Must(t, err)

	testenv.Must(t, k8s.Create(ctx, newBackup("aged", func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Spec.Retention.MaxAge = &metav1.Duration{Duration: time.Hour}
	})))
	waitBackup(t, "aged", "the old snapshot is listed, and kept while it is the newest", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		return len(b.Status.Snapshots) == 1 && b.Status.Snapshots[0].Name == old, fmt.Sprintf("%+v", b.Status.Snapshots)
	})
	request(t, "aged", "t1")
	a := handled(t, "aged", "t1")

	if keys := storeKeys(t, "aged"); len(keys) != 1 || keys[0] == old || len(a.Status.Snapshots) != 1 || a.Status.Snapshots[0].Name != keys[0] {
		t.Errorf("after a new snapshot, the store holds %v and status lists %+v; want only the new one", keys, a.Status.Snapshots)
	}

	// Staleness: every attempt fails, so after two scheduled runs the backup is stale.
	testenv.Must(t, k8s.Create(ctx, newBackup("failing", func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Spec.Schedule = "@every 2s"
		b.Spec.EncryptionKeyRef.Name = "missing"
	})))
	f := waitBackup(t, "failing", "Stale", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		c := condition(b, ichorv1alpha1.StaleCondition)
		return c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})

	if c := condition(f, ichorv1alpha1.StaleCondition); c.Reason != ichorv1alpha1.SnapshotOverdueReason || !strings.Contains(c.Message, "ichor etcd backup now failing") {
		t.Errorf("Stale: %+v", c)
	}

	testenv.EventuallyOK(t, waitTimeout, "the stale metric", func() (bool, string) {
		got := testutil.ToFloat64(stale.WithLabelValues(ns, "failing", clusterName))
		return got == 1, fmt.Sprint(got)
	})
	testenv.Must(t, k8s.Delete(ctx, f))
}

// TestBackupStoreInClusterRefused: a store at an address in the cluster's
// pod range carries the StoreInCluster warning (a restore into the live
// cluster will refuse such a store), and snapshots are still taken; the same
// store for a cluster whose ranges do not hold it carries no warning. (Service
// names and the service range are covered by etcdbackup.InCluster's table:
// the controller would send traffic to them here.)
func TestBackupStoreInClusterRefused(t *testing.T) {
	ctx := context.Background()

	// The same machines, as a cluster whose pod range holds the loopback store.
	inRange := testenv.TalosCluster(ns, "loopback-pods")
	inRange.Spec.SecretsBundleRef = ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"}
	inRange.Spec.ControlPlane.Count = 2
	inRange.Spec.Network.PodSubnets = []string{"127.0.0.0/16"}
	testenv.Must(t, k8s.Create(ctx, inRange))

	now := metav1.Now()

	for _, em := range world.Machines() {
		testenv.Must(t, k8s.Create(ctx, &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lp-" + em.Name()},
			Spec: ichorv1alpha1.TalosMachineSpec{
				ClusterName: inRange.Name, Address: em.IP(), Role: ichorv1alpha1.RoleControlPlane, Hostname: em.Name(),
				Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
				Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
			},
		}))
	}

	testenv.Must(t, k8s.Create(ctx, newBackup("in-pod-range", func(b *ichorv1alpha1.TalosEtcdBackup) { b.Spec.ClusterName = inRange.Name })))
	b := waitBackup(t, "in-pod-range", "StoreInCluster", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		c := condition(b, ichorv1alpha1.StoreInClusterCondition)
		return c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", c)
	})

	if c := condition(b, ichorv1alpha1.StoreInClusterCondition); c.Reason != ichorv1alpha1.StoreInClusterReason ||
		!strings.Contains(c.Message, "its address 127.0.0.1 is in the cluster's pod range 127.0.0.0/16") ||
		!strings.Contains(c.Message, "restore into the live cluster will be refused") {
		t.Errorf("StoreInCluster: %+v", c)
	}

	// A warning, not a stop: the snapshot is taken.
	request(t, "in-pod-range", "t1")
	b = handled(t, "in-pod-range", "t1")

	if c := condition(b, ichorv1alpha1.ReadyCondition); c.Reason != ichorv1alpha1.SnapshotStoredReason || len(storeKeys(t, "in-pod-range")) != 1 {
		t.Errorf("a backup with the warning took no snapshot: Ready %+v, store %v", c, storeKeys(t, "in-pod-range"))
	}

	// The neighbour: the same store, for the cluster whose ranges do not hold it.
	testenv.Must(t, k8s.Create(ctx, newBackup("outside")))
	waitBackup(t, "outside", "StoreInCluster false", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		c := condition(b, ichorv1alpha1.StoreInClusterCondition)
		return c.Status == metav1.ConditionFalse && c.Reason == ichorv1alpha1.StoreOutsideClusterReason, fmt.Sprintf("%+v", c)
	})
}
