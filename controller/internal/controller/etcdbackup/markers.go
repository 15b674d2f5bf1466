package etcdbackup

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
)

// The restore markers in a backup's store (contracts/pkg/etcdbackup,
// Marker): a restore into the live cluster rolls the Kubernetes API back
// past its own TalosOperation, so once the API is back this controller
// recreates the operation from its marker, with the restore-marker
// annotation, and the operation controller completes the restore from the
// marker (architecture, "Backup, recovery, certificates").

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=get;list;watch;create;restore-etcd
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations/secret-references,verbs=update
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=override

// markerRecheck is how often a backup with a running restore looks at its markers again.
const markerRecheck = 30 * time.Second

// restores reads the backup's restore markers: the snapshots running
// restores use (retention keeps them), and whether any restore runs.
type restores struct {
	// inUse are the snapshot keys of running restores.
	inUse map[string]bool
	// running is true while a restore of this backup has not ended.
	running bool
}

// reconcileRestoreMarkers recreates the operation of every running restore
// of this backup whose Bootstrap was sent and whose operation is gone: the
// restored API does not know it. A marker of a restore that never reached
// the Bootstrap lost its operation to a person deleting it, and stays as the
// record. Store errors are left to the snapshot phase, which reports them.
func (r *Reconciler) reconcileRestoreMarkers(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, st *store.Store) restores {
	out := restores{inUse: map[string]bool{}}
	log := logf.FromContext(ctx)

	keys, err := st.ListMarkers(ctx, b.Namespace, b.Spec.ClusterName)
	if err != nil {
		log.V(1).Info("listing the restore markers", "error", err.Error())

		return out
	}

	for _, key := range keys {
		m, err := st.GetMarker(ctx, key)
		if err != nil || m == nil || m.Done() || m.Namespace != b.Namespace || m.Cluster != b.Spec.ClusterName {
			if err != nil {
				log.Info("a restore marker cannot be read", "key", key, "error", err.Error())
			}

			continue
		}

		out.inUse[m.Snapshot.Key] = true

		if m.Spec.EtcdRestore.BackupName != b.Name {
			continue
		}

		out.running = true

		if !m.Bootstrapped {
			continue
		}

		op := &ichorv1alpha1.TalosOperation{}

		err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: m.Operation}, op)
		if err == nil || !apierrors.IsNotFound(err) {
			continue
		}

		op = &ichorv1alpha1.TalosOperation{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: b.Namespace, Name: m.Operation,
				Annotations: map[string]string{ichorv1alpha1.RestoreMarkerAnnotation: m.OperationUID},
			},
			Spec: *m.Spec.DeepCopy(),
		}

		if err := r.Client.Create(ctx, op); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "RestoreNotRecreated", "Restore",
					"the restore %s (marker %s) lost its TalosOperation to the rollback, and recreating it failed: %v; "+
						"create it again with the annotation %s: %s", m.Operation, key, apiReason(err), ichorv1alpha1.RestoreMarkerAnnotation, m.OperationUID)
			}

			continue
		}

		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, "RestoreRecreated", "Restore",
			"recreated TalosOperation %s from its restore marker %s: the restore rolled the Kubernetes API back past it; it completes from the marker", m.Operation, key)
		log.Info("recreated a restore's operation from its marker", "operation", m.Operation, "marker", key)
	}

	return out
}

// restoreOperationBackup maps a deleted etcd-restore operation to its backup,
// whose markers may name it.
func restoreOperationBackup(_ context.Context, o client.Object) []reconcile.Request {
	op, ok := o.(*ichorv1alpha1.TalosOperation)
	if !ok || op.Spec.Type != ichorv1alpha1.OperationEtcdRestore || op.Spec.EtcdRestore == nil {
		return nil
	}

	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.EtcdRestore.BackupName}}}
}

// watchRestoreDeletions wakes a backup when one of its restores' operations
// is deleted (or rolled back away).
func watchRestoreDeletions(b *ctrl.Builder) *ctrl.Builder {
	return b.Watches(&ichorv1alpha1.TalosOperation{}, handler.EnqueueRequestsFromMapFunc(restoreOperationBackup),
		builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return false },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return true },
			GenericFunc: func(event.GenericEvent) bool { return false },
		}))
}
