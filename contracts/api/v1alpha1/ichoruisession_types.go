package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IchorUISession is one sign-in session of ichor-ui's OIDC issuer
// (architecture, "CLI and UI"): the user it signed in, the authorization
// code it was made from, and its refresh-token family. ichor-ui's replicas
// share their sessions through these objects, so a refresh on one replica
// of a session begun on another works and a revocation on one holds on all;
// every change is a compare-and-swap on the resourceVersion, which is what
// makes a code or a refresh token usable once across replicas.
//
// Only ichor-ui writes them; no user role reads them. They hold no secret:
// codes and refresh tokens are kept as SHA-256 hashes of 256-bit random
// values. Deleting one signs its session out (its access tokens are refused
// from then on). ichor-ui deletes them once they have expired.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=iuis,categories=ichor
// +kubebuilder:printcolumn:name="User",type=string,JSONPath=`.spec.username`
// +kubebuilder:printcolumn:name="Client",type=string,JSONPath=`.spec.client`
// +kubebuilder:printcolumn:name="Expires",type=date,JSONPath=`.spec.expires`
// +kubebuilder:printcolumn:name="Revoked",type=boolean,JSONPath=`.spec.revoked`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IchorUISession struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata; the name is the session ID (the sid claim).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the session.
	// +required
	Spec IchorUISessionSpec `json:"spec"`
}

// IchorUISessionSpec is a sign-in session.
type IchorUISessionSpec struct {
	// username is the Kubernetes user signed in (ichor:<name> or oidc:<name>).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Username string `json:"username"`
	// groups are the user's groups at sign-in or at the last refresh.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	Groups []string `json:"groups,omitempty"`
	// fingerprint identifies the password hash the user signed in with
	// (Ichor's users): another one ends the session.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Fingerprint string `json:"fingerprint,omitempty"`
	// client is the OIDC client the session was issued to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Client string `json:"client"`
	// scopes are the granted scopes.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	Scopes []string `json:"scopes,omitempty"`
	// authTime is when the user signed in.
	AuthTime metav1.Time `json:"authTime"`
	// expires is when the session ends: the authorization code's expiry until
	// it is exchanged, then the sign-in's end.
	Expires metav1.Time `json:"expires"`
	// code is the authorization code the session is made from.
	Code IchorUISessionCode `json:"code"`
	// refreshHash is the SHA-256 (hex) of the refresh token that may be used
	// next; empty until the code is exchanged.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RefreshHash string `json:"refreshHash,omitempty"`
	// usedRefreshHashes are the hashes of refresh tokens already used: one
	// presented again revokes the session.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=64
	UsedRefreshHashes []string `json:"usedRefreshHashes,omitempty"`
	// revoked ends the session before it expires.
	// +optional
	Revoked bool `json:"revoked,omitempty"`
	// ended says why the session was revoked, when not by its user.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Ended string `json:"ended,omitempty"`
}

// IchorUISessionCode is the authorization code a session is made from.
type IchorUISessionCode struct {
	// hash is the SHA-256 (hex) of the code.
	// +kubebuilder:validation:MaxLength=64
	Hash string `json:"hash"`
	// expires is when the code can no longer be exchanged.
	Expires metav1.Time `json:"expires"`
	// redirectURI the code was sent to; the exchange must name it.
	// +kubebuilder:validation:MaxLength=2048
	RedirectURI string `json:"redirectURI"`
	// nonce of the authorization request, put in the ID token.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Nonce string `json:"nonce,omitempty"`
	// challenge is the PKCE S256 code challenge.
	// +kubebuilder:validation:MaxLength=64
	Challenge string `json:"challenge"`
	// used is set by the first exchange, whatever its outcome.
	// +optional
	Used bool `json:"used,omitempty"`
}

// IchorUISessionList is a list of IchorUISessions.
//
// +kubebuilder:object:root=true
type IchorUISessionList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the sessions.
	Items []IchorUISession `json:"items"`
}
