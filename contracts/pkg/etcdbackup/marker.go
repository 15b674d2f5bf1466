package etcdbackup

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// A restore into the live cluster rolls the Kubernetes API back past its own
// TalosOperation (architecture, "Backup, recovery, certificates"), so its
// progress is kept in a marker next to the backups:
//
//	<cluster root>restore/<operation>.<operation UID>.json
//
// The marker is written before the API server goes down and again before
// every call that cannot be repeated (each Reset, the upload, the
// Bootstrap), so a controller that starts afresh, or an operation recreated
// from the marker once the rolled-back API is back, takes up the restore
// where it stopped and never repeats a finished step. It holds the
// operation's spec (which names the identity Secret, never its content) and
// the state machine of its status.

// MarkerSuffix ends every marker's key.
const MarkerSuffix = ".json"

// Marker phases.
const (
	// MarkerRunning: the restore has started and not ended.
	MarkerRunning = "Running"
	// MarkerSucceeded: the restore completed.
	MarkerSucceeded = "Succeeded"
	// MarkerFailed: the restore ended without completing.
	MarkerFailed = "Failed"
)

// Marker is the record of one restore into the live cluster.
type Marker struct {
	// Format is the layout's version (Format).
	Format string `json:"format"`
	// Namespace and Cluster name the TalosCluster restored.
	Namespace string `json:"namespace"`
	Cluster   string `json:"cluster"`
	// Operation and OperationUID name the TalosOperation that started the
	// restore; a recreated operation carries the UID in its
	// restore-marker annotation.
	Operation    string `json:"operation"`
	OperationUID string `json:"operationUID"`
	// Spec is the operation's spec, so the operation can be recreated.
	Spec ichorv1alpha1.TalosOperationSpec `json:"spec"`
	// Snapshot is what is restored.
	Snapshot MarkerSnapshot `json:"snapshot"`
	// Phase is Running, Succeeded or Failed.
	Phase string `json:"phase"`
	// Step is the operation's status.step, and Machines its
	// status.machines, as of the last write.
	Step     string                          `json:"step"`
	Machines []ichorv1alpha1.MachineProgress `json:"machines,omitempty"`
	// Sequence is the operation's status.progressSequence as of the last
	// write: a status behind it is taken from the marker.
	Sequence int64 `json:"sequence"`
	// Bootstrapped is set once the Bootstrap that recovers the snapshot was
	// sent: from then on the Kubernetes API may come back rolled back past
	// the operation, and a running marker whose operation is gone has it
	// recreated (before, a missing operation was deleted by a person).
	Bootstrapped bool `json:"bootstrapped,omitempty"`
	// Message says what happened last.
	Message string `json:"message,omitempty"`
	// StartedAt and UpdatedAt are when the marker was first and last written.
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// MarkerSnapshot describes the snapshot a restore uploads.
type MarkerSnapshot struct {
	// Key is the snapshot's object key.
	Key string `json:"key"`
	// Revision and EtcdHash are etcd's view of it.
	Revision int64  `json:"revision"`
	EtcdHash uint32 `json:"etcdHash"`
	// SHA256 is the digest of the plain snapshot.
	SHA256 string `json:"sha256"`
}

// MarkerKey is the key of the marker of the restore operation name (uid)
// of a cluster.
func MarkerKey(prefix, namespace, cluster, name, uid string) string {
	return RestorePrefix(prefix, namespace, cluster) + name + "." + uid + MarkerSuffix
}

// ParseMarkerKey reads the operation's name and UID out of a marker's key;
// ok is false for an object that is not a marker.
func ParseMarkerKey(key string) (name, uid string, ok bool) {
	base := path.Base(key)
	if path.Base(path.Dir(key)) != strings.TrimSuffix(restoreDir, "/") || !strings.HasSuffix(base, MarkerSuffix) {
		return "", "", false
	}

	name, uid, found := strings.Cut(strings.TrimSuffix(base, MarkerSuffix), ".")
	if !found || name == "" || uid == "" || strings.Contains(uid, ".") {
		return "", "", false
	}

	return name, uid, true
}

// Done reports whether the restore ended.
func (m *Marker) Done() bool { return m.Phase == MarkerSucceeded || m.Phase == MarkerFailed }

// Encode is the marker as stored.
func (m *Marker) Encode() ([]byte, error) {
	if m.Format == "" {
		m.Format = Format
	}

	return json.MarshalIndent(m, "", "  ")
}

// DecodeMarker reads a stored marker and checks that it is one this release
// reads, of the restore it claims to be.
func DecodeMarker(data []byte) (*Marker, error) {
	m := &Marker{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("the restore marker is not JSON: %w", err)
	}

	var errs []error

	if m.Format != Format {
		errs = append(errs, fmt.Errorf("the restore marker's format is %q; this release reads format %s", m.Format, Format))
	}

	if m.Namespace == "" || m.Cluster == "" || m.Operation == "" || m.OperationUID == "" {
		errs = append(errs, errors.New("the restore marker does not name its namespace, cluster and operation"))
	}

	if m.Spec.Type != ichorv1alpha1.OperationEtcdRestore || m.Spec.EtcdRestore == nil {
		errs = append(errs, errors.New("the restore marker does not hold an etcd-restore operation"))
	}

	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	return m, nil
}
