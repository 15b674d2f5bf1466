package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Operation types.
const (
	// OperationTalos upgrades Talos (version or schematic).
	OperationTalos = "talos"
	// OperationKubernetes upgrades Kubernetes.
	OperationKubernetes = "kubernetes"
	// OperationIchor upgrades Ichor itself through the installer Job.
	OperationIchor = "ichor"
	// OperationCNI upgrades the Cilium chart.
	OperationCNI = "cni"
	// OperationKubeProxy switches kube-proxy between enabled and replaced.
	OperationKubeProxy = "kube-proxy"
	// OperationShutdown stops the whole cluster for planned downtime.
	OperationShutdown = "shutdown"
	// OperationCARotation rotates the Talos and Kubernetes CAs (the aggregator CA on request).
	OperationCARotation = "ca-rotation"
	// OperationKeyRotation rotates the service-account key and the secretbox key.
	OperationKeyRotation = "key-rotation"
	// OperationConfig rolls out configuration that needs a reboot or an API server restart.
	OperationConfig = "config"
	// OperationNode runs an action on one node.
	OperationNode = "node"
	// OperationEtcdRestore restores an etcd snapshot into the live cluster.
	OperationEtcdRestore = "etcd-restore"
)

// Node actions.
const (
	// NodeActionReboot reboots the node (cordoned and drained first).
	NodeActionReboot = "reboot"
	// NodeActionShutdown powers the node off.
	NodeActionShutdown = "shutdown"
	// NodeActionReset wipes STATE and EPHEMERAL (or more, see wipeMode).
	NodeActionReset = "reset"
)

// Operation phases.
const (
	// OperationPending waits for its checks or the cluster lock.
	OperationPending = "Pending"
	// OperationRunning is in progress.
	OperationRunning = "Running"
	// OperationPaused stopped: by a person (spec.paused) or on a failed step (status.failureReason).
	OperationPaused = "Paused"
	// OperationAwaitingCredentials waits until the operator holds credentials for both CAs.
	OperationAwaitingCredentials = "AwaitingCredentials"
	// AwaitingCredentialsReason is the Ready reason of a ca-rotation waiting
	// for the operator's credentials of the new CAs.
	AwaitingCredentialsReason = "AwaitingCredentials"
	// OperationSucceeded finished.
	OperationSucceeded = "Succeeded"
	// OperationFailed cannot continue; a new operation is needed.
	OperationFailed = "Failed"
)

// Stages of a kubernetes operation, in order, as status.step and
// status.stages[].name (and status.machines[].stage for the per-machine ones)
// name them: the pre-checks, the image pre-pull on every node, then the three
// stages of upgrade-k8s, each finished on every machine before the next.
const (
	// KubernetesStagePreCheck checks the target, the pairings, the nodes and the removed APIs in use.
	KubernetesStagePreCheck = "precheck"
	// KubernetesStagePrePull pulls the target's images on every node through Talos's image API.
	KubernetesStagePrePull = "pre-pull"
	// KubernetesStageControlPlane moves kube-apiserver, kube-controller-manager and kube-scheduler, one control plane at a time.
	KubernetesStageControlPlane = "control-plane"
	// KubernetesStageKubeProxy moves the kube-proxy image in the control planes' configuration.
	KubernetesStageKubeProxy = "kube-proxy"
	// KubernetesStageManifests server-side applies Talos's bootstrap manifests, as upgrade-k8s does.
	KubernetesStageManifests = "manifests"
	// KubernetesStageKubelet moves the kubelets: control planes first, then workers within maxUnavailable.
	KubernetesStageKubelet = "kubelet"
)

// KubernetesStages are the stages of a kubernetes operation, in order.
var KubernetesStages = []string{
	KubernetesStagePreCheck, KubernetesStagePrePull, KubernetesStageControlPlane,
	KubernetesStageKubeProxy, KubernetesStageManifests, KubernetesStageKubelet,
}

// Stage phases.
const (
	// StagePending has not started.
	StagePending = "Pending"
	// StageInProgress is running.
	StageInProgress = "InProgress"
	// StageDone finished on every machine it covers.
	StageDone = "Done"
)

// TalosOperation condition types.
const (
	// PreChecksPassedCondition reports the pre-checks (etcd health, readiness, upgrade path, pairing).
	PreChecksPassedCondition = "PreChecksPassed"
	// LockAcquiredCondition reports whether the operation holds the cluster lock.
	LockAcquiredCondition = "LockAcquired"
)

// TalosOperationSpec is a Job-style run of one action over the cluster or a node.
// The spec is immutable except paused: an operation is what was asked and
// checked when it was created; a change is a new operation.
// +kubebuilder:validation:XValidation:rule="self.type == oldSelf.type && self.clusterName == oldSelf.clusterName",message="spec.type and spec.clusterName are immutable: create a new operation"
// +kubebuilder:validation:XValidation:rule="(has(self.maxUnavailable) == has(oldSelf.maxUnavailable)) && (!has(self.maxUnavailable) || self.maxUnavailable == oldSelf.maxUnavailable) && (has(self.orderBy) == has(oldSelf.orderBy)) && (!has(self.orderBy) || self.orderBy == oldSelf.orderBy) && (has(self.machineSelector) == has(oldSelf.machineSelector)) && (!has(self.machineSelector) || self.machineSelector == oldSelf.machineSelector)",message="spec.maxUnavailable, spec.orderBy and spec.machineSelector are immutable (only spec.paused changes): create a new operation"
// +kubebuilder:validation:XValidation:rule="(has(self.talos) == has(oldSelf.talos)) && (!has(self.talos) || self.talos == oldSelf.talos) && (has(self.kubernetes) == has(oldSelf.kubernetes)) && (!has(self.kubernetes) || self.kubernetes == oldSelf.kubernetes) && (has(self.ichor) == has(oldSelf.ichor)) && (!has(self.ichor) || self.ichor == oldSelf.ichor) && (has(self.cni) == has(oldSelf.cni)) && (!has(self.cni) || self.cni == oldSelf.cni) && (has(self.kubeProxy) == has(oldSelf.kubeProxy)) && (!has(self.kubeProxy) || self.kubeProxy == oldSelf.kubeProxy) && (has(self.caRotation) == has(oldSelf.caRotation)) && (!has(self.caRotation) || self.caRotation == oldSelf.caRotation) && (has(self.keyRotation) == has(oldSelf.keyRotation)) && (!has(self.keyRotation) || self.keyRotation == oldSelf.keyRotation) && (has(self.node) == has(oldSelf.node)) && (!has(self.node) || self.node == oldSelf.node) && (has(self.etcdRestore) == has(oldSelf.etcdRestore)) && (!has(self.etcdRestore) || self.etcdRestore == oldSelf.etcdRestore)",message="the operation's target (spec.talos, spec.kubernetes, spec.node, ...) is immutable (only spec.paused changes): create a new operation"
// +kubebuilder:validation:XValidation:rule="(self.type == 'talos') == has(self.talos)",message="spec.talos is required for, and only for, type talos"
// +kubebuilder:validation:XValidation:rule="(self.type == 'kubernetes') == has(self.kubernetes)",message="spec.kubernetes is required for, and only for, type kubernetes"
// +kubebuilder:validation:XValidation:rule="(self.type == 'ichor') == has(self.ichor)",message="spec.ichor is required for, and only for, type ichor"
// +kubebuilder:validation:XValidation:rule="(self.type == 'cni') == has(self.cni)",message="spec.cni is required for, and only for, type cni"
// +kubebuilder:validation:XValidation:rule="(self.type == 'kube-proxy') == has(self.kubeProxy)",message="spec.kubeProxy is required for, and only for, type kube-proxy"
// +kubebuilder:validation:XValidation:rule="self.type == 'ca-rotation' || !has(self.caRotation)",message="spec.caRotation is only for type ca-rotation"
// +kubebuilder:validation:XValidation:rule="self.type == 'key-rotation' || !has(self.keyRotation)",message="spec.keyRotation is only for type key-rotation"
// +kubebuilder:validation:XValidation:rule="(self.type == 'node') == has(self.node)",message="spec.node is required for, and only for, type node"
// +kubebuilder:validation:XValidation:rule="(self.type == 'etcd-restore') == has(self.etcdRestore)",message="spec.etcdRestore is required for, and only for, type etcd-restore"
type TalosOperationSpec struct {
	// clusterName is the TalosCluster, in the same namespace, the operation runs on.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClusterName string `json:"clusterName"`
	// type is the kind of operation: talos, kubernetes, ichor, cni, kube-proxy,
	// shutdown, ca-rotation, key-rotation, config, node or etcd-restore. The
	// destructive ones (shutdown, ca-rotation, key-rotation, etcd-restore, a
	// node reset or shutdown) need their own RBAC verb on talosoperations.
	// +required
	// +kubebuilder:validation:Enum=talos;kubernetes;ichor;cni;kube-proxy;shutdown;ca-rotation;key-rotation;config;node;etcd-restore
	Type string `json:"type"`
	// paused stops the operation after the current step; false resumes it.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// maxUnavailable is how many workers may be disrupted at once. Empty means 1.
	// Control planes always go one at a time.
	// +optional
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// orderBy is a machine label key; machines are disrupted in the order of its values.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	OrderBy string `json:"orderBy,omitempty"`
	// machineSelector limits the operation to the TalosMachines it matches.
	// +optional
	MachineSelector *metav1.LabelSelector `json:"machineSelector,omitempty"`

	// talos is the target of a Talos upgrade.
	// +optional
	Talos *TalosUpgrade `json:"talos,omitempty"`
	// kubernetes is the target of a Kubernetes upgrade.
	// +optional
	Kubernetes *KubernetesUpgrade `json:"kubernetes,omitempty"`
	// ichor is the target of an Ichor upgrade.
	// +optional
	Ichor *IchorUpgrade `json:"ichor,omitempty"`
	// cni is the target of a Cilium chart upgrade.
	// +optional
	CNI *CNIUpgrade `json:"cni,omitempty"`
	// kubeProxy is the target mode of a kube-proxy switch.
	// +optional
	KubeProxy *KubeProxySwitch `json:"kubeProxy,omitempty"`
	// caRotation says which CAs to rotate.
	// +optional
	CARotation *CARotation `json:"caRotation,omitempty"`
	// keyRotation says which keys to rotate.
	// +optional
	KeyRotation *KeyRotation `json:"keyRotation,omitempty"`
	// node is the node and action of a node operation.
	// +optional
	Node *NodeAction `json:"node,omitempty"`
	// etcdRestore is the snapshot to restore.
	// +optional
	EtcdRestore *EtcdRestore `json:"etcdRestore,omitempty"`
}

// TalosUpgrade is the target of a Talos upgrade.
// +kubebuilder:validation:MinProperties=1
type TalosUpgrade struct {
	// version is the target Talos version, newer than the running one.
	// +optional
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+\.\d+$`
	Version string `json:"version,omitempty"`
	// schematic is the target Image Factory schematic ID.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	Schematic string `json:"schematic,omitempty"`
	// versionContract is the contract to move to with this upgrade.
	// +optional
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+$`
	VersionContract string `json:"versionContract,omitempty"`
}

// KubernetesUpgrade is the target of a Kubernetes upgrade.
type KubernetesUpgrade struct {
	// version is the target Kubernetes version: at most one minor up, supported by the cluster's Talos.
	// +required
	// +kubebuilder:validation:Pattern=`^v?\d+\.\d+\.\d+$`
	Version string `json:"version"`
}

// IchorUpgrade is the target of an Ichor upgrade.
type IchorUpgrade struct {
	// version is the target Ichor release.
	// +required
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`
	Version string `json:"version"`
	// installerDigest pins the installer image digest instead of resolving the tag.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	InstallerDigest string `json:"installerDigest,omitempty"`
	// installerSignature is `verify` (default) or `skip`, for builds nobody signs; skip is recorded
	// as a Warning Event on the operation.
	// +optional
	// +kubebuilder:validation:Enum=verify;skip
	InstallerSignature string `json:"installerSignature,omitempty"`
}

// CNIUpgrade is the target of a Cilium chart upgrade.
type CNIUpgrade struct {
	// version is the Cilium chart version embedded in the running Ichor, at most one minor up.
	// +required
	// +kubebuilder:validation:Pattern=`^v?\d+\.\d+\.\d+$`
	Version string `json:"version"`
}

// KubeProxySwitch is the target kube-proxy mode.
type KubeProxySwitch struct {
	// mode is enabled or replaced.
	// +required
	// +kubebuilder:validation:Enum=enabled;replaced
	Mode string `json:"mode"`
}

// CARotation says which CAs to rotate.
type CARotation struct {
	// talos rotates the Talos API CA. Empty means true.
	// +optional
	Talos *bool `json:"talos,omitempty"`
	// kubernetes rotates the Kubernetes CA. Empty means true.
	// +optional
	Kubernetes *bool `json:"kubernetes,omitempty"`
	// etcd rotates the etcd CA. This release refuses it at admission: Talos
	// gives etcd one CA and no accepted list, so a new one cannot be trusted
	// beside the old without a loss of quorum.
	// +optional
	Etcd bool `json:"etcd,omitempty"`
	// aggregator rotates the Kubernetes aggregator CA (the front proxy's
	// client CA) too, in the same stages; v1.14 configuration contract only.
	// +optional
	Aggregator bool `json:"aggregator,omitempty"`
}

// KeyRotation says which keys to rotate.
// +kubebuilder:validation:XValidation:rule="self.serviceAccount || self.secretbox",message="spec.keyRotation: choose serviceAccount, secretbox or both"
type KeyRotation struct {
	// serviceAccount rotates the service-account signing key.
	// +optional
	ServiceAccount bool `json:"serviceAccount,omitempty"`
	// secretbox rotates the secretbox encryption key.
	// +optional
	Secretbox bool `json:"secretbox,omitempty"`
}

// NodeAction is an action on one node.
// +kubebuilder:validation:XValidation:rule="self.action == 'reset' || !has(self.wipeMode)",message="spec.node.wipeMode is only for the reset action"
type NodeAction struct {
	// machineName is the TalosMachine to act on.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	MachineName string `json:"machineName"`
	// action is reboot, shutdown or reset. Shutdown needs the verb `shutdown` on
	// talosoperations; reset needs the verb `override` on the TalosCluster.
	// +required
	// +kubebuilder:validation:Enum=reboot;shutdown;reset
	Action string `json:"action"`
	// wipeMode is what a reset wipes: state-ephemeral (default), system-disk or all.
	// +optional
	// +kubebuilder:validation:Enum=state-ephemeral;system-disk;all
	WipeMode string `json:"wipeMode,omitempty"`
}

// EtcdRestore is the snapshot to restore into the live cluster.
type EtcdRestore struct {
	// backupName is the TalosEtcdBackup whose store holds the snapshot.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupName string `json:"backupName"`
	// snapshot is the snapshot's name, as the backup's status lists it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Snapshot string `json:"snapshot"`
	// confirmClusterName is the cluster's name, typed as consent.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ConfirmClusterName string `json:"confirmClusterName"`
	// identityRef names the Secret whose key (default `identity`) holds an age
	// identity (AGE-SECRET-KEY-1…) of one of the backup's recipients: the
	// controller decrypts the snapshot with it before it stops anything. Keep
	// it only for the restore (`ichor etcd restore --identity FILE` creates it
	// and lets it go with the operation). Setting it needs `update` on
	// `talosoperations/secret-references`.
	// +required
	IdentityRef SecretReference `json:"identityRef"`
}

// DefaultIdentityKey is the key of the Secret an etcd restore's identityRef
// names when the ref names none.
const DefaultIdentityKey = "identity"

// RestoreMarkerAnnotation is set on an etcd-restore operation to the UID of
// the operation whose marker (in the backup store) it continues: the
// controller recreates an operation that the restore rolled back past with
// it, and the recreated operation takes its progress from the marker.
const RestoreMarkerAnnotation = "ichor.maesh.dev/restore-marker"

// TalosOperationStatus is the state machine of an operation. It lives in
// status so that a controller restart resumes where it left off.
type TalosOperationStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, PreChecksPassed, LockAcquired.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// phase is Pending, Running, Paused, AwaitingCredentials, Succeeded or Failed.
	// +optional
	// +kubebuilder:validation:Enum=Pending;Running;Paused;AwaitingCredentials;Succeeded;Failed
	Phase string `json:"phase,omitempty"`
	// step is the current step of the state machine.
	// +optional
	Step string `json:"step,omitempty"`
	// failureReason says why the operation paused on a failed step and what to do.
	// It is cleared when the step is resumed.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	FailureReason string `json:"failureReason,omitempty"`
	// failedStep is the step that failed.
	// +optional
	FailedStep string `json:"failedStep,omitempty"`
	// overridable is true when the failed step stopped at a check that the
	// override annotation of the operation's type goes past
	// (`ichor operation resume NAME --override`): removed APIs in use for a
	// kubernetes operation, the drain capacity check for the others. It is
	// cleared when the step is resumed.
	// +optional
	Overridable bool `json:"overridable,omitempty"`
	// lastHandledResume echoes the last resume annotation acted on.
	// +optional
	LastHandledResume string `json:"lastHandledResume,omitempty"`
	// from is the version before the operation, for upgrades.
	// +optional
	From string `json:"from,omitempty"`
	// to is the target version, for upgrades.
	// +optional
	To string `json:"to,omitempty"`
	// startedAt is when the operation took the lock and started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// completedAt is when it succeeded or failed.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// progressSequence grows on every progress change, so a stream can resume from it.
	// +optional
	ProgressSequence int64 `json:"progressSequence,omitempty"`
	// machines is the per-machine progress. In a kubernetes operation each
	// entry's phase and step belong to its stage (status.machines[].stage).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Machines []MachineProgress `json:"machines,omitempty"`
	// stages are the stages of a kubernetes operation, in order, with their phase.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Stages []OperationStage `json:"stages,omitempty"`
	// removedAPIs are the Kubernetes APIs in use that the target removes, as
	// the pre-checks of a kubernetes operation read them from each
	// kube-apiserver's apiserver_requested_deprecated_apis.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	RemovedAPIs []RemovedAPI `json:"removedAPIs,omitempty"`
	// ichor is the progress of an Ichor upgrade: the installer image,
	// resolved to its digest before anything was created, how its signature
	// was checked, and the installer Job.
	// +optional
	Ichor *IchorUpgradeStatus `json:"ichor,omitempty"`
}

// How an Ichor upgrade's installer image signature was checked
// (status.ichor.signature).
const (
	// SignatureVerified: the release workflow's signature verified offline.
	SignatureVerified = "Verified"
	// SignatureSkipped: spec.ichor.installerSignature is skip; recorded as a
	// Warning Event (reason SignatureCheckSkippedReason).
	SignatureSkipped = "Skipped"
	// SignatureCheckSkippedReason is the reason of the Warning Event of an
	// installer image run without its signature checked.
	SignatureCheckSkippedReason = "SignatureCheckSkipped"
)

// IchorUpgradeStatus is the progress of an Ichor upgrade.
type IchorUpgradeStatus struct {
	// image is the installer image the Job runs, repository@sha256:<digest>
	// (never a tag), recorded before the signature check and the Job.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`
	// signature is Verified (the release workflow's signature checked
	// offline) or Skipped (spec.ichor.installerSignature: skip).
	// +optional
	// +kubebuilder:validation:Enum=Verified;Skipped
	Signature string `json:"signature,omitempty"`
	// signer is the verified signature's certificate identity and OIDC issuer.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Signer string `json:"signer,omitempty"`
	// job is the installer Job of the current run, in Ichor's namespace,
	// recorded before it is created; a resume runs a new one.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Job string `json:"job,omitempty"`
}

// OperationStage is one stage of an operation and how far it is.
type OperationStage struct {
	// name is the stage (precheck, pre-pull, control-plane, kube-proxy, manifests, kubelet).
	// +kubebuilder:validation:MaxLength=32
	Name string `json:"name"`
	// phase is Pending, InProgress or Done.
	// +kubebuilder:validation:Enum=Pending;InProgress;Done
	Phase string `json:"phase"`
	// step is the stage's own step, for a stage the operation runs itself
	// (manifests: apply, then rollout).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Step string `json:"step,omitempty"`
	// message is a human-readable detail (what the stage did or waits for).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// startedAt is when the stage started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// completedAt is when it finished.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
}

// RemovedAPI is an API version a kube-apiserver served and was asked for,
// which the target Kubernetes version no longer serves.
type RemovedAPI struct {
	// group is the API group ("" for the core group).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
	// version is the API version, e.g. v1beta1.
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// resource is the resource, e.g. servicecidrs.
	// +kubebuilder:validation:MaxLength=253
	Resource string `json:"resource"`
	// subresource is the subresource, if the request was for one.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Subresource string `json:"subresource,omitempty"`
	// removedRelease is the Kubernetes minor that removes it, e.g. 1.37.
	// +kubebuilder:validation:MaxLength=16
	RemovedRelease string `json:"removedRelease"`
	// controlPlanes are the control planes whose kube-apiserver reported it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	ControlPlanes []string `json:"controlPlanes,omitempty"`
}

// Per-machine phases.
const (
	// MachinePending has not started.
	MachinePending = "Pending"
	// MachineInProgress is being worked on.
	MachineInProgress = "InProgress"
	// MachineDone finished.
	MachineDone = "Done"
	// MachineFailed failed; the operation paused.
	MachineFailed = "Failed"
	// MachineHeld is skipped while it carries the hold annotation.
	MachineHeld = "Held"
	// MachineSkipped needed nothing.
	MachineSkipped = "Skipped"
)

// MachineProgress is one machine's progress in an operation.
type MachineProgress struct {
	// name is the TalosMachine.
	Name string `json:"name"`
	// role is the machine's role.
	// +optional
	Role string `json:"role,omitempty"`
	// phase is Pending, InProgress, Done, Failed, Held or Skipped.
	// +kubebuilder:validation:Enum=Pending;InProgress;Done;Failed;Held;Skipped
	Phase string `json:"phase"`
	// step is the machine's current step (hook, upgrade, reboot, verify, ...).
	// +optional
	Step string `json:"step,omitempty"`
	// message is a human-readable detail.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
	// stepStartedAt is when the current step started (waits are bounded from it).
	// +optional
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`
	// startedAt is when work on the machine started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// completedAt is when work on the machine finished.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// bootID is the node's boot ID when its reboot was requested, so that the
	// wait knows the node came back on a new boot.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	BootID string `json:"bootID,omitempty"`
	// version is the version the node ran before the operation's upgrade
	// (Talos; in a kubernetes operation, the component the stage moves).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// stage is the stage of a kubernetes operation the phase and step belong to.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Stage string `json:"stage,omitempty"`
}

// TalosOperation is a Job-style run of one action over the cluster or a node:
// a Talos, Kubernetes or Ichor upgrade, a kube-proxy switch or Cilium chart
// upgrade, shutdown, CA rotation, key rotation, config rollout, node action or
// etcd restore. Every operation takes the cluster lock.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=top,categories=ichor
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`,priority=1
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TalosOperation struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is what to do.
	// +required
	Spec TalosOperationSpec `json:"spec"`
	// status is the operation's state machine and per-machine progress.
	// +optional
	Status TalosOperationStatus `json:"status,omitempty"`
}

// TalosOperationList is a list of TalosOperations.
//
// +kubebuilder:object:root=true
type TalosOperationList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the operations.
	Items []TalosOperation `json:"items"`
}
