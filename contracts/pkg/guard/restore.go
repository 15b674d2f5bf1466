package guard

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
)

// The etcd restore into the live cluster (architecture, "Backup, recovery,
// certificates"): what admission, the CLI and ichor-ui check before a
// TalosOperation of type etcd-restore is written.

// loadRestoreFacts reads an etcd restore's backup, the cluster lock's active
// holder and the cluster's other unfinished restores (not succeeded or
// failed, paused ones included). A reader that may not
// read the Lease (a CLI user without rights in ichor-system) leaves the
// holder unknown: the webhook, which may, checks it.
func loadRestoreFacts(ctx context.Context, r client.Reader, op *ichorv1alpha1.TalosOperation, facts *OperationFacts) error {
	if op.Spec.Type != ichorv1alpha1.OperationEtcdRestore || op.Spec.EtcdRestore == nil {
		return nil
	}

	b := &ichorv1alpha1.TalosEtcdBackup{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: op.Spec.EtcdRestore.BackupName}, b); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading TalosEtcdBackup %s/%s: %w", op.Namespace, op.Spec.EtcdRestore.BackupName, err)
		}
	} else {
		facts.Backup = b
	}

	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.List(ctx, ops, client.InNamespace(op.Namespace)); err != nil {
		return fmt.Errorf("listing TalosOperations in %s: %w", op.Namespace, err)
	}

	for i := range ops.Items {
		o := &ops.Items[i]
		if o.Name == op.Name || o.Spec.ClusterName != op.Spec.ClusterName || o.Spec.Type != ichorv1alpha1.OperationEtcdRestore {
			continue
		}

		// Paused on a failed step counts too: a restore stopped half-way
		// (its control planes reset) is resumed, not started again.
		if o.DeletionTimestamp == nil && o.Status.Phase != ichorv1alpha1.OperationSucceeded && o.Status.Phase != ichorv1alpha1.OperationFailed {
			facts.UnfinishedRestores = append(facts.UnfinishedRestores, o.Name)
		}
	}

	holder, err := lock.Holder(ctx, r, types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName})
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return nil
		}

		return err
	}

	if holder == "" || holder == lock.OperationIdentity(op.Namespace, op.Name) {
		return nil
	}

	live, err := lock.ClientChecker(r)(ctx, holder)
	if err != nil {
		return err
	}

	if live != lock.Inactive {
		facts.LockHolder = holder
	}

	return nil
}

// fieldRestoreBackup is the field the backup checks name.
const fieldRestoreBackup = "spec.etcdRestore.backupName"

// SnapshotListed reports whether a backup's status lists the snapshot: its
// object key, or the key's last part.
func SnapshotListed(b *ichorv1alpha1.TalosEtcdBackup, snapshot string) (ichorv1alpha1.SnapshotInfo, bool) {
	for _, s := range b.Status.Snapshots {
		if s.Name == snapshot || path.Base(s.Name) == snapshot {
			return s, true
		}
	}

	return ichorv1alpha1.SnapshotInfo{}, false
}

// CheckEtcdRestore checks an etcd restore into the live cluster:
//
//   - the cluster's name typed as consent;
//   - the backup exists and backs up this cluster;
//   - the snapshot is one the backup lists (a restore never guesses);
//   - the backup's store lives outside the cluster: the restore writes its
//     marker there after the API server is down, so a store inside the
//     cluster would deadlock it (override does not override this);
//   - no other work holds the cluster lock, and no other restore of the
//     cluster is unfinished: a restore rolls everything back, so it is not
//     queued behind work that would be undone.
//
// An operation the controller recreated from a restore's marker (the
// restore-marker annotation; the restore rolled the API back past it) is the
// same restore going on: only the first two checks and the store apply.
func CheckEtcdRestore(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	r := op.Spec.EtcdRestore
	if r == nil {
		return nil
	}

	var out []Refusal

	if r.ConfirmClusterName != op.Spec.ClusterName {
		out = append(out, Refusal{
			Field:  "spec.etcdRestore.confirmClusterName",
			Rule:   "a restore rolls the Kubernetes API back; the cluster's name must be typed as consent",
			WayOut: fmt.Sprintf("set spec.etcdRestore.confirmClusterName: %s", op.Spec.ClusterName),
		})
	}

	b := facts.Backup
	switch {
	case b == nil:
		return append(out, Refusal{
			Field:  fieldRestoreBackup,
			Rule:   fmt.Sprintf("TalosEtcdBackup %q does not exist in namespace %q; nothing was created", r.BackupName, op.Namespace),
			WayOut: "name a backup of the cluster (`ichor etcd backup list`)",
		})
	case b.Spec.ClusterName != op.Spec.ClusterName:
		return append(out, Refusal{
			Field:  fieldRestoreBackup,
			Rule:   fmt.Sprintf("TalosEtcdBackup %q backs up cluster %q, not %q; a snapshot is restored only into the cluster it was taken of", b.Name, b.Spec.ClusterName, op.Spec.ClusterName),
			WayOut: "name a backup of cluster " + op.Spec.ClusterName + " (`ichor etcd backup list`)",
		})
	}

	if why := BackupStoreInCluster(b, facts.Cluster); why != "" {
		out = append(out, Refusal{
			Field: fieldRestoreBackup,
			Rule: fmt.Sprintf("the store of TalosEtcdBackup %q lives inside the cluster (%s): the restore writes its marker there once the API server is down, "+
				"so it would deadlock; override does not override this", b.Name, why),
			WayOut: "copy the snapshot to a store outside the cluster, point a TalosEtcdBackup at it, and restore from that one; " +
				"or restore by hand with `talosctl bootstrap --recover-from` and " + adminTalosconfig,
		})
	}

	if op.Annotations[ichorv1alpha1.RestoreMarkerAnnotation] != "" {
		return out
	}

	if _, ok := SnapshotListed(b, r.Snapshot); !ok {
		out = append(out, Refusal{
			Field:  "spec.etcdRestore.snapshot",
			Rule:   fmt.Sprintf("TalosEtcdBackup %q lists no snapshot %q; nothing was created", b.Name, r.Snapshot),
			WayOut: "name a snapshot `ichor etcd backup list " + b.Name + "` shows (its SNAPSHOT column)",
		})
	}

	if facts.LockHolder != "" {
		out = append(out, Refusal{
			Field: fieldSpecType,
			Rule: fmt.Sprintf("the cluster lock of %s is held by %s: a restore rolls the cluster back and is not queued behind other work",
				op.Spec.ClusterName, facts.LockHolder),
			WayOut: "wait until that work ends (`ichor operation list`), or pause or delete it, then start the restore",
		})
	}

	if len(facts.UnfinishedRestores) > 0 {
		names := slices.Clone(facts.UnfinishedRestores)
		slices.Sort(names)
		out = append(out, Refusal{
			Field:  fieldSpecType,
			Rule:   fmt.Sprintf("a restore of cluster %s has not finished: %s", op.Spec.ClusterName, strings.Join(names, ", ")),
			WayOut: "follow it with `ichor operation get NAME --watch` (resume it if it paused on a failed step); start another restore only once it has ended",
		})
	}

	return out
}

// RestoreControlPlane is one control plane as an etcd restore's last check
// sees it, before anything is stopped.
type RestoreControlPlane struct {
	// Name is the TalosMachine's name.
	Name string
	// Unreachable is why it did not answer as itself ("" when it did).
	Unreachable string
	// Stage is the machine stage it reports ("" when unknown) and Ready its
	// readiness.
	Stage string
	Ready bool
}

// CheckRestoreControlPlanes decides whether an etcd restore into the live
// cluster may wipe its control planes' etcd data (the controller's last check
// before the resets): there is at least one control plane, and every one
// answers as itself, running and ready, so that each can be reset and rejoin
// the restored member. etcd's health does not count: the restore stops every
// member on purpose, and its consent is the cluster's name typed
// (CheckEtcdRestore); a cluster whose etcd lost its quorum is what it is for.
func CheckRestoreControlPlanes(cps []RestoreControlPlane) *Refusal {
	if len(cps) == 0 {
		return &Refusal{
			Field:  fieldSpecType,
			Rule:   "the cluster has no provisioned control plane to restore etcd onto",
			WayOut: "provision a control plane first, or recover the cluster from nothing (`ichor restore --recover-cluster`)",
		}
	}

	var problems []string

	for _, cp := range cps {
		switch {
		case cp.Unreachable != "":
			problems = append(problems, fmt.Sprintf("%s: %s", cp.Name, cp.Unreachable))
		case cp.Stage != ichorv1alpha1.StageRunning || !cp.Ready:
			stage := cp.Stage
			if stage == "" {
				stage = "unknown"
			}

			problems = append(problems, fmt.Sprintf("%s is not running and ready (stage %s)", cp.Name, stage))
		}
	}

	if len(problems) == 0 {
		return nil
	}

	return &Refusal{
		Field: fieldSpecType,
		Rule: "every control plane must answer as itself, running, for its etcd data to be wiped and the snapshot restored: " +
			strings.Join(problems, "; "),
		WayOut: "bring those control planes back first (power them on, check their network); if they cannot come back, " +
			"recover the cluster from nothing instead (`ichor restore --recover-cluster`)",
	}
}
