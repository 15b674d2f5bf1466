package v1alpha1

// Annotations Ichor reads. Each one is a person's explicit consent to
// something the webhooks or the controller otherwise refuse.
const (
	// AllowDeleteAnnotation must be "true" on a TalosCluster or TalosMachine
	// before it can be deleted, so that a prune by the user's own tooling cannot
	// cascade into node resets. It never lets the last control plane go.
	AllowDeleteAnnotation = "ichor.maesh.dev/allow-delete"
	// TeardownResetMachinesAnnotation "true" on a TalosCluster makes its
	// teardown reset each machine that runs the cluster's configuration (a
	// graceful Talos Reset wiping STATE and EPHEMERAL, then a reboot into
	// maintenance mode) before the bundle Secret is deleted; without it the
	// machines are left as they are. Setting it needs `reset-node` on
	// talosoperations, the verb of a node reset (ichor-admin).
	TeardownResetMachinesAnnotation = "ichor.maesh.dev/teardown-reset-machines"
	// AdoptedAnnotation marks a TalosCluster an adoption wrote. Only such a
	// cluster may use the `unmanaged` CNI preset (`ichor adopt --cni-unmanaged`
	// writes one).
	AdoptedAnnotation = "ichor.maesh.dev/adopted"
	// KubeProxySwitchAnnotation must name the new mode on the write that
	// changes spec.cni.kubeProxy (`ichor cni kube-proxy` and ichor-ui set it
	// for that one write); the controller then starts the kube-proxy
	// operation that switches Cilium and Talos in order.
	KubeProxySwitchAnnotation = "ichor.maesh.dev/allow-kube-proxy-switch"
	// HoldApplyAnnotation stops the controller from applying configuration to a
	// machine; drift is still computed and reported (AdoptionHeld).
	HoldApplyAnnotation = "ichor.maesh.dev/hold-apply"
	// HoldUpgradeAnnotation on a TalosMachine makes running operations skip it
	// until the annotation is removed.
	HoldUpgradeAnnotation = "ichor.maesh.dev/hold-upgrade"
	// TrustMaintenanceFingerprintAnnotation accepts a changed maintenance
	// certificate fingerprint that an operator has checked; its value is the
	// new fingerprint.
	TrustMaintenanceFingerprintAnnotation = "ichor.maesh.dev/trust-maintenance-fingerprint"
	// ResumeAnnotation on a paused TalosOperation re-runs its failed step; its
	// value is any new token (for example a timestamp).
	ResumeAnnotation = "ichor.maesh.dev/resume"
	// BackupRequestedAnnotation on a TalosEtcdBackup asks for a snapshot outside
	// the schedule; its value is any new token (for example a timestamp).
	BackupRequestedAnnotation = "ichor.maesh.dev/backup-requested-at"
	// RemoveRebootAnnotation "true" on a TalosMachine being removed reboots the
	// node after its reset (`ichor node remove --reboot`), so it comes back in
	// maintenance mode at once; without it the reset powers the node off.
	RemoveRebootAnnotation = "ichor.maesh.dev/remove-reboot"
	// ReconcileRequestedAnnotation on a TalosMachine asks the configuration
	// reconciler to compare the node with the render now instead of at its
	// next drift poll; a config operation sets it when it leaves a machine.
	// Its value is any new token (for example a timestamp).
	ReconcileRequestedAnnotation = "ichor.maesh.dev/reconcile-requested-at"
	// PausedReasonAnnotation on a TalosCluster is why a person set
	// spec.paused (`ichor cluster pause --reason`, the console's Pause); it
	// is removed when the cluster is resumed. Who paused it is in the API
	// server's audit log; since when is the Paused condition's
	// lastTransitionTime.
	PausedReasonAnnotation = "ichor.maesh.dev/paused-reason"
	// ScanRequestedAnnotation on a TalosCluster asks discovery to scan its
	// subnets and addresses now instead of at the next interval
	// (`ichor cluster discovery scan`, the console's Scan now). Its value is
	// any new token, by convention the RFC 3339 time of the request; the
	// scan that answers it copies it to status.discovery.lastHandledScanRequest.
	// A request within guard.MinScanRequestGap of the last scan waits until
	// that much time has passed.
	ScanRequestedAnnotation = "ichor.maesh.dev/scan-requested-at"
	// OverrideRemovedAPIsAnnotation on a TalosOperation of type kubernetes lets
	// its pre-checks go past Kubernetes APIs in use that the target version
	// removes (read from apiserver_requested_deprecated_apis); its value is any
	// token. Setting it needs the `override` verb on the cluster, and the
	// operation records the override as a Warning Event on the TalosCluster.
	// `ichor operation resume NAME --override` sets it with the resume.
	OverrideRemovedAPIsAnnotation = "ichor.maesh.dev/override-removed-apis"
	// OverrideDrainCapacityAnnotation on a TalosOperation lets its drains go
	// on although, on a cluster of three control planes and no worker, the
	// pods a drain evicts do not fit on the other two nodes (they stay
	// Pending until the node is back). Its value is any token. Setting it
	// needs the `override` verb on the cluster, and the operation records
	// the override as a Warning Event on the TalosCluster.
	// `ichor operation resume NAME --override` sets it with the resume.
	OverrideDrainCapacityAnnotation = "ichor.maesh.dev/override-drain-capacity"
	// AcceptDowntimeAnnotation is a person's consent to the downtime of a
	// disruptive operation on a cluster with a single node, which has nowhere
	// to drain to (architecture, "Topology": the UI says there will be
	// downtime and asks). On a TalosOperation (a reboot or shutdown of the
	// only node) its value is "true"; on the TalosCluster write that changes
	// spec.talosVersion it is the new version, so that the consent to one
	// upgrade never carries over to the next. The CLI and the console set it
	// once the person has confirmed; the webhook refuses the write without it.
	AcceptDowntimeAnnotation = "ichor.maesh.dev/accept-downtime"
)

// Labels Ichor sets.
const (
	// ClusterLabel on a TalosMachine names its TalosCluster, so that
	// `kubectl get tm -l ichor.maesh.dev/cluster=NAME` lists one cluster's machines.
	ClusterLabel = "ichor.maesh.dev/cluster"
)

// Finalizers Ichor puts on its objects. Removing one by hand needs the
// `override` verb.
const (
	// ClusterFinalizer guards the teardown of a TalosCluster.
	ClusterFinalizer = "ichor.maesh.dev/cluster"
	// MachineFinalizer guards the removal sequence of a TalosMachine (evacuate,
	// drain, leave etcd, reset, delete the Node).
	MachineFinalizer = "ichor.maesh.dev/machine"
	// FinalizerPrefix is the prefix of every Ichor finalizer.
	FinalizerPrefix = "ichor.maesh.dev/"
)

// Condition types shared by several kinds.
const (
	// ReadyCondition is true when the object is in its desired state.
	ReadyCondition = "Ready"
	// ReconcilingCondition is true while the controller works towards the desired state.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is true when the controller cannot progress without a person.
	StalledCondition = "Stalled"
	// PausedCondition is true while the controller does nothing on the object
	// because its TalosCluster's spec.paused (or its own) is true.
	PausedCondition = "Paused"
)

// Condition reasons shared by several kinds.
const (
	// SucceededReason means the work is done.
	SucceededReason = "Succeeded"
	// ProgressingReason means the controller is working.
	ProgressingReason = "Progressing"
	// FailedReason means the last attempt failed; the message says why.
	FailedReason = "Failed"
	// PausedReason means a person paused the work.
	PausedReason = "Paused"
	// ClusterLockHeldReason means another disruptive operation holds the cluster lock.
	ClusterLockHeldReason = "ClusterLockHeld"
	// InvalidSpecReason means the spec cannot be acted on; the message says what to change.
	InvalidSpecReason = "InvalidSpec"
	// OverrideReason is the reason of the Warning Event left when a user's
	// `override` verb lets a refused change through.
	OverrideReason = "Override"
)

// SecretReference names a Secret in the namespace of the object that holds
// the reference. Ichor references Secrets; it never embeds their data.
type SecretReference struct {
	// name is the name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// key is the key inside the Secret's data. Empty means the kind's default key.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// ClusterReference names a TalosCluster in the same namespace.
type ClusterReference struct {
	// name is the name of the TalosCluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Annotations Ichor writes to record a fact, not a consent.
const (
	// CredentialsIssuedAnnotation on a ca-rotation TalosOperation names the
	// rotation-credentials TalosCredentialRequest the controller signed: the
	// operator holds credentials of the new CAs, and the rotation goes on
	// from AwaitingCredentials. Only the controller writes it.
	CredentialsIssuedAnnotation = "ichor.maesh.dev/credentials-issued" //nolint:gosec // an annotation's name, not a credential
	// CNIBootstrapAnnotation on a TalosCluster says how its Cilium was
	// booted: CNIBootstrapInline means `ichor init` sent it as a Talos
	// inline manifest, which the control planes' render keeps until Cilium's
	// Helm release has taken it over (CNIHandover) and which the controller
	// then hands over. A cluster without it gets neither.
	CNIBootstrapAnnotation = "ichor.maesh.dev/cni-bootstrap"
	// CNIBootstrapInline is CNIBootstrapAnnotation's value for the inline manifest.
	CNIBootstrapInline = "inline-manifest"
	// CNIBootstrapTakeover is CNIBootstrapAnnotation's value on a cluster
	// `ichor adopt` took over with its Cilium running: that Cilium (a foreign
	// inline manifest or an applied `helm template`) is handed over to Ichor's
	// Helm release like a bootstrapped one, and the render carries no inline
	// entry of Ichor's (the foreign one goes with the first render, after
	// the hand-over, since the adoption's release waits for CNIHandover).
	CNIBootstrapTakeover = "adopt-takeover"
	// CNIBootstrapChartAnnotation on a TalosCluster is the Cilium chart
	// `ichor init` booted from the inline manifest (`--cilium-version`, one
	// this Ichor embeds): the control planes' render keeps that chart's
	// bytes until the hand-over. Empty means the pinned default. It cannot
	// change: the render would otherwise move Cilium before Helm owns it.
	CNIBootstrapChartAnnotation = "ichor.maesh.dev/cni-bootstrap-chart"
)
