package v1alpha1

// Condition and Event reasons of the controllers that are not the
// TalosMachine's (those are beside its condition types): every reason in one
// package, in one naming style, for the console and the CLI to compare with.

// Reasons of a MachineReclaim's conditions.
const (
	// InspectingReason means the node is being read before the reset.
	InspectingReason = "Inspecting"
	// InspectionFailedReason means the node could not be read.
	InspectionFailedReason = "InspectionFailed"
	// AwaitingConfirmationReason means the reset waits for a person's confirmation.
	AwaitingConfirmationReason = "AwaitingConfirmation"
	// RefusedReason means the reclaim is refused (the node belongs to a managed cluster).
	RefusedReason = "Refused"
	// ResetRequestedReason means the reset was sent.
	ResetRequestedReason = "ResetRequested"
	// ReclaimedReason means the node answers in maintenance mode after its reset.
	ReclaimedReason = "Reclaimed"
	// ResetFailedReason means the node refused the reset or did not come back in time.
	ResetFailedReason = "ResetFailed"
	// ExpiredReason means the reclaim was not confirmed within its TTL.
	ExpiredReason = "Expired"
	// BadCredentialReason means the talosconfig given for the node does not work.
	BadCredentialReason = "BadCredential" //nolint:gosec // a condition reason, not a credential
)

// Reasons of a TalosCredentialRequest's conditions.
const (
	// IssuedReason means the certificate was issued.
	IssuedReason = "Issued"
	// UnknownClusterReason means the request names no TalosCluster of its namespace.
	UnknownClusterReason = "UnknownCluster"
	// BundleUnavailableReason means the cluster's secrets bundle cannot be read.
	BundleUnavailableReason = "BundleUnavailable"
	// BadPublicKeyReason means the request's public key cannot be used.
	BadPublicKeyReason = "BadPublicKey"
	// NotSupportedReason means this release does not issue what the request asks for.
	NotSupportedReason = "NotSupported"
	// UnknownOperationReason means a rotation-credentials request names no
	// ca-rotation TalosOperation of the cluster that hands credentials out.
	UnknownOperationReason = "UnknownOperation"
	// SigningFailedReason means the certificate could not be signed.
	SigningFailedReason = "SigningFailed"
	// UnknownPurposeReason means the request's purpose is not one Ichor issues for.
	UnknownPurposeReason = "UnknownPurpose"
	// NotDeniedReason is Denied=False's reason.
	NotDeniedReason = "NotDenied"
)

// Reasons of discovery's Events (on the TalosCluster) and conditions.
const (
	// MachineDiscoveredReason means a pending TalosMachine was created for a node.
	MachineDiscoveredReason = "MachineDiscovered"
	// DiscoveryConfigInvalidReason means a subnet or address of spec.discovery cannot be used.
	DiscoveryConfigInvalidReason = "DiscoveryConfigInvalid"
	// UniqueIdentityReason is IdentityConflict=False's reason on a pending machine.
	UniqueIdentityReason = "UniqueIdentity"
)

// Reasons of a TalosCluster's Ready and TopologyTransitioning conditions.
const (
	// AllMachinesReadyReason means every approved machine is Ready.
	AllMachinesReadyReason = "AllMachinesReady"
	// NoControlPlaneReadyReason means no control plane is Ready.
	NoControlPlaneReadyReason = "NoControlPlaneReady"
	// MachinesNotReadyReason means some approved machines are not Ready.
	MachinesNotReadyReason = "MachinesNotReady"
	// EvenControlPlanesReason means the cluster has an even number of provisioned control planes.
	EvenControlPlanesReason = "EvenControlPlanes"
	// OddControlPlanesReason means the cluster has an odd number of provisioned control planes.
	OddControlPlanesReason = "OddControlPlanes"
)
