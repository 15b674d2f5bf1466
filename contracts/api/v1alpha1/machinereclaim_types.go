package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ForeignTalosconfigSecretType is the type of the Secret that carries a foreign
// talosconfig for one reclaim. It is deleted at Done, Failed or Expired.
const ForeignTalosconfigSecretType = "ichor.maesh.dev/foreign-talosconfig" //nolint:gosec // a Secret type name, not a credential

// Reclaim phases.
const (
	// ReclaimInspecting reads the node with the foreign credential.
	ReclaimInspecting = "Inspecting"
	// ReclaimAwaitingConfirmation waits for the node's UUID, typed.
	ReclaimAwaitingConfirmation = "AwaitingConfirmation"
	// ReclaimResetting sent the reset and waits for maintenance mode.
	ReclaimResetting = "Resetting"
	// ReclaimDone finished; the machine is discovered again as pending.
	ReclaimDone = "Done"
	// ReclaimFailed failed; failureReason says why.
	ReclaimFailed = "Failed"
	// ReclaimExpired ran out of its TTL before confirmation.
	ReclaimExpired = "Expired"
)

// MachineReclaimSpec asks to reset one machine that another cluster configured.
type MachineReclaimSpec struct {
	// address is the only address the controller dials; endpoints in the talosconfig are ignored.
	// +required
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.address is immutable"
	Address string `json:"address"`
	// credentialsRef names the Secret of type ichor.maesh.dev/foreign-talosconfig
	// that holds the foreign talosconfig. Immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.credentialsRef is immutable"
	CredentialsRef SecretReference `json:"credentialsRef"`
	// ttl is how long the credential lives. Empty means 15 minutes; at most 60.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// confirmUUID is the node's SMBIOS UUID typed as consent; the reset is sent
	// only when it equals status.inspection.uuid. Writing it needs the verb `reclaim`.
	// +optional
	// +kubebuilder:validation:MaxLength=36
	ConfirmUUID string `json:"confirmUUID,omitempty"`
	// force overrides the quorum and last-control-plane refusals (a second confirmation in the UI).
	// +optional
	Force bool `json:"force,omitempty"`
	// forceUngraceful resets without the graceful sequence, for a dead foreign cluster.
	// +optional
	ForceUngraceful bool `json:"forceUngraceful,omitempty"`
}

// MachineReclaimStatus is the observed state of a reclaim.
type MachineReclaimStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// phase is Inspecting, AwaitingConfirmation, Resetting, Done, Failed or Expired.
	// +optional
	// +kubebuilder:validation:Enum=Inspecting;AwaitingConfirmation;Resetting;Done;Failed;Expired
	Phase string `json:"phase,omitempty"`
	// failureReason says why the reclaim failed. It never contains the credential.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	FailureReason string `json:"failureReason,omitempty"`
	// inspection is what the controller read from the node.
	// +optional
	Inspection ReclaimInspection `json:"inspection,omitempty"`
	// audit records who requested and who confirmed the reclaim.
	// +optional
	Audit ReclaimAudit `json:"audit,omitempty"`
	// resetRequestedAt records that the reset was sent.
	// +optional
	ResetRequestedAt *metav1.Time `json:"resetRequestedAt,omitempty"`
}

// ReclaimInspection is what the controller read from the foreign node.
type ReclaimInspection struct {
	// uuid is the node's SMBIOS UUID.
	// +optional
	UUID string `json:"uuid,omitempty"`
	// serial is the node's serial number.
	// +optional
	Serial string `json:"serial,omitempty"`
	// hostname is the node's hostname.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Hostname string `json:"hostname,omitempty"`
	// controlPlane is true when the node is a control plane of its cluster.
	// +optional
	ControlPlane bool `json:"controlPlane,omitempty"`
	// clusterName is the foreign cluster's name.
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// userDisks are disks reset leaves alone; encrypted ones are called out.
	// +optional
	// +listType=atomic
	UserDisks []string `json:"userDisks,omitempty"`
	// encryptedDisks are user disks that are encrypted.
	// +optional
	// +listType=atomic
	EncryptedDisks []string `json:"encryptedDisks,omitempty"`
	// refusals are the reasons the reset is refused ("field: rule; way out");
	// empty when it may go ahead once the UUID is typed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Refusals []string `json:"refusals,omitempty"`
}

// ReclaimAudit records the people involved.
type ReclaimAudit struct {
	// requestedBy is the user who created the reclaim.
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
	// requestedAt is when it was created.
	// +optional
	RequestedAt *metav1.Time `json:"requestedAt,omitempty"`
	// confirmedBy is the user who typed the UUID.
	// +optional
	ConfirmedBy string `json:"confirmedBy,omitempty"`
	// confirmedAt is when the UUID was typed.
	// +optional
	ConfirmedAt *metav1.Time `json:"confirmedAt,omitempty"`
}

// MachineReclaim resets one machine that another cluster configured ("Reset
// and add"), with a user-supplied, expiring credential. Creating one, and
// writing its confirmUUID, needs the verb `reclaim` on machinereclaims.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mr,categories=ichor
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="UUID",type=string,JSONPath=`.status.inspection.uuid`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MachineReclaim struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the request.
	// +required
	Spec MachineReclaimSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status MachineReclaimStatus `json:"status,omitempty"`
}

// MachineReclaimList is a list of MachineReclaims.
//
// +kubebuilder:object:root=true
type MachineReclaimList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the reclaims.
	Items []MachineReclaim `json:"items"`
}
