package etcdbackup

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// RestoreSteps are the steps of a restore into the live cluster, as the CLI
// and the console show them before it starts (the operation controller's
// restore.go runs them); identity says where the age identity comes from.
func RestoreSteps(identity string) []string {
	return []string{
		"download, decrypt (with the identity in " + identity + ") and check the snapshot; check every control plane answers",
		"write the restore's marker next to the backups",
		"reset every control plane once: EPHEMERAL (its etcd data) wiped, then a reboot; the Kubernetes API goes away",
		"upload the snapshot to the first control plane and bootstrap etcd from it (once)",
		"wait for the other control planes to rejoin etcd and for the Kubernetes API",
	}
}

// NewRestoreOperation is the TalosOperation of type etcd-restore that
// `ichor etcd restore` and the console write: snapshot is the object key the
// backup lists, the cluster's name is typed by the caller before it is written.
func NewRestoreOperation(namespace, name string, b *ichorv1alpha1.TalosEtcdBackup, snapshot string, identity ichorv1alpha1.SecretReference) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: b.Spec.ClusterName, Type: ichorv1alpha1.OperationEtcdRestore,
			EtcdRestore: &ichorv1alpha1.EtcdRestore{BackupName: b.Name, Snapshot: snapshot, ConfirmClusterName: b.Spec.ClusterName, IdentityRef: identity},
		},
	}
}
