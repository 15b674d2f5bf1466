package etcdbackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/verify"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
)

// attempt takes, checks, encrypts and uploads one snapshot; nil is success.
func (r *Reconciler) attempt(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, cluster *ichorv1alpha1.TalosCluster,
	st *store.Store, now time.Time,
) *failure {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()

	started := time.Now()

	if err := st.Check(ctx); err != nil {
		return fail(ichorv1alpha1.StoreUnavailableReason, "%v", err)
	}

	if r.killedAt(ctx, b, stepStoreChecked) {
		return &failure{killed: true}
	}

	recipients, f := r.recipients(ctx, b)
	if f != nil {
		return f
	}

	bundle, err := machinestate.LoadBundle(ctx, r.APIReader, cluster)
	if err != nil {
		return fail(ichorv1alpha1.NoHealthyControlPlaneReason, "the secrets bundle of TalosCluster %q cannot be used: %v", cluster.Name, err)
	}

	src, f := r.source(ctx, b, bundle)
	if f != nil {
		return f
	}

	defer src.node.Close()

	dir, err := os.MkdirTemp(r.TempDir, "etcd-snapshot-")
	if err != nil {
		return fail(ichorv1alpha1.SnapshotFailedReason, "making a temporary directory: %v", err)
	}

	defer os.RemoveAll(dir) //nolint:errcheck // best effort

	plain := filepath.Join(dir, "snapshot.db")
	if f := readSnapshot(ctx, src, plain); f != nil {
		return f
	}

	if r.killedAt(ctx, b, stepSnapshotRead) {
		return &failure{killed: true}
	}

	v, err := verify.Snapshot(plain)
	if err != nil {
		return fail(ichorv1alpha1.SnapshotCorruptReason, "the snapshot from %s failed its check: %v", src.name, err)
	}

	if r.killedAt(ctx, b, stepVerified) {
		return &failure{killed: true}
	}

	enc := filepath.Join(dir, "snapshot.db.age")

	encSize, encSHA, err := encryptFile(plain, enc, recipients)
	if err != nil {
		return fail(ichorv1alpha1.SnapshotFailedReason, "encrypting the snapshot: %v", err)
	}

	if r.killedAt(ctx, b, stepEncrypted) {
		return &failure{killed: true}
	}

	talosVersion, err := src.node.TalosVersion(ctx)
	if err != nil {
		talosVersion = cluster.Spec.TalosVersion
	}

	meta := &etcdbackup.Metadata{
		Format: etcdbackup.Format, Namespace: b.Namespace, Cluster: b.Spec.ClusterName, Backup: b.Name, Node: src.name,
		TakenAt: now, Revision: v.Revision, EtcdHash: v.Hash, TotalKeys: v.TotalKeys,
		SnapshotSize: v.Size, SnapshotSHA256: v.SHA256, ObjectSHA256: encSHA,
		TalosVersion: talosVersion, KubernetesVersion: cluster.Spec.KubernetesVersion, Encryption: etcdbackup.EncryptionAge,
	}
	key := etcdbackup.SnapshotKey(b.Spec.S3.Prefix, b.Namespace, b.Spec.ClusterName, now, v.Revision)

	if f := upload(ctx, st, key, enc, encSize, meta); f != nil {
		return f
	}

	if r.killedAt(ctx, b, stepUploaded) {
		return &failure{killed: true}
	}

	labels := []string{b.Namespace, b.Name, b.Spec.ClusterName}
	duration.WithLabelValues(labels...).Observe(time.Since(started).Seconds())
	lastSize.WithLabelValues(labels...).Set(float64(encSize))

	r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, ichorv1alpha1.SnapshotStoredReason, "Snapshot",
		"stored %s: etcd revision %d, %d keys, %d bytes encrypted, read from %s", key, v.Revision, v.TotalKeys, encSize, src.name)
	logf.FromContext(ctx).Info("stored an etcd snapshot", "key", key, "revision", v.Revision, "bytes", encSize, "node", src.name,
		"seconds", time.Since(started).Seconds())

	// The new snapshot leads the list until retention lists the store again.
	b.Status.Snapshots = append([]ichorv1alpha1.SnapshotInfo{snapshotInfo(key, now, encSize, encSHA, v.Revision, src.name)}, b.Status.Snapshots...)

	return nil
}

func snapshotInfo(key string, at time.Time, size int64, sha string, rev int64, node string) ichorv1alpha1.SnapshotInfo {
	return ichorv1alpha1.SnapshotInfo{Name: key, TakenAt: metav1.NewTime(at), SizeBytes: size, SHA256: sha, EtcdRevision: rev, Node: node}
}

// recipients reads the age recipients from the encryption Secret.
func (r *Reconciler) recipients(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup) ([]age.Recipient, *failure) {
	ref := b.Spec.EncryptionKeyRef

	key := ref.Key
	if key == "" {
		key = etcdbackup.DefaultRecipientsKey
	}

	sec := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fail(ichorv1alpha1.EncryptionKeyUnavailableReason,
				"the encryption Secret %q (spec.encryptionKeyRef) does not exist in namespace %q; create it with the age recipients (age1…, one per line) in key %q",
				ref.Name, b.Namespace, key)
		}

		return nil, fail(ichorv1alpha1.EncryptionKeyUnavailableReason, "reading the encryption Secret %q: %v", ref.Name, apiReason(err))
	}

	data, ok := sec.Data[key]
	if !ok {
		return nil, fail(ichorv1alpha1.EncryptionKeyUnavailableReason,
			"the encryption Secret %q has no key %q; put the age recipients (age1…, one per line) there", ref.Name, key)
	}

	rs, err := etcdbackup.ParseRecipients(data)
	if err != nil {
		return nil, fail(ichorv1alpha1.EncryptionKeyUnavailableReason, "key %q of the encryption Secret %q: %v", key, ref.Name, err)
	}

	return rs, nil
}

// source is the control plane a snapshot is read from.
type source struct {
	name string
	node *talos.Node
}

func readSnapshot(ctx context.Context, src *source, path string) *failure {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fail(ichorv1alpha1.SnapshotFailedReason, "creating the snapshot file: %v", err)
	}

	_, err = src.node.EtcdSnapshot(ctx, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}

	if err != nil {
		return fail(ichorv1alpha1.SnapshotFailedReason, "reading the snapshot from %s: %s", src.name, talos.Message(err))
	}

	return nil
}

// encryptFile encrypts plain into enc and returns enc's size and sha256.
func encryptFile(plain, enc string, recipients []age.Recipient) (int64, string, error) {
	in, err := os.Open(plain)
	if err != nil {
		return 0, "", err
	}

	defer in.Close() //nolint:errcheck // read-only

	out, err := os.OpenFile(enc, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, "", err
	}

	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(out, h)}

	_, err = etcdbackup.Encrypt(cw, in, recipients)
	if cerr := out.Close(); err == nil {
		err = cerr
	}

	return cw.n, hex.EncodeToString(h.Sum(nil)), err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)

	return n, err
}

// upload stores the encrypted file and reads it back: the stored size and
// metadata must be what was sent.
func upload(ctx context.Context, st *store.Store, key, enc string, size int64, meta *etcdbackup.Metadata) *failure {
	f, err := os.Open(enc)
	if err != nil {
		return fail(ichorv1alpha1.UploadFailedReason, "opening the encrypted snapshot: %v", err)
	}

	defer f.Close() //nolint:errcheck // read-only

	if err := st.Put(ctx, key, f, size, meta); err != nil {
		return fail(ichorv1alpha1.UploadFailedReason, "%v", err)
	}

	got, m, err := st.Stat(ctx, key)
	if err != nil {
		return fail(ichorv1alpha1.UploadFailedReason, "reading the uploaded snapshot back: %v", err)
	}

	if got != size || m.ObjectSHA256 != meta.ObjectSHA256 || m.Revision != meta.Revision {
		return fail(ichorv1alpha1.UploadFailedReason, "the store holds %s with %d bytes (revision %d), not the %d bytes (revision %d) sent",
			key, got, m.Revision, size, meta.Revision)
	}

	return nil
}

// retain lists the store, deletes what retention expires (but a snapshot a
// running restore uses) and lists the rest in status.
func (r *Reconciler) retain(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, st *store.Store, now time.Time, inUse map[string]bool) *failure {
	objs, err := st.List(ctx, b.Namespace, b.Spec.ClusterName)
	if err != nil {
		return fail(ichorv1alpha1.StoreUnavailableReason, "%v", err)
	}

	var maxAge time.Duration
	if b.Spec.Retention.MaxAge != nil {
		maxAge = b.Spec.Retention.MaxAge.Duration
	}

	expired := etcdbackup.Expired(objs, int(b.Spec.Retention.Count), maxAge, now)

	var deleted []string

	for _, o := range expired {
		if inUse[o.Key] {
			continue
		}

		if err := st.Delete(ctx, o.Key); err != nil {
			return fail(ichorv1alpha1.StoreUnavailableReason, "retention: %v", err)
		}

		deleted = append(deleted, o.Key)
	}

	if len(deleted) > 0 {
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, "SnapshotsExpired", "Retention",
			"deleted %d snapshot(s) past retention: %s", len(deleted), strings.Join(deleted, ", "))
		objs = slices.DeleteFunc(objs, func(o etcdbackup.Object) bool { return slices.Contains(deleted, o.Key) })
	}

	known := map[string]ichorv1alpha1.SnapshotInfo{}
	for _, s := range b.Status.Snapshots {
		known[s.Name] = s
	}

	const maxListed = 1000

	list := make([]ichorv1alpha1.SnapshotInfo, 0, min(len(objs), maxListed))

	for _, o := range objs {
		if len(list) == maxListed {
			break
		}

		if k, ok := known[o.Key]; ok && k.SHA256 != "" && k.SizeBytes == o.Size {
			list = append(list, k)

			continue
		}

		info := snapshotInfo(o.Key, o.TakenAt, o.Size, "", o.Revision, "")
		if _, m, err := st.Stat(ctx, o.Key); err == nil {
			info.SHA256, info.Node = m.ObjectSHA256, m.Node
		}

		list = append(list, info)
	}

	b.Status.Snapshots = list
	storedSnapshots.WithLabelValues(b.Namespace, b.Name, b.Spec.ClusterName).Set(float64(len(list)))

	return nil
}
