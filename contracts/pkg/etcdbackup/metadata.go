package etcdbackup

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Metadata is what a snapshot object says about itself, as S3 user metadata
// (x-amz-meta-ichor-<name>). It holds no secret.
type Metadata struct {
	// Format is the layout's version (Format).
	Format string
	// Namespace and Cluster name the TalosCluster the snapshot is of.
	Namespace, Cluster string
	// Backup names the TalosEtcdBackup that took it.
	Backup string
	// Node is the control plane the snapshot was read from.
	Node string
	// TakenAt is when the snapshot was read.
	TakenAt time.Time
	// Revision is the etcd revision the snapshot holds.
	Revision int64
	// EtcdHash is the hash of the database's contents as `etcdutl snapshot
	// status` computes it; TotalKeys the keys it holds.
	EtcdHash  uint32
	TotalKeys int
	// SnapshotSize and SnapshotSHA256 describe the plain snapshot (etcd's
	// stream, trailer included); ObjectSHA256 the encrypted object.
	SnapshotSize                 int64
	SnapshotSHA256, ObjectSHA256 string
	// TalosVersion and KubernetesVersion are the versions the cluster ran.
	TalosVersion, KubernetesVersion string
	// Encryption is how the object is encrypted: "age".
	Encryption string
}

// metaPrefix starts the name of every metadata key Ichor writes.
const metaPrefix = "ichor-"

// Metadata keys (after x-amz-meta-).
const (
	mFormat     = metaPrefix + "format"
	mNamespace  = metaPrefix + "namespace"
	mCluster    = metaPrefix + "cluster"
	mBackup     = metaPrefix + "backup"
	mNode       = metaPrefix + "node"
	mTakenAt    = metaPrefix + "taken-at"
	mRevision   = metaPrefix + "revision"
	mEtcdHash   = metaPrefix + "etcd-hash"
	mTotalKeys  = metaPrefix + "etcd-keys"
	mSize       = metaPrefix + "snapshot-size"
	mSHA256     = metaPrefix + "snapshot-sha256"
	mObjSHA256  = metaPrefix + "object-sha256"
	mTalos      = metaPrefix + "talos-version"
	mKubernetes = metaPrefix + "kubernetes-version"
	mEncryption = metaPrefix + "encryption"
)

// EncryptionAge is the only encryption snapshots use.
const EncryptionAge = "age"

// Headers is the metadata as user metadata for an upload.
func (m *Metadata) Headers() map[string]string {
	return map[string]string{
		mFormat: m.Format, mNamespace: m.Namespace, mCluster: m.Cluster, mBackup: m.Backup, mNode: m.Node,
		mTakenAt:  m.TakenAt.UTC().Format(time.RFC3339),
		mRevision: strconv.FormatInt(m.Revision, 10), mEtcdHash: strconv.FormatUint(uint64(m.EtcdHash), 10),
		mTotalKeys: strconv.Itoa(m.TotalKeys), mSize: strconv.FormatInt(m.SnapshotSize, 10),
		mSHA256: m.SnapshotSHA256, mObjSHA256: m.ObjectSHA256,
		mTalos: m.TalosVersion, mKubernetes: m.KubernetesVersion, mEncryption: m.Encryption,
	}
}

// ParseMetadata reads the metadata back from an object's user metadata
// (keys in any case, with or without x-amz-meta-).
func ParseMetadata(user map[string]string) (*Metadata, error) {
	get := map[string]string{}

	for k, v := range user {
		k = strings.ToLower(k)
		k = strings.TrimPrefix(k, "x-amz-meta-")
		get[k] = v
	}

	if get[mFormat] == "" {
		return nil, errors.New("the object carries no Ichor snapshot metadata (x-amz-meta-ichor-format)")
	}

	if get[mFormat] != Format {
		return nil, fmt.Errorf("the object's snapshot format is %q; this release reads format %s", get[mFormat], Format)
	}

	m := &Metadata{
		Format: get[mFormat], Namespace: get[mNamespace], Cluster: get[mCluster], Backup: get[mBackup], Node: get[mNode],
		SnapshotSHA256: get[mSHA256], ObjectSHA256: get[mObjSHA256], TalosVersion: get[mTalos],
		KubernetesVersion: get[mKubernetes], Encryption: get[mEncryption],
	}

	var errs []error

	num := func(key string, set func(string) error) {
		if err := set(get[key]); err != nil {
			errs = append(errs, fmt.Errorf("metadata %s: %w", key, err))
		}
	}
	num(mTakenAt, func(s string) (err error) { m.TakenAt, err = time.Parse(time.RFC3339, s); return err })
	num(mRevision, func(s string) (err error) { m.Revision, err = strconv.ParseInt(s, 10, 64); return err })
	num(mEtcdHash, func(s string) error {
		h, err := strconv.ParseUint(s, 10, 32)
		m.EtcdHash = uint32(h)

		return err
	})
	num(mTotalKeys, func(s string) (err error) { m.TotalKeys, err = strconv.Atoi(s); return err })
	num(mSize, func(s string) (err error) { m.SnapshotSize, err = strconv.ParseInt(s, 10, 64); return err })

	return m, errors.Join(errs...)
}
