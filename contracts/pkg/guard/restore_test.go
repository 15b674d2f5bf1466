package guard

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

const restoreSnapshot = "backups/ns/prod/snapshots/20261201T030405Z-r42.db.age"

func backup(mutate ...func(*ichorv1alpha1.TalosEtcdBackup)) *ichorv1alpha1.TalosEtcdBackup {
	b := &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{
			ClusterName: "prod", Schedule: "@daily",
			S3: ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "backups", Prefix: "backups"},
		},
		Status: ichorv1alpha1.TalosEtcdBackupStatus{Snapshots: []ichorv1alpha1.SnapshotInfo{
			{Name: restoreSnapshot, EtcdRevision: 42}, {Name: "s", EtcdRevision: 7},
		}},
	}
	for _, f := range mutate {
		f(b)
	}
	return b
}

func restoreOp(mutate ...func(*ichorv1alpha1.TalosOperation)) *ichorv1alpha1.TalosOperation {
	return op(ichorv1alpha1.OperationEtcdRestore, append([]func(*ichorv1alpha1.TalosOperation){func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.EtcdRestore = &ichorv1alpha1.EtcdRestore{
			BackupName: "b", Snapshot: restoreSnapshot, ConfirmClusterName: "prod",
			IdentityRef: ichorv1alpha1.SecretReference{Name: "restore-identity"},
		}
	}}, mutate...)...)
}

// Rule: a restore into the live cluster is refused without its snapshot,
// with a store inside the cluster (not overridable), while other work holds
// the lock or another restore is unfinished; each refusal names the way out.
// An operation recreated from a restore's marker is the same restore going
// on: only the backup, the typed name and the store are checked.
func TestCheckEtcdRestore(t *testing.T) {
	c := cluster()
	ok := OperationFacts{Cluster: c, Backup: backup()}

	expect(t, CheckEtcdRestore(restoreOp(), ok), nil)
	// The key's last part names the snapshot as well.
	expect(t, CheckEtcdRestore(restoreOp(func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.EtcdRestore.Snapshot = "20261201T030405Z-r42.db.age"
	}), ok), nil)

	expect(t, CheckEtcdRestore(restoreOp(), OperationFacts{Cluster: c}),
		map[string][]string{"spec.etcdRestore.backupName": {`TalosEtcdBackup "b" does not exist`, "ichor etcd backup list"}})
	expect(t, CheckEtcdRestore(restoreOp(), OperationFacts{Cluster: c, Backup: backup(func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Spec.ClusterName = "staging"
	})}), map[string][]string{"spec.etcdRestore.backupName": {`backs up cluster "staging"`}})
	expect(t, CheckEtcdRestore(restoreOp(func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.EtcdRestore.Snapshot = "backups/ns/prod/snapshots/20261130T030405Z-r40.db.age"
	}), ok), map[string][]string{"spec.etcdRestore.snapshot": {"lists no snapshot", "ichor etcd backup list b"}})

	inCluster := OperationFacts{Cluster: c, Backup: backup(func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Spec.S3.Endpoint = "http://minio.minio.svc:9000"
	})}
	got := CheckEtcdRestore(restoreOp(), inCluster)
	expect(t, got, map[string][]string{"spec.etcdRestore.backupName": {"lives inside the cluster", "override does not override", "talosctl bootstrap --recover-from"}})
	for _, r := range got {
		if r.Overridable {
			t.Errorf("a store inside the cluster is overridable: %+v", r)
		}
	}

	held := ok
	held.LockHolder = "ichor-controller/operation/ns/upgrade-1"
	expect(t, CheckEtcdRestore(restoreOp(), held), map[string][]string{"spec.type": {"held by ichor-controller/operation/ns/upgrade-1", "ichor operation list"}})

	twice := ok
	twice.UnfinishedRestores = []string{"restore-2", "restore-1"}
	expect(t, CheckEtcdRestore(restoreOp(), twice), map[string][]string{"spec.type": {"has not finished: restore-1, restore-2"}})

	// Recreated from its marker: the restore rolled the API back, so the
	// backup's status may not list the snapshot and the lock may name what
	// held it when the snapshot was taken.
	recreated := func(o *ichorv1alpha1.TalosOperation) {
		o.Annotations = map[string]string{ichorv1alpha1.RestoreMarkerAnnotation: "0e1d"}
		o.Spec.EtcdRestore.Snapshot = "backups/ns/prod/snapshots/20261202T030405Z-r50.db.age"
	}
	held.UnfinishedRestores = twice.UnfinishedRestores
	expect(t, CheckEtcdRestore(restoreOp(recreated), held), nil)
	expect(t, CheckEtcdRestore(restoreOp(recreated), inCluster), map[string][]string{"spec.etcdRestore.backupName": {"lives inside the cluster"}})

	// The type runs in this release.
	if r := CheckRunnable(restoreOp()); r != nil {
		t.Errorf("etcd-restore is refused: %+v", r)
	}
}

// Rule: a restore wipes the control planes' etcd data only when every one
// answers as itself, running and ready; each one that does not is named.
func TestCheckRestoreControlPlanes(t *testing.T) {
	up := func(name string) RestoreControlPlane {
		return RestoreControlPlane{Name: name, Stage: ichorv1alpha1.StageRunning, Ready: true}
	}
	one := func(r *Refusal) []Refusal {
		if r == nil {
			return nil
		}
		return []Refusal{*r}
	}

	expect(t, one(CheckRestoreControlPlanes([]RestoreControlPlane{up("cp-1")})), nil)
	expect(t, one(CheckRestoreControlPlanes([]RestoreControlPlane{up("cp-1"), up("cp-2"), up("cp-3")})), nil)
	expect(t, one(CheckRestoreControlPlanes(nil)), map[string][]string{"spec.type": {"no provisioned control plane"}})
	expect(t, one(CheckRestoreControlPlanes([]RestoreControlPlane{
		up("cp-1"),
		{Name: "cp-2", Unreachable: "connection refused"},
		{Name: "cp-3", Stage: "booting"},
		{Name: "cp-4"},
		{Name: "cp-5", Stage: ichorv1alpha1.StageRunning},
	})), map[string][]string{"spec.type": {
		"every control plane must answer as itself",
		"cp-2: connection refused; cp-3 is not running and ready (stage booting); cp-4 is not running and ready (stage unknown); " +
			"cp-5 is not running and ready (stage running)",
		"bring those control planes back first",
	}})
}
