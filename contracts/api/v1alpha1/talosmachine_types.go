package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TalosMachine condition types.
const (
	// ApprovedCondition is true once a person approved the machine.
	ApprovedCondition = "Approved"
	// ProvisionedCondition is true once the machine installed and joined.
	ProvisionedCondition = "Provisioned"
	// DriftedCondition is true when the node's configuration differs from the render.
	DriftedCondition = "Drifted"
	// RebootRequiredCondition is true when a rendered change waits for a config rollout that reboots.
	RebootRequiredCondition = "RebootRequired"
	// APIServerRestartRequiredCondition is true when a change waits for a config rollout that restarts the kube-apiserver.
	APIServerRestartRequiredCondition = "APIServerRestartRequired"
	// AdoptionHeldCondition is true while the hold-apply annotation stops applies.
	AdoptionHeldCondition = "AdoptionHeld"
	// FingerprintTrustedCondition is false when the maintenance certificate changed since discovery.
	FingerprintTrustedCondition = "FingerprintTrusted"
	// IdentityConflictCondition is true when the identity is weak, already belongs to another machine,
	// or the node at the address is another machine (IdentityMismatch: the machine is paused).
	IdentityConflictCondition = "IdentityConflict"
	// DiskRolesEffectiveCondition is false when a changed disk role was accepted by Talos but has no effect.
	DiskRolesEffectiveCondition = "DiskRolesEffective"
	// InSyncCondition is true when the node runs (or has staged) the rendered
	// configuration; its reason says why not otherwise. The configuration
	// reconciler owns it, with Drifted, RebootRequired,
	// APIServerRestartRequired and DiskRolesEffective.
	InSyncCondition = "InSync"
	// NodeHealthyCondition is false when a provisioned node stopped answering
	// as configured and waits (wiped, held, no etcd survivor); the lifecycle
	// reconciler owns it, with Provisioned, Deleting, FingerprintTrusted and
	// IdentityConflict.
	NodeHealthyCondition = "NodeHealthy"
	// DeletingCondition is true while the removal sequence runs; its reason
	// and message say what it waits for.
	DeletingCondition = "Deleting"
)

// TalosMachine condition reasons.
const (
	// FingerprintChangedReason means the node presents another maintenance certificate.
	FingerprintChangedReason = "FingerprintChanged"
	// WeakIdentityReason means the SMBIOS UUID is empty.
	WeakIdentityReason = "WeakIdentity"
	// DuplicateIdentityReason means the UUID already maps to a live machine.
	DuplicateIdentityReason = "DuplicateIdentity"
	// IdentityMismatchReason means the node at the machine's address reported
	// another identity (SMBIOS UUID, hostname or Node name) than the machine's:
	// the step was refused and nothing is sent to the address while it stands.
	IdentityMismatchReason = "IdentityMismatch"
	// IdentityConfirmedReason means the node at the address is the machine
	// again after an IdentityMismatch; the work resumes at the next step.
	IdentityConfirmedReason = "IdentityConfirmed"
	// ReinstalledReason means a wiped node was sent its configuration again.
	ReinstalledReason = "Reinstalled"
	// AcceptedNoEffectReason means Talos accepted a volume change it will not apply.
	AcceptedNoEffectReason = "AcceptedNoEffect"
	// InSyncReason means the node runs the rendered configuration.
	InSyncReason = "InSync"
	// AppliedReason means the rendered configuration was applied to the node.
	AppliedReason = "Applied"
	// StagedReason means the rendered configuration was staged for the next install or upgrade.
	StagedReason = "Staged"
	// DriftDetectedReason means the node's configuration changed behind Ichor's back.
	DriftDetectedReason = "DriftDetected"
	// DriftCorrectedReason means drift was re-applied under the AutoCorrect policy.
	DriftCorrectedReason = "DriftCorrected"
	// WaitingForRolloutReason means a change waits for a config operation.
	WaitingForRolloutReason = "WaitingForRollout"
	// NotConfiguredReason means the machine is not provisioned yet, so nothing is applied.
	NotConfiguredReason = "NotConfigured"
	// RenderFailedReason means the configuration could not be rendered.
	RenderFailedReason = "RenderFailed"
	// NodeUnreachableReason means the node's Talos API did not answer.
	NodeUnreachableReason = "NodeUnreachable"
	// ApplyFailedReason means the node refused the configuration.
	ApplyFailedReason = "ApplyFailed"
	// ProvisioningReason means the configuration is being sent to a maintenance node.
	ProvisioningReason = "Provisioning"
	// InstallingReason means the node stored its configuration and is installing, rebooting or booting.
	InstallingReason = "Installing"
	// JoiningReason means the node runs and is joining etcd or Kubernetes.
	JoiningReason = "Joining"
	// JoinedReason means the node runs, is an etcd member (control planes) and its Node is Ready.
	JoinedReason = "Joined"
	// RemovingReason means the removal sequence runs.
	RemovingReason = "Removing"
	// DrainPausedReason means the drain timed out; the removal waits and retries.
	DrainPausedReason = "DrainPaused"
	// EvacuationPausedReason means the storage evacuation reached its timeout with
	// replicas still on the node; the removal waits and never drains.
	EvacuationPausedReason = "EvacuationPaused"
	// RemovalRefusedReason means removing the machine would break etcd quorum, drop below the
	// declared control-plane count or remove the last control plane.
	RemovalRefusedReason = "RemovalRefused"
	// RemovedWithoutWipeReason means the node did not answer and was removed without a reset.
	RemovedWithoutWipeReason = "RemovedWithoutWipe"
	// RecoverClusterReason means no control plane survives, so nothing is sent to a wiped one.
	RecoverClusterReason = "RecoverClusterNeeded"
	// HeldReason means the hold-apply annotation stops provisioning.
	HeldReason = "Held"
	// RunningReason means the provisioned node answers with the cluster's credentials.
	RunningReason = "Running"
)

// Removal phases, recorded in status before each step that is not idempotent.
const (
	// RemovalEvacuating runs the storage evacuation hook.
	RemovalEvacuating = "Evacuating"
	// RemovalDraining cordons and drains the Node.
	RemovalDraining = "Draining"
	// RemovalLeavingEtcd checks quorum and, for a node that cannot leave by itself, removes its member.
	RemovalLeavingEtcd = "LeavingEtcd"
	// RemovalResetting means a graceful reset was requested (status.resetRequestedAt).
	RemovalResetting = "Resetting"
	// RemovalDeletingNode deletes the Kubernetes Node.
	RemovalDeletingNode = "DeletingNode"
	// RemovalDone means the sequence finished; the finalizer goes next.
	RemovalDone = "Done"
)

// Machine roles.
const (
	// RoleControlPlane runs etcd and the Kubernetes control plane.
	RoleControlPlane = "controlplane"
	// RoleWorker runs workloads only.
	RoleWorker = "worker"
)

// Approval states.
const (
	// ApprovalPending is a discovered machine waiting for a person.
	ApprovalPending = "pending"
	// ApprovalApproved is a machine a person approved.
	ApprovalApproved = "approved"
	// ApprovalRejected is a machine a person rejected.
	ApprovalRejected = "rejected"
)

// Machine stages, as Talos's MachineStatus reports them.
const (
	// StageMaintenance is a node in maintenance mode.
	StageMaintenance = "maintenance"
	// StageInstalling is a node installing Talos.
	StageInstalling = "installing"
	// StageRebooting is a node rebooting.
	StageRebooting = "rebooting"
	// StageBooting is a node booting.
	StageBooting = "booting"
	// StageRunning is a configured, running node.
	StageRunning = "running"
	// StageResetting is a node being reset.
	StageResetting = "resetting"
	// StageUnreachable is a node that does not answer.
	StageUnreachable = "unreachable"
)

// Disk roles.
const (
	// DiskRoleSystem is the install target plus EPHEMERAL.
	DiskRoleSystem = "system"
	// DiskRoleEphemeral holds EPHEMERAL on its own disk.
	DiskRoleEphemeral = "ephemeral"
	// DiskRoleStorage is prepared for a storage system via a preset.
	DiskRoleStorage = "storage"
	// DiskRoleUserVolume is a Talos user volume.
	DiskRoleUserVolume = "userVolume"
	// DiskRoleUnused is left alone.
	DiskRoleUnused = "unused"
)

// System disk layouts (spec.install.systemDiskLayout).
const (
	// SystemDiskLayoutDedicated gives the whole system disk to Talos (the default).
	SystemDiskLayoutDedicated = "dedicated"
	// SystemDiskLayoutShared caps EPHEMERAL on the system disk and leaves the
	// rest for storage: a single-disk node.
	SystemDiskLayoutShared = "shared"
)

// TalosMachineSpec is the desired state of one machine.
type TalosMachineSpec struct {
	// clusterName is the TalosCluster, in the same namespace, the machine belongs to. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.clusterName is immutable: a machine moves to another cluster by removal and a new approval"
	ClusterName string `json:"clusterName"`

	// identity is the hardware identity read at discovery: SMBIOS UUID, serial
	// number and permanent MAC addresses. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.identity is immutable: it is the hardware the machine was discovered as"
	Identity MachineIdentity `json:"identity"`

	// address is the machine's address on the provisioning network. It is
	// fixed once the machine is approved: the controller sends its
	// configuration, with the cluster's keys, and its reset there. To move a
	// machine, remove it and approve it again at the new address.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	Address string `json:"address,omitempty"`

	// approval is the person's decision: pending, approved or rejected, with who and when.
	// Changing it needs the verb `approve` on `talosmachines/approval`.
	// +required
	Approval MachineApproval `json:"approval"`

	// role is controlplane or worker. It is fixed once the machine is approved.
	// +optional
	// +kubebuilder:validation:Enum=controlplane;worker
	Role string `json:"role,omitempty"`

	// hostname is the node's hostname. Empty means Talos's default.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Hostname string `json:"hostname,omitempty"`

	// labels are Kubernetes labels for the node.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`

	// install is the install target, the system disk. Immutable after install.
	// +optional
	Install MachineInstall `json:"install,omitempty"`

	// disks give the other disks their roles. Roles that need a reinstall
	// (system, ephemeral) are immutable after install.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Disks []DiskRole `json:"disks,omitempty"`

	// network is the primary interface: which NIC, DHCP or static, and a VLAN.
	// +optional
	Network MachineNetwork `json:"network,omitempty"`

	// forceRemove skips drain and reset on removal, for dead hardware.
	// +optional
	ForceRemove bool `json:"forceRemove,omitempty"`
}

// MachineIdentity is a machine's hardware identity. The UUID alone is not
// trusted: it may be empty or repeated.
type MachineIdentity struct {
	// uuid is the SMBIOS UUID; it may be empty.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	UUID string `json:"uuid,omitempty"`
	// serial is the system serial number.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Serial string `json:"serial,omitempty"`
	// macAddresses are the permanent MAC addresses of the physical links.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MACAddresses []string `json:"macAddresses,omitempty"`
}

// MachineApproval is a person's decision about a machine.
type MachineApproval struct {
	// state is pending, approved or rejected.
	// +required
	// +kubebuilder:validation:Enum=pending;approved;rejected
	State string `json:"state"`
	// decidedBy is the user who approved or rejected the machine; admission
	// requires it to be the user making the write.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	DecidedBy string `json:"decidedBy,omitempty"`
	// decidedAt is when the decision was made; required with decidedBy.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
}

// DiskSelector identifies a disk, by the most stable attribute it has.
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=1
type DiskSelector struct {
	// wwid is the disk's World Wide Identifier.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	WWID string `json:"wwid,omitempty"`
	// serial is the disk's serial number.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Serial string `json:"serial,omitempty"`
	// byID is the /dev/disk/by-id path.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ByID string `json:"byID,omitempty"`
	// busPath is the bus path, when nothing more stable exists.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	BusPath string `json:"busPath,omitempty"`
	// devicePath is the device path (/dev/sda), the last resort.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	DevicePath string `json:"devicePath,omitempty"`
}

// MachineInstall is the install target.
type MachineInstall struct {
	// disk is the system disk: install target plus EPHEMERAL.
	// +optional
	Disk *DiskSelector `json:"disk,omitempty"`
	// systemDiskLayout is `dedicated` (default) or `shared` (EPHEMERAL is capped
	// and the rest is left for storage; discouraged on control planes). The cap
	// is the maxSize of a spec.disks entry with the role system, 50% of the
	// disk's free space without one; EPHEMERAL needs at least 2 GiB.
	// +optional
	// +kubebuilder:validation:Enum=dedicated;shared
	SystemDiskLayout string `json:"systemDiskLayout,omitempty"`
	// confirmWipe confirms that the install disk may be wiped although it holds
	// partitions or filesystems.
	// +optional
	ConfirmWipe bool `json:"confirmWipe,omitempty"`
}

// DiskRole gives one disk a role.
type DiskRole struct {
	// disk selects the disk.
	// +required
	Disk DiskSelector `json:"disk"`
	// role is system, ephemeral, storage, userVolume or unused.
	// +required
	// +kubebuilder:validation:Enum=system;ephemeral;storage;userVolume;unused
	Role string `json:"role"`
	// volumeName names the user volume (role userVolume).
	// +optional
	// +kubebuilder:validation:MaxLength=34
	VolumeName string `json:"volumeName,omitempty"`
	// maxSize caps the volume; a negative value is space to leave free.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	MaxSize string `json:"maxSize,omitempty"`
	// confirmWipe confirms that existing partitions or filesystems may be used.
	// +optional
	ConfirmWipe bool `json:"confirmWipe,omitempty"`
}

// MachineNetwork is the primary interface.
// +kubebuilder:validation:XValidation:rule="!(has(self.dhcp) && self.dhcp) || !has(self.addresses)",message="spec.network: use dhcp or static addresses, not both"
type MachineNetwork struct {
	// macAddress is the permanent MAC of the primary NIC; it becomes a link alias.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{2}:){5}[0-9a-f]{2}$`
	MACAddress string `json:"macAddress,omitempty"`
	// dhcp takes the address from DHCP.
	// +optional
	DHCP *bool `json:"dhcp,omitempty"`
	// addresses are static addresses in CIDR form.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be an address in CIDR form such as 192.168.10.5/24"
	Addresses []string `json:"addresses,omitempty"`
	// gateway is the default gateway of a static configuration.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	Gateway string `json:"gateway,omitempty"`
	// nameservers are DNS servers.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=45
	Nameservers []string `json:"nameservers,omitempty"`
	// vlan is the VLAN ID on the primary NIC.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4094
	VLAN *int32 `json:"vlan,omitempty"`
}

// TalosMachineStatus is the observed state of a machine.
type TalosMachineStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: the machine lifecycle reconciler's Provisioned, NodeHealthy,
	// Deleting, FingerprintTrusted and IdentityConflict; the configuration
	// reconciler's InSync, Drifted, RebootRequired, APIServerRestartRequired
	// and DiskRolesEffective, and Paused; Ready, Reconciling and Stalled are
	// their summary (SummarizeTalosMachine).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// stage is what Talos's MachineStatus reports: maintenance, installing,
	// rebooting, running, resetting, or unreachable.
	// +optional
	// +kubebuilder:validation:Enum=maintenance;installing;rebooting;booting;running;resetting;unreachable
	Stage string `json:"stage,omitempty"`
	// installed is true once the machine has installed Talos; disk roles that
	// need a reinstall are immutable from then on.
	// +optional
	Installed bool `json:"installed,omitempty"`
	// maintenanceFingerprint is the SHA-256 fingerprint of the maintenance
	// certificate seen at discovery or at the first provisioning probe.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	MaintenanceFingerprint string `json:"maintenanceFingerprint,omitempty"`
	// nodeName is the Kubernetes Node of the machine.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// talosVersion is the Talos version the node runs.
	// +optional
	TalosVersion string `json:"talosVersion,omitempty"`
	// schematic is the Image Factory schematic the node runs.
	// +optional
	Schematic string `json:"schematic,omitempty"`
	// renderedConfigHash is the hash of the last rendered configuration.
	// +optional
	RenderedConfigHash string `json:"renderedConfigHash,omitempty"`
	// appliedConfigHash is the hash of the configuration last applied.
	// +optional
	AppliedConfigHash string `json:"appliedConfigHash,omitempty"`
	// renderVersion is the renderer's version (render.Version) of the last
	// applied configuration: a new one is a desired-state change, not drift.
	// +optional
	RenderVersion int32 `json:"renderVersion,omitempty"`
	// driftPaths are the configuration paths that differ from the render.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	DriftPaths []string `json:"driftPaths,omitempty"`
	// rebootRequiredPaths are the rendered paths that wait for a rollout that reboots.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	RebootRequiredPaths []string `json:"rebootRequiredPaths,omitempty"`
	// resetRequestedAt records that a reset was sent, so a resumed reconcile does not send a second one.
	// +optional
	ResetRequestedAt *metav1.Time `json:"resetRequestedAt,omitempty"`
	// configSentAt records when the configuration was sent to the node in
	// maintenance mode (first provisioning or a re-provisioning).
	// +optional
	ConfigSentAt *metav1.Time `json:"configSentAt,omitempty"`
	// reinstalls counts the times a wiped node was sent its configuration again.
	// +optional
	Reinstalls int32 `json:"reinstalls,omitempty"`
	// removal is the progress of the removal sequence.
	// +optional
	Removal *MachineRemoval `json:"removal,omitempty"`
	// hardware is what discovery read from the node.
	// +optional
	Hardware MachineHardware `json:"hardware,omitempty"`
	// secureBoot is whether the node booted with SecureBoot.
	// +optional
	SecureBoot *bool `json:"secureBoot,omitempty"`
	// kernelLockdown is the lockdown mode the node reports.
	// +optional
	KernelLockdown string `json:"kernelLockdown,omitempty"`
}

// MachineRemoval is the progress of a machine's removal.
type MachineRemoval struct {
	// phase is the step the removal is at: Evacuating, Draining, LeavingEtcd,
	// Resetting, DeletingNode or Done.
	// +required
	// +kubebuilder:validation:Enum=Evacuating;Draining;LeavingEtcd;Resetting;DeletingNode;Done
	Phase string `json:"phase"`
	// startedAt is when the removal started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// wiped is false when the node was removed without a reset (forceRemove,
	// or the node did not answer); true once a reset was requested.
	// +optional
	Wiped *bool `json:"wiped,omitempty"`
	// message says what the removal waits for, when it waits.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// MachineHardware is the hardware discovery read.
type MachineHardware struct {
	// manufacturer is the system manufacturer.
	// +optional
	Manufacturer string `json:"manufacturer,omitempty"`
	// productName is the system product name.
	// +optional
	ProductName string `json:"productName,omitempty"`
	// disks are the disks found.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Disks []DiscoveredDisk `json:"disks,omitempty"`
	// links are the physical network links found.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Links []DiscoveredLink `json:"links,omitempty"`
}

// DiscoveredDisk is one disk as Talos reports it.
type DiscoveredDisk struct {
	// devicePath is the device path, for example /dev/sda.
	DevicePath string `json:"devicePath"`
	// wwid is the World Wide Identifier, when the disk has one.
	// +optional
	WWID string `json:"wwid,omitempty"`
	// serial is the serial number, when the disk has one.
	// +optional
	Serial string `json:"serial,omitempty"`
	// byID is the /dev/disk/by-id path, when udev created one.
	// +optional
	ByID string `json:"byID,omitempty"`
	// busPath is the bus path.
	// +optional
	BusPath string `json:"busPath,omitempty"`
	// sizeBytes is the disk's size.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// hasPartitions is true when the disk holds partitions or filesystems.
	// +optional
	HasPartitions bool `json:"hasPartitions,omitempty"`
}

// DiscoveredLink is one physical link.
type DiscoveredLink struct {
	// name is the kernel interface name (it may change across boots).
	Name string `json:"name"`
	// permanentMAC is the permanent hardware address.
	// +optional
	PermanentMAC string `json:"permanentMAC,omitempty"`
	// addresses are the addresses the link had at discovery.
	// +optional
	// +listType=atomic
	Addresses []string `json:"addresses,omitempty"`
}

// TalosMachine is one machine: its identity, approval, role, labels, disks and
// network, and what the controller has seen on it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=tm,categories=ichor
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.spec.role`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.spec.approval.state`
// +kubebuilder:printcolumn:name="Stage",type=string,JSONPath=`.status.stage`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.spec.approval.state != 'approved' || has(self.spec.role)",message="spec.role is required to approve a machine: set controlplane or worker"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.role) || oldSelf.spec.approval.state != 'approved' || (has(self.spec.role) && self.spec.role == oldSelf.spec.role)",message="spec.role is fixed once approved: remove the machine and approve it again with another role"
// +kubebuilder:validation:XValidation:rule="(oldSelf.spec.approval.state != 'approved' && !(has(oldSelf.status) && has(oldSelf.status.installed) && oldSelf.status.installed)) || (has(self.spec.address) == has(oldSelf.spec.address) && (!has(self.spec.address) || self.spec.address == oldSelf.spec.address))",message="spec.address is fixed once the machine is approved: to move a machine, remove it (ichor node remove NAME) and approve it again at the new address (ichor machine approve NAME)"
type TalosMachine struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the machine.
	// +required
	Spec TalosMachineSpec `json:"spec"`
	// status is the observed state of the machine.
	// +optional
	Status TalosMachineStatus `json:"status,omitempty"`
}

// TalosMachineList is a list of TalosMachines.
//
// +kubebuilder:object:root=true
type TalosMachineList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the machines.
	Items []TalosMachine `json:"items"`
}
