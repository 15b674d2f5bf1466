package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Credential request purposes and the Talos role each is signed for.
const (
	// PurposeReader is ichor-ui's own reads of the nodes (os:reader).
	PurposeReader = "reader"
	// PurposeTalosconfigReader is a one-hour os:reader talosconfig for a person;
	// needs `download` on `talosclusters/talosconfig-reader`.
	PurposeTalosconfigReader = "talosconfig-reader"
	// PurposeSupportBundle is a support bundle download (os:operator);
	// needs `download` on `talosclusters/support-bundle`.
	PurposeSupportBundle = "support-bundle"
	// PurposeEtcdSnapshot is an etcd snapshot download (os:etcd:backup);
	// needs `download` on `talosclusters/etcd-snapshot`.
	PurposeEtcdSnapshot = "etcd-snapshot"
	// PurposePacketCapture is a packet capture download (os:operator);
	// needs `download` on `talosclusters/packet-capture`.
	PurposePacketCapture = "packet-capture"
	// PurposeRotationCredentials is the new kubeconfig and talosconfig of a CA
	// rotation waiting in AwaitingCredentials; needs `download` on `talosclusters/credentials`.
	PurposeRotationCredentials = "rotation-credentials"
)

// TalosCredentialRequest condition types.
const (
	// IssuedCondition is true once the certificate is in status.
	IssuedCondition = "Issued"
	// DeniedCondition is true when the controller refused to sign.
	DeniedCondition = "Denied"
)

// TalosCredentialRequestSpec asks the controller to sign a public key for the
// least Talos role the purpose needs. The private key never leaves the requester.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new request"
// +kubebuilder:validation:XValidation:rule="self.purpose != 'rotation-credentials' || has(self.operationName)",message="spec.operationName is required for rotation-credentials: name the ca-rotation operation"
type TalosCredentialRequestSpec struct {
	// clusterName is the TalosCluster, in the same namespace, the credential is for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClusterName string `json:"clusterName"`
	// purpose is reader, talosconfig-reader, support-bundle, etcd-snapshot,
	// packet-capture or rotation-credentials. Each needs `download` on the
	// matching talosclusters subresource, checked as the requester (for reader, `get` on talosclusters).
	// +required
	// +kubebuilder:validation:Enum=reader;talosconfig-reader;support-bundle;etcd-snapshot;packet-capture;rotation-credentials
	Purpose string `json:"purpose"`
	// publicKey is the PEM-encoded public key (or certificate request) to sign.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	PublicKey string `json:"publicKey"`
	// duration is how long the certificate lasts. Empty means ten minutes (one
	// hour for talosconfig-reader, at most twelve; a year for rotation-credentials).
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// operationName is the ca-rotation TalosOperation (purpose rotation-credentials).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	OperationName string `json:"operationName,omitempty"`
}

// TalosCredentialRequestStatus holds the signed certificate: public material only.
type TalosCredentialRequestStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Issued, Denied.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// role is the Talos role signed for: os:reader, os:etcd:backup, os:operator or os:admin.
	// +optional
	Role string `json:"role,omitempty"`
	// certificate is the PEM-encoded signed certificate.
	// +optional
	Certificate string `json:"certificate,omitempty"`
	// ca is the PEM-encoded Talos API CA certificate to verify the nodes with.
	// +optional
	CA string `json:"ca,omitempty"`
	// kubernetesCertificate is, for rotation-credentials, the PEM-encoded
	// Kubernetes admin client certificate (group system:masters) for the same
	// public key, signed by the rotation's new Kubernetes CA.
	// +optional
	KubernetesCertificate string `json:"kubernetesCertificate,omitempty"`
	// kubernetesCA is, for rotation-credentials, the PEM-encoded Kubernetes
	// CA certificates to verify the API servers with: the new and the old
	// while both are in use.
	// +optional
	KubernetesCA string `json:"kubernetesCA,omitempty"`
	// expiresAt is when the certificate expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// requestedBy is the user the request was checked for.
	// +optional
	RequestedBy string `json:"requestedBy,omitempty"`
}

// TalosCredentialRequest asks the controller, the only holder of the CA keys,
// to sign a short-lived Talos client certificate for a public key.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=tcr,categories=ichor
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Purpose",type=string,JSONPath=`.spec.purpose`
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=`.status.role`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TalosCredentialRequest struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the request.
	// +required
	Spec TalosCredentialRequestSpec `json:"spec"`
	// status is the signed certificate.
	// +optional
	Status TalosCredentialRequestStatus `json:"status,omitempty"`
}

// TalosCredentialRequestList is a list of TalosCredentialRequests.
//
// +kubebuilder:object:root=true
type TalosCredentialRequestList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the requests.
	Items []TalosCredentialRequest `json:"items"`
}
