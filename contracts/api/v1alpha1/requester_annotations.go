package v1alpha1

// Annotations Ichor's mutating admission webhook sets: who asked, as the API
// server authenticated them. A client cannot choose them: the webhook
// overwrites whatever a create carries, and the validating webhook refuses
// any update that changes or removes them. Without the webhooks (a controller
// run with --enable-webhooks=false) they are absent, and the status fields
// they feed stay empty.
const (
	// RequestedByAnnotation is the Kubernetes user name that created a
	// TalosCredentialRequest or MachineReclaim. The controller copies it into
	// status.requestedBy and status.audit.requestedBy.
	RequestedByAnnotation = "ichor.maesh.dev/requested-by"
	// ConfirmedByAnnotation is the Kubernetes user name whose write set the
	// MachineReclaim's current spec.confirmUUID; it is absent while the UUID is
	// empty. The controller copies it into status.audit.confirmedBy when it
	// sends the reset.
	ConfirmedByAnnotation = "ichor.maesh.dev/confirmed-by"
)
