package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TalosEtcdBackup condition types.
const (
	// StoreInClusterCondition warns that the store lives inside the cluster it
	// backs up, so a restore into the live cluster is refused.
	StoreInClusterCondition = "StoreInCluster"
	// StaleCondition is true when the last good snapshot is older than the schedule allows.
	StaleCondition = "Stale"
)

// TalosEtcdBackup condition reasons.
const (
	// SnapshotStoredReason: the last snapshot was taken, verified, encrypted and stored.
	SnapshotStoredReason = "SnapshotStored"
	// WaitingForFirstSnapshotReason: no snapshot has been attempted yet.
	WaitingForFirstSnapshotReason = "WaitingForFirstSnapshot"
	// StoreUnavailableReason: the bucket cannot be reached or used.
	StoreUnavailableReason = "StoreUnavailable"
	// CredentialsUnavailableReason: the S3 credentials Secret is missing or incomplete.
	CredentialsUnavailableReason = "CredentialsUnavailable"
	// EncryptionKeyUnavailableReason: the age recipients Secret is missing or does not parse.
	EncryptionKeyUnavailableReason = "EncryptionKeyUnavailable"
	// NoHealthyControlPlaneReason: no control plane's etcd answered.
	NoHealthyControlPlaneReason = "NoHealthyControlPlane"
	// SnapshotFailedReason: reading the snapshot from the node failed.
	SnapshotFailedReason = "SnapshotFailed"
	// SnapshotCorruptReason: the snapshot failed etcd's own checks.
	SnapshotCorruptReason = "SnapshotCorrupt"
	// UploadFailedReason: storing the encrypted snapshot failed.
	UploadFailedReason = "UploadFailed"
	// SnapshotInterruptedReason (a Warning Event): the last attempt was
	// recorded but never ended, as when the controller stopped during it;
	// it is made again at once.
	SnapshotInterruptedReason = "SnapshotInterrupted"
	// InvalidScheduleReason: spec.schedule is not a cron expression.
	InvalidScheduleReason = "InvalidSchedule"
	// StoreInClusterReason: the store is a Service or an address of the cluster's pod or service range.
	StoreInClusterReason = "StoreInCluster"
	// StoreOutsideClusterReason: the store does not live inside the cluster.
	StoreOutsideClusterReason = "StoreOutsideCluster"
	// SnapshotOverdueReason: no good snapshot since two scheduled runs.
	SnapshotOverdueReason = "SnapshotOverdue"
	// SnapshotRecentReason: the last good snapshot is as recent as the schedule asks.
	SnapshotRecentReason = "SnapshotRecent"
)

// TalosEtcdBackupSpec is a backup schedule, destination, retention and encryption.
type TalosEtcdBackupSpec struct {
	// clusterName is the TalosCluster, in the same namespace, whose etcd is backed up.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClusterName string `json:"clusterName"`
	// schedule is when snapshots are taken, in UTC: five cron fields (minute
	// hour day-of-month month day-of-week, such as "0 */6 * * *"), a
	// descriptor (@hourly, @daily, @weekly) or @every <duration>.
	// +required
	// +kubebuilder:validation:MinLength=6
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`
	// s3 is the S3-compatible destination. It must live outside the cluster it backs up.
	// +required
	S3 S3Destination `json:"s3"`
	// retention is how many snapshots are kept.
	// +optional
	Retention BackupRetention `json:"retention,omitempty"`
	// encryptionKeyRef names the Secret whose key (default `recipients`) holds
	// the age recipients snapshots are encrypted to (snapshots contain
	// Secrets): one age1… recipient per line. Keep the matching identities
	// outside the cluster; a restore asks for them. Setting or changing it
	// needs `update` on `talosetcdbackups/secret-references`.
	// +required
	EncryptionKeyRef SecretReference `json:"encryptionKeyRef"`
	// suspend stops scheduled snapshots; a requested one still runs.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// S3Destination is an S3-compatible bucket.
type S3Destination struct {
	// endpoint is the URL of the S3 API.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self)",message="must be a URL such as https://s3.example.com"
	Endpoint string `json:"endpoint"`
	// bucket is the bucket name.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`
	// prefix is the key prefix inside the bucket.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Prefix string `json:"prefix,omitempty"`
	// region is the bucket's region.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Region string `json:"region,omitempty"`
	// credentialsRef names the Secret with the access key (keys accessKeyID and
	// secretAccessKey; the ref's key is not used). Setting or changing it needs `update` on
	// `talosetcdbackups/secret-references`.
	// +required
	CredentialsRef SecretReference `json:"credentialsRef"`
}

// BackupRetention is how many snapshots are kept.
type BackupRetention struct {
	// count keeps this many newest snapshots. Empty means 14.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Count int32 `json:"count,omitempty"`
	// maxAge deletes snapshots older than this.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// TalosEtcdBackupStatus is the observed state of a backup schedule.
type TalosEtcdBackupStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, StoreInCluster, Stale.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// lastScheduleTime is when the last snapshot was started.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// lastSuccessfulTime is when the last verified snapshot was stored.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`
	// lastFailureTime is when the last snapshot attempt failed.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// lastFailure says why the last failed attempt failed (no secret in it).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastFailure string `json:"lastFailure,omitempty"`
	// lastHandledRequest echoes the last backup-requested-at annotation acted on.
	// +optional
	LastHandledRequest string `json:"lastHandledRequest,omitempty"`
	// snapshots are the snapshots in the store, newest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Snapshots []SnapshotInfo `json:"snapshots,omitempty"`
}

// SnapshotInfo describes one stored snapshot.
type SnapshotInfo struct {
	// name is the snapshot's object key.
	Name string `json:"name"`
	// takenAt is when it was taken.
	TakenAt metav1.Time `json:"takenAt"`
	// sizeBytes is its size.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// sha256 is the digest of the encrypted object.
	// +optional
	SHA256 string `json:"sha256,omitempty"`
	// etcdRevision is the etcd revision the snapshot holds.
	// +optional
	EtcdRevision int64 `json:"etcdRevision,omitempty"`
	// node is the control plane the snapshot was read from.
	// +optional
	Node string `json:"node,omitempty"`
}

// TalosEtcdBackup takes verified, encrypted etcd snapshots on a schedule and
// stores them in S3-compatible storage with retention.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=teb,categories=ichor
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last success",type=date,JSONPath=`.status.lastSuccessfulTime`
// +kubebuilder:printcolumn:name="Stale",type=string,JSONPath=`.status.conditions[?(@.type=="Stale")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TalosEtcdBackup struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state.
	// +required
	Spec TalosEtcdBackupSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status TalosEtcdBackupStatus `json:"status,omitempty"`
}

// TalosEtcdBackupList is a list of TalosEtcdBackups.
//
// +kubebuilder:object:root=true
type TalosEtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the backup schedules.
	Items []TalosEtcdBackup `json:"items"`
}
