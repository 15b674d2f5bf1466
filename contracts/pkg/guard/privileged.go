package guard

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
)

// The resource and the virtual subresource that gate privileged patches.
const (
	ResourceTalosConfigPatches = "talosconfigpatches"
	// SubresourcePrivileged on talosconfigpatches: `update` on it writes or
	// rolls out the configuration of contracts/pkg/privileged.
	SubresourcePrivileged = "privileged"
)

// PrivilegedPatchPermission is the permission that writing a privileged
// patch needs; name is empty for a check on any patch of the namespace.
func PrivilegedPatchPermission(namespace, name string) Permission {
	return Permission{Verb: VerbUpdate, Resource: ResourceTalosConfigPatches, Subresource: SubresourcePrivileged, Namespace: namespace, Name: name}
}

// PatchRequirements returns the permission a write of a TalosConfigPatch
// needs when the patch carries privileged configuration (contracts/pkg/privileged):
// a create (old nil), a change of the spec when the old or the new spec
// carries any, and a delete (p nil). A write that leaves the spec as it
// was (labels, annotations, finalizers) needs nothing: it changes no node.
func PatchRequirements(old, p *ichorv1alpha1.TalosConfigPatch) []Requirement {
	var verb, ns, name string
	var found []privileged.Finding
	switch {
	case old == nil && p == nil:
		return nil
	case old == nil:
		verb, ns, name = "creating", p.Namespace, p.Name
		found = privileged.InPatch(p)
	case p == nil:
		verb, ns, name = "deleting", old.Namespace, old.Name
		found = privileged.InPatch(old)
	default:
		// Semantic: an empty list or map equals an absent one, as stored.
		if equality.Semantic.DeepEqual(old.Spec, p.Spec) {
			return nil
		}
		verb, ns, name = "changing", p.Namespace, p.Name
		found = privileged.InPatch(p)
		seen := map[string]bool{}
		for _, f := range found {
			seen[f.Path] = true
		}
		// What the patch carried and drops is privileged too: removing it
		// changes what runs with full rights as much as adding it.
		for _, f := range privileged.InPatch(old) {
			if !seen[f.Path] {
				f.Location += " (before the change)"
				found = append(found, f)
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	locations := make([]string, 0, len(found))
	for _, f := range found {
		locations = append(locations, f.Location)
	}
	return []Requirement{{
		Permission: PrivilegedPatchPermission(ns, name),
		Field:      strings.Join(locations, ", "),
		Action:     fmt.Sprintf("%s TalosConfigPatch %q (privileged: %s)", verb, name, reasons(found)),
	}}
}

// reasons names each finding's table path with its reason.
func reasons(found []privileged.Finding) string {
	parts := make([]string, 0, len(found))
	seen := map[string]bool{}
	for _, f := range found {
		if seen[f.Path] {
			continue
		}
		seen[f.Path] = true
		parts = append(parts, f.Path+": "+f.Reason)
	}
	return strings.Join(parts, "; ")
}

// ConfigRolloutRequirements returns the permission starting op needs when
// it is a config rollout and patches of its cluster carry privileged
// configuration: a rollout applies them, and a patch written before the
// rule existed never passed the check. patches are the cluster's
// privileged patches (privileged.OfCluster).
func ConfigRolloutRequirements(op *ichorv1alpha1.TalosOperation, patches []privileged.Patch) []Requirement {
	if op.Spec.Type != ichorv1alpha1.OperationConfig || len(patches) == 0 {
		return nil
	}
	names := make([]string, 0, len(patches))
	for _, p := range patches {
		names = append(names, fmt.Sprintf("%s (%s)", p.Name, strings.Join(p.Paths, ", ")))
	}
	return []Requirement{{
		Permission: PrivilegedPatchPermission(op.Namespace, ""),
		Field:      fieldSpecType,
		Action: fmt.Sprintf("starting a config rollout of cluster %q (it applies the privileged TalosConfigPatches %s)",
			op.Spec.ClusterName, strings.Join(names, ", ")),
	}}
}
