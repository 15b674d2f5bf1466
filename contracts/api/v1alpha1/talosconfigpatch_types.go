package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

// Patch layers, applied bottom-up after Ichor's system layer.
const (
	// LayerCluster applies to every machine of the cluster.
	LayerCluster = "cluster"
	// LayerRole applies to the machines of one role.
	LayerRole = "role"
	// LayerSelector applies to the machines a label selector matches.
	LayerSelector = "selector"
	// LayerMachine applies to one machine.
	LayerMachine = "machine"
)

// TalosConfigPatch condition types.
const (
	// ValidCondition is false when a document cannot be rendered; the message names the path.
	ValidCondition = "Valid"
)

// TalosConfigPatchSpec is a typed configuration patch.
// +kubebuilder:validation:XValidation:rule="self.layer != 'role' || has(self.target.role)",message="spec.target.role is required for the role layer"
// +kubebuilder:validation:XValidation:rule="self.layer != 'selector' || has(self.target.selector)",message="spec.target.selector is required for the selector layer"
// +kubebuilder:validation:XValidation:rule="self.layer != 'machine' || has(self.target.machineName)",message="spec.target.machineName is required for the machine layer"
type TalosConfigPatchSpec struct {
	// clusterName is the TalosCluster, in the same namespace, the patch applies to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClusterName string `json:"clusterName"`
	// layer is cluster, role, selector or machine; patches apply bottom-up, after Ichor's system layer.
	// +required
	// +kubebuilder:validation:Enum=cluster;role;selector;machine
	Layer string `json:"layer"`
	// priority orders patches within a layer; higher applies later.
	// +optional
	// +kubebuilder:validation:Minimum=-1000
	// +kubebuilder:validation:Maximum=1000
	Priority int32 `json:"priority,omitempty"`
	// target selects the machines of the role, selector and machine layers.
	// +optional
	Target PatchTarget `json:"target,omitempty"`
	// documents are Talos configuration documents as typed fields, one kind per
	// entry, restricted to the reviewed allow-list of contracts/pkg/configpatch.
	// Secret fields are not part of the schema, and there is no raw-YAML field.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Documents []config.PatchDocument `json:"documents,omitempty"`
}

// PatchTarget selects machines.
type PatchTarget struct {
	// role is controlplane or worker (layer role).
	// +optional
	// +kubebuilder:validation:Enum=controlplane;worker
	Role string `json:"role,omitempty"`
	// selector matches TalosMachine labels (layer selector).
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// machineName is one TalosMachine (layer machine).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	MachineName string `json:"machineName,omitempty"`
}

// TalosConfigPatchStatus is the observed state of a patch.
type TalosConfigPatchStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, Valid.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// matchedMachines is the number of machines the patch applies to.
	// +optional
	MatchedMachines int32 `json:"matchedMachines,omitempty"`
	// hash is the hash of the patch as last rendered.
	// +optional
	Hash string `json:"hash,omitempty"`
}

// TalosConfigPatch is a typed configuration patch with a layer, a priority and a target.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=tcp,categories=ichor
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Layer",type=string,JSONPath=`.spec.layer`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Machines",type=integer,JSONPath=`.status.matchedMachines`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TalosConfigPatch struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the patch.
	// +required
	Spec TalosConfigPatchSpec `json:"spec"`
	// status is the observed state of the patch.
	// +optional
	Status TalosConfigPatchStatus `json:"status,omitempty"`
}

// TalosConfigPatchList is a list of TalosConfigPatches.
//
// +kubebuilder:object:root=true
type TalosConfigPatchList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the patches.
	Items []TalosConfigPatch `json:"items"`
}
