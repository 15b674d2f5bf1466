// Package patchcrd is a minimal custom resource whose spec holds
// config.PatchDocument, the way TalosConfigPatch's spec.documents does: the
// mirrorgen tests build its CRD with controller-gen and install it in a real
// API server.
//
// +groupName=mirrorgen.test.ichor.maesh.dev
// +versionName=v1
package patchcrd

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

// PatchHolderSpec holds typed Talos documents.
type PatchHolderSpec struct {
	// documents are typed Talos documents.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Documents []config.PatchDocument `json:"documents,omitempty"`
}

// PatchHolder holds typed Talos documents.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced
type PatchHolder struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec holds the documents.
	// +required
	Spec PatchHolderSpec `json:"spec"`
}
