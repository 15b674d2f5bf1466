package v1alpha1

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TalosStorage condition types.
const (
	// ExtensionsPresentCondition reports whether the nodes' installer images carry
	// the extensions the preset needs. Informational: it never gates Ready.
	ExtensionsPresentCondition = "ExtensionsPresent"
	// StorageConsistentCondition reports whether the storage system honours Ichor's disk registration.
	StorageConsistentCondition = "StorageConsistent"
	// NodesPreparedCondition is true when every selected machine is ready on
	// the Talos side: its storage volumes are provisioned. Ready follows it,
	// so whatever installs the storage system can wait for it.
	NodesPreparedCondition = "NodesPrepared"
)

// Disk presets of a TalosStorage (spec.preset).
const (
	// StoragePresetLonghornV1 prepares nodes for Longhorn's V1 data engine.
	StoragePresetLonghornV1 = "longhorn-v1"
	// StoragePresetLonghornV2 prepares nodes for Longhorn's V2 data engine.
	StoragePresetLonghornV2 = "longhorn-v2"
	// StoragePresetRaw hands disks over unformatted.
	StoragePresetRaw = "raw"
	// StoragePresetFilesystem hands disks over formatted and mounted.
	StoragePresetFilesystem = "filesystem"
)

// Disk registrations of a TalosStorage (spec.diskRegistration).
const (
	// DiskRegistrationNodeLabels hands the disks over through the storage
	// system's own Node label and annotation (the default).
	DiskRegistrationNodeLabels = "NodeLabels"
	// DiskRegistrationNone leaves registering the disks to the user.
	DiskRegistrationNone = "None"
)

// TalosStorageSpec is a thin integration with a storage system.
// +kubebuilder:validation:XValidation:rule="!has(self.diskRegistration) || self.diskRegistration != 'NodeLabels' || self.preset == 'longhorn-v1'",message="spec.diskRegistration: NodeLabels registers disks through Longhorn's Node label and annotation, which only the longhorn-v1 preset renders: leave it empty or set None, and hand the disks to the storage system yourself"
type TalosStorageSpec struct {
	// clusterName is the TalosCluster, in the same namespace, the storage integration belongs to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClusterName string `json:"clusterName"`
	// preset is the disk preset: longhorn-v1, longhorn-v2, raw or filesystem.
	// +required
	// +kubebuilder:validation:Enum=longhorn-v1;longhorn-v2;raw;filesystem
	Preset string `json:"preset"`
	// nodeSelector selects the TalosMachines, by label, the storage runs on. Empty means every worker.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// diskRegistration is how disks are handed to the storage system: NodeLabels
	// (its own node label and annotation mechanism; the default) or None. For
	// longhorn-v1, NodeLabels makes Talos label the Node
	// node.longhorn.io/create-default-disk=config and annotate it with
	// node.longhorn.io/default-disks-config, which Longhorn honours only with
	// its setting create-default-disk-labeled-nodes true (StorageConsistent).
	// +optional
	// +kubebuilder:validation:Enum=NodeLabels;None
	DiskRegistration string `json:"diskRegistration,omitempty"`
	// evacuation is whether node operations evacuate replicas first.
	// +optional
	Evacuation *bool `json:"evacuation,omitempty"`
	// evacuationTimeout is how long an evacuation may take before the operation
	// pauses (it never proceeds to drain). Empty means 30 minutes.
	// +optional
	EvacuationTimeout *metav1.Duration `json:"evacuationTimeout,omitempty"`
}

// TalosStorageStatus is the observed state of a storage integration.
type TalosStorageStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready (NodesPrepared's summary), NodesPrepared,
	// ExtensionsPresent (informational), StorageConsistent.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// nodes is the number of machines selected.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// readyNodes is the number of selected machines prepared on the Talos side.
	// +optional
	ReadyNodes int32 `json:"readyNodes,omitempty"`
	// unpreparedNodes are the selected machines not ready on the Talos side
	// yet (not installed, unreachable, or a storage volume not provisioned);
	// the NodesPrepared condition says what each waits for.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	UnpreparedNodes []string `json:"unpreparedNodes,omitempty"`
	// missingExtensions are the extensions a selected node lacks.
	// +optional
	// +listType=atomic
	MissingExtensions []string `json:"missingExtensions,omitempty"`
}

// TalosStorage prepares the Talos side for a storage system and coordinates
// evacuation around node operations. The storage system's own configuration is the user's.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ts,categories=ichor
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Preset",type=string,JSONPath=`.spec.preset`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Prepared",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TalosStorage struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state.
	// +required
	Spec TalosStorageSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status TalosStorageStatus `json:"status,omitempty"`
}

// TalosStorageList is a list of TalosStorages.
//
// +kubebuilder:object:root=true
type TalosStorageList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the storage integrations.
	Items []TalosStorage `json:"items"`
}

// SummarizeTalosStorage sets Ready from NodesPrepared: the Talos side of the
// selected machines is what Ichor owns (layer 1 of architecture "Storage");
// ExtensionsPresent informs and StorageConsistent is its own warning, since
// the storage system is installed after Ready.
func SummarizeTalosStorage(s *TalosStorage) {
	c := apimeta.FindStatusCondition(s.Status.Conditions, NodesPreparedCondition)

	ready := metav1.Condition{Type: ReadyCondition, Status: metav1.ConditionUnknown, Reason: "Pending", Message: "the selected machines were not looked at yet"}
	if c != nil {
		ready.Status, ready.Reason, ready.Message = c.Status, c.Reason, c.Message
	}

	ready.ObservedGeneration = s.Generation
	apimeta.SetStatusCondition(&s.Status.Conditions, ready)
}
