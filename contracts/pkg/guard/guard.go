// Package guard holds Ichor's dangerous-operation checks as pure functions:
// quorum and last control plane, topology, CNI, versions, deletion protection
// and the RBAC verbs that gate the dangerous writes. The admission webhooks
// enforce them; the CLI and the UI backend call the same functions so that a
// refusal reads the same everywhere (architecture principle 10).
//
// A decision is either a Refusal (the change is wrong) or a Requirement (the
// change needs a permission the caller must hold; the webhook checks it with a
// SubjectAccessReview made as the requesting user). Every refusal names the
// field, the rule and the way out.
package guard

import (
	"fmt"
	"strings"
)

// Refusal is a decision against a change.
type Refusal struct {
	// Field is the path of the offending field, for example spec.controlPlane.count.
	Field string
	// Rule is what the change breaks.
	Rule string
	// WayOut is what a person can do instead (an annotation, a verb, another value).
	WayOut string
	// Overridable is true when the `override` verb on the cluster lets the
	// change through; the override is recorded as a warning.
	Overridable bool
}

// Error returns "field: rule; way out".
func (r Refusal) Error() string {
	return r.Field + ": " + r.Rule + "; " + r.WayOut
}

// Message returns "rule; way out", for callers that report the field apart.
func (r Refusal) Message() string {
	return r.Rule + "; " + r.WayOut
}

// Permission is an RBAC check of one verb on one resource of Ichor's API group.
type Permission struct {
	// Verb is the RBAC verb, for example update or approve.
	Verb string
	// Resource is the plural resource name, for example talosclusters.
	Resource string
	// Subresource is the (possibly virtual) subresource, for example secret-references.
	Subresource string
	// Namespace is the namespace of the object; empty for cluster-scoped objects.
	Namespace string
	// Name is the object's name; empty for a check on any object.
	Name string
}

// String returns the permission as a person reads it: `verb` on `resource/subresource`.
func (p Permission) String() string {
	res := p.Resource
	if p.Subresource != "" {
		res += "/" + p.Subresource
	}
	return fmt.Sprintf("`%s` on `%s`", p.Verb, res)
}

// Requirement is a permission a change needs.
type Requirement struct {
	// Permission is what the caller must hold.
	Permission Permission
	// Field is the field whose change needs it.
	Field string
	// Action describes the change, for example "changing a field that names a Secret".
	Action string
	// Grant says how the permission is granted; empty means the ichor-admin
	// role holds it.
	Grant string
}

// Refusal returns the refusal to report when the caller lacks the permission.
func (r Requirement) Refusal(user string) Refusal {
	who := "the caller"
	if user != "" {
		who = fmt.Sprintf("user %q", user)
	}
	way := fmt.Sprintf("ask an administrator to grant %s (the ichor-admin role holds it)", r.Permission)
	if r.Grant != "" {
		way = r.Grant
	}
	return Refusal{
		Field:  r.Field,
		Rule:   fmt.Sprintf("%s needs %s, which %s does not hold", r.Action, r.Permission, who),
		WayOut: way,
	}
}

// Verbs beyond the standard ones, and the virtual subresources they apply to.
const (
	// VerbApprove on talosmachines/approval approves or rejects a machine.
	VerbApprove = "approve"
	// VerbOverride on talosclusters guards removing an Ichor finalizer, resetting a
	// node, restoring etcd, the last-worker guard and a refused version pair.
	VerbOverride = "override"
	// VerbReclaim on machinereclaims creates a reclaim and confirms it.
	VerbReclaim = "reclaim"
	// VerbDownload on the talosclusters credential subresources signs a credential for a person.
	VerbDownload = "download"
	// VerbShutdown on talosoperations starts a cluster shutdown.
	VerbShutdown = "shutdown"
	// VerbRotateCA on talosoperations starts a CA rotation.
	VerbRotateCA = "rotate-ca"
	// VerbRotateKeys on talosoperations starts a key rotation.
	VerbRotateKeys = "rotate-keys"
	// VerbRestoreEtcd on talosoperations starts an etcd restore (override is needed too).
	VerbRestoreEtcd = "restore-etcd"
	// VerbResetNode on talosoperations starts a node reset (override is needed too).
	VerbResetNode = "reset-node"
	// VerbShutdownNode on talosoperations shuts one node down.
	VerbShutdownNode = "shutdown-node"
	// VerbUpdate is the standard update verb, used on virtual subresources.
	VerbUpdate = "update"
	// VerbGet is the standard get verb.
	VerbGet = "get"
)

// Resources and virtual subresources of Ichor's API group.
const (
	ResourceTalosClusters           = "talosclusters"
	ResourceTalosMachines           = "talosmachines"
	ResourceTalosOperations         = "talosoperations"
	ResourceTalosEtcdBackups        = "talosetcdbackups"
	ResourceIchorInstallations      = "ichorinstallations"
	ResourceIchorUsers              = "ichorusers"
	ResourceMachineReclaims         = "machinereclaims"
	ResourceTalosCredentialRequests = "taloscredentialrequests" //nolint:gosec // a resource name, not a credential

	SubresourceApproval          = "approval"
	SubresourceTrust             = "trust"
	SubresourceSecretReferences  = "secret-references"
	SubresourceCiliumValues      = "cilium-values"
	SubresourceAuthentication    = "authentication"
	SubresourceVersion           = "version"
	SubresourceSettings          = "settings"
	SubresourceCredentials       = "credentials"
	SubresourceTalosconfigReader = "talosconfig-reader"
	SubresourceSupportBundle     = "support-bundle"
	SubresourceEtcdSnapshot      = "etcd-snapshot"
	SubresourcePacketCapture     = "packet-capture"
	SubresourcePassword          = "password"
)

// Field paths and actions that several checks name.
const (
	fieldCNIPreset    = "spec.cni.preset"
	fieldCiliumValues = "spec.cni.cilium.values"
	fieldRole         = "spec.role"
	actionSecretRef   = "setting or changing a field that names a Secret"
)

// OverrideOn returns the override permission on a cluster.
func OverrideOn(namespace, cluster string) Permission {
	return Permission{Verb: VerbOverride, Resource: ResourceTalosClusters, Namespace: namespace, Name: cluster}
}

// joinQuoted renders a list for a message.
func joinQuoted(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// Field paths several rules name.
const (
	fieldSpec     = "spec"
	fieldSpecType = "spec.type"
	// fieldMachineSelector is spec.machineSelector of an operation.
	fieldMachineSelector = "spec.machineSelector"
)
