// Package etcdbackup is what a TalosEtcdBackup's snapshots are: where they
// live in the store, what each carries as metadata, how one is verified,
// encrypted and decrypted, and the policies around them (schedule,
// retention, staleness, a store inside the cluster). The controller takes
// and uploads snapshots with it; the CLI and ichor-ui list them with it; the
// restore paths read them back with it, so the layout below is a contract.
//
// # Object layout
//
// Every object of one cluster lives under
//
//	[<spec.s3.prefix>/]<namespace>/<cluster>/
//
// and a snapshot is
//
//	<cluster root>snapshots/<taken at, UTC, 20060102T150405Z>-r<etcd revision>.db.age
//
// so a plain listing sorts snapshots oldest first and shows each one's time
// and revision without reading it. The object is etcd's snapshot as Talos's
// EtcdSnapshot streamed it (the bbolt database and its sha256 trailer),
// encrypted with age to the backup's recipients. Its user metadata
// (x-amz-meta-ichor-*, Metadata) says which cluster, namespace, revision,
// etcd hash, versions and time it holds, and the sha256 of both the plain
// snapshot and the stored object, so a restore checks what it downloaded and
// what it decrypted before it stops anything.
//
// <cluster root>restore/ is kept for the markers of a restore into the live
// cluster (the marker outlives the API server it rolls back).
package etcdbackup

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Format is the version of the layout and metadata written here.
const Format = "1"

// Suffix ends every snapshot object's name.
const Suffix = ".db.age"

// timeLayout is the time in a snapshot's name: UTC, sortable, no colons.
const timeLayout = "20060102T150405Z"

// snapshotsDir and restoreDir are the folders under a cluster's root.
const (
	snapshotsDir = "snapshots/"
	restoreDir   = "restore/"
)

// ClusterRoot is the folder of one cluster's objects: the prefix (without
// leading or trailing slashes), the namespace and the cluster's name.
func ClusterRoot(prefix, namespace, cluster string) string {
	p := strings.Trim(prefix, "/")
	if p != "" {
		p += "/"
	}

	return p + namespace + "/" + cluster + "/"
}

// SnapshotsPrefix is the folder of a cluster's snapshots.
func SnapshotsPrefix(prefix, namespace, cluster string) string {
	return ClusterRoot(prefix, namespace, cluster) + snapshotsDir
}

// RestorePrefix is the folder of a cluster's restore markers.
func RestorePrefix(prefix, namespace, cluster string) string {
	return ClusterRoot(prefix, namespace, cluster) + restoreDir
}

// SnapshotKey is the object key of a snapshot taken at takenAt that holds revision.
func SnapshotKey(prefix, namespace, cluster string, takenAt time.Time, revision int64) string {
	return fmt.Sprintf("%s%s-r%d%s", SnapshotsPrefix(prefix, namespace, cluster), takenAt.UTC().Format(timeLayout), revision, Suffix)
}

// ParseSnapshotKey reads the time and revision out of a snapshot's key; ok
// is false for an object that is not a snapshot of this layout.
func ParseSnapshotKey(key string) (takenAt time.Time, revision int64, ok bool) {
	base := path.Base(key)
	if !strings.HasSuffix(base, Suffix) {
		return time.Time{}, 0, false
	}

	ts, rev, found := strings.Cut(strings.TrimSuffix(base, Suffix), "-r")
	if !found {
		return time.Time{}, 0, false
	}

	t, err := time.Parse(timeLayout, ts)
	if err != nil {
		return time.Time{}, 0, false
	}

	r, err := strconv.ParseInt(rev, 10, 64)
	if err != nil || r <= 0 {
		return time.Time{}, 0, false
	}

	return t, r, true
}

// Object is one snapshot in the store.
type Object struct {
	// Key is the object's key; TakenAt and Revision are read from it.
	Key      string
	TakenAt  time.Time
	Revision int64
	// Size is the stored (encrypted) size.
	Size int64
}
