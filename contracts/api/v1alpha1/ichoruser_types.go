package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IchorUser roles, each bound to the ClusterRole of the same name through the
// group ichor:<role>.
const (
	// UserRoleViewer reads (ichor-viewer).
	UserRoleViewer = "viewer"
	// UserRoleOperator operates (ichor-operator).
	UserRoleOperator = "operator"
	// UserRoleAdmin administers (ichor-admin).
	UserRoleAdmin = "admin"
)

// IchorUserSpec is one of Ichor's own users. It has no password field: password
// hashes live in the Secret ichor-user-credentials.
type IchorUserSpec struct {
	// displayName is the name shown in the UI.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	DisplayName string `json:"displayName"`
	// email is the user's e-mail address.
	// +optional
	// +kubebuilder:validation:MaxLength=254
	// +kubebuilder:validation:Pattern=`^[^@\s]+@[^@\s]+$`
	Email string `json:"email,omitempty"`
	// roles are viewer, operator and admin; each is the group ichor:<role>.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:Enum=viewer;operator;admin
	Roles []string `json:"roles,omitempty"`
	// disabled stops the user from signing in and revokes their sessions.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// IchorUserStatus is the observed state of a user.
type IchorUserStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// username is the Kubernetes user name, ichor:<name>.
	// +optional
	Username string `json:"username,omitempty"`
	// lastSignIn is when the user last signed in.
	// +optional
	LastSignIn *metav1.Time `json:"lastSignIn,omitempty"`
	// passwordSet is true when the credentials Secret holds a hash for the user.
	// +optional
	PasswordSet bool `json:"passwordSet,omitempty"`
}

// IchorUser is one of Ichor's own users: display name, e-mail, roles and a disabled flag.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=iu,categories=ichor
// +kubebuilder:printcolumn:name="Display name",type=string,JSONPath=`.spec.displayName`
// +kubebuilder:printcolumn:name="Roles",type=string,JSONPath=`.spec.roles`
// +kubebuilder:printcolumn:name="Disabled",type=boolean,JSONPath=`.spec.disabled`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IchorUser struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the user.
	// +required
	Spec IchorUserSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status IchorUserStatus `json:"status,omitempty"`
}

// IchorUserList is a list of IchorUsers.
//
// +kubebuilder:object:root=true
type IchorUserList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the users.
	Items []IchorUser `json:"items"`
}
