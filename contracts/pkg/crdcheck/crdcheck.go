// Package crdcheck decides whether a CustomResourceDefinition may replace the
// one the API server holds (architecture, "Upgrades": CRDs are updated
// additively and never downgraded). Objects of every version listed in the
// stored CRD's status.storedVersions may be in etcd; a new schema that drops
// one of their fields would make the API server prune that data the next
// time the object is written. So, for each stored version, the new CRD must
// still serve a schema that has every field the old one had, with the same
// type, and must not require a field the old one did not. A field removed on
// purpose, once no object uses it, is named on the retired list.
//
// It works on the CRDs as unstructured objects (what the installer reads
// from its manifest and from the API server), so contracts needs no
// apiextensions dependency.
package crdcheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Retired is a field that may be removed from a stored version's schema: it
// was deprecated and no object uses it any more.
type Retired struct {
	// CRD is the CRD's name, for example talosmachines.ichor.maesh.dev.
	CRD string
	// Version is the stored version, for example v1alpha1.
	Version string
	// Path is the field, as Change.Path spells it (".spec.oldField",
	// ".spec.disks[*].size", ".metadata.labels.*"); empty retires the whole
	// version.
	Path string
}

// RetiredFields is the list this release of Ichor was built with: the
// fields a release removed on purpose. Empty: no field has been retired yet.
var RetiredFields []Retired

// Kinds of change.
const (
	// FieldRemoved is a field of the stored version missing from the new schema.
	FieldRemoved = "removed"
	// TypeChanged is a field whose type differs.
	TypeChanged = "type changed"
	// NewlyRequired is a field the new schema requires and the old did not.
	NewlyRequired = "newly required"
	// VersionRemoved is a stored version the new CRD does not have.
	VersionRemoved = "stored version removed"
	// ScopeChanged is a change between Namespaced and Cluster.
	ScopeChanged = "scope changed"
)

// Change is one difference that is not additive.
type Change struct {
	CRD     string
	Version string
	// Path is the field: properties joined by dots, "[*]" for an array's
	// items, ".*" for a map's values.
	Path string
	// Kind is one of FieldRemoved, TypeChanged, NewlyRequired, VersionRemoved, ScopeChanged.
	Kind string
	// Detail says more (the old and new type).
	Detail string
	// Retired is true when the retired list allows the change.
	Retired bool
}

func (c Change) String() string {
	where := c.CRD + " " + c.Version
	if c.Path != "" {
		where += " " + c.Path
	}

	s := where + ": " + c.Kind
	if c.Detail != "" {
		s += " (" + c.Detail + ")"
	}

	return s
}

// Check compares the CRD the API server holds (stored) with the one about to
// be applied (next) and returns every change that is not additive, marking
// those the retired list allows. A nil stored CRD (a new CRD) has none.
func Check(stored, next *unstructured.Unstructured, retired []Retired) ([]Change, error) {
	if stored == nil {
		return nil, nil
	}

	name := stored.GetName()
	if next.GetName() != name {
		return nil, fmt.Errorf("comparing CRD %s with %s", name, next.GetName())
	}

	var changes []Change

	oldScope, _, _ := unstructured.NestedString(stored.Object, "spec", "scope")
	newScope, _, _ := unstructured.NestedString(next.Object, "spec", "scope")

	if oldScope != "" && newScope != "" && oldScope != newScope {
		changes = append(changes, Change{CRD: name, Kind: ScopeChanged, Detail: oldScope + " to " + newScope})
	}

	storedVersions, _, _ := unstructured.NestedStringSlice(stored.Object, "status", "storedVersions")
	if len(storedVersions) == 0 {
		// The API server fills storedVersions; a CRD read without status
		// stores its storage version.
		storedVersions = storageVersions(stored)
	}

	for _, v := range storedVersions {
		oldSchema, ok := versionSchema(stored, v)
		if !ok {
			// The API server keeps a version in storedVersions only while
			// the CRD has it; without a schema there is nothing to compare.
			continue
		}

		newSchema, ok := versionSchema(next, v)
		if !ok {
			changes = append(changes, Change{CRD: name, Version: v, Kind: VersionRemoved,
				Detail: "objects stored as " + v + " would no longer be readable"})

			continue
		}

		var found []Change
		compare(oldSchema, newSchema, "", &found)

		for _, c := range found {
			c.CRD, c.Version = name, v
			changes = append(changes, c)
		}
	}

	for i := range changes {
		changes[i].Retired = isRetired(changes[i], retired)
	}

	return changes, nil
}

// Refused returns the changes the retired list does not allow.
func Refused(changes []Change) []Change {
	var out []Change

	for _, c := range changes {
		if !c.Retired {
			out = append(out, c)
		}
	}

	return out
}

// Explain is the error for refused changes: what would be lost and the way out.
func Explain(refused []Change) error {
	if len(refused) == 0 {
		return nil
	}

	lines := make([]string, 0, len(refused))
	for _, c := range refused {
		lines = append(lines, "  "+c.String())
	}

	return fmt.Errorf("the new CRDs are not additive; objects in etcd would lose data:\n%s\n"+
		"Nothing was changed. Keep these fields in the schema (deprecate them instead), or, once no object uses one, "+
		"list it as retired (contracts/pkg/crdcheck.RetiredFields) in the release that removes it", strings.Join(lines, "\n"))
}

func isRetired(c Change, retired []Retired) bool {
	for _, r := range retired {
		if r.CRD != c.CRD || r.Version != c.Version {
			continue
		}

		if r.Path == "" {
			return true
		}

		// A retired field covers the fields below it.
		if c.Path == r.Path || strings.HasPrefix(c.Path, r.Path+".") || strings.HasPrefix(c.Path, r.Path+"[") {
			return true
		}
	}

	return false
}

func storageVersions(crd *unstructured.Unstructured) []string {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")

	var out []string

	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}

		if s, _ := m["storage"].(bool); s {
			if n, _ := m["name"].(string); n != "" {
				out = append(out, n)
			}
		}
	}

	return out
}

func versionSchema(crd *unstructured.Unstructured, version string) (map[string]any, bool) {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok || m["name"] != version {
			continue
		}

		schema, _, _ := unstructured.NestedMap(m, "schema", "openAPIV3Schema")
		if schema == nil {
			schema = map[string]any{}
		}

		return schema, true
	}

	return nil, false
}

// compare walks the old schema and records what the new one lost.
func compare(old, next map[string]any, path string, out *[]Change) {
	oldType, _ := old["type"].(string)
	newType, _ := next["type"].(string)

	if oldType != "" && newType != "" && oldType != newType {
		*out = append(*out, Change{Path: pathOr(path), Kind: TypeChanged, Detail: oldType + " to " + newType})

		return
	}

	if intOrString(old) != intOrString(next) {
		*out = append(*out, Change{Path: pathOr(path), Kind: TypeChanged, Detail: "x-kubernetes-int-or-string changed"})
	}

	// A schema that keeps unknown fields accepts whatever the old one
	// described below it.
	preserves := preservesUnknown(next)

	oldProps, _ := old["properties"].(map[string]any)
	newProps, _ := next["properties"].(map[string]any)

	for _, k := range sortedKeys(oldProps) {
		o, _ := oldProps[k].(map[string]any)
		p := path + "." + k

		n, ok := newProps[k].(map[string]any)
		if !ok {
			if !preserves {
				*out = append(*out, Change{Path: p, Kind: FieldRemoved})
			}

			continue
		}

		compare(o, n, p, out)
	}

	oldRequired := stringSet(old["required"])
	for _, r := range sortedKeys(stringSet(next["required"])) {
		if !oldRequired[r] {
			*out = append(*out, Change{Path: path + "." + r, Kind: NewlyRequired,
				Detail: "objects written before lack it and could not be updated"})
		}
	}

	if o, ok := old["items"].(map[string]any); ok {
		if n, ok := next["items"].(map[string]any); ok {
			compare(o, n, path+"[*]", out)
		} else if !preserves {
			*out = append(*out, Change{Path: path + "[*]", Kind: FieldRemoved})
		}
	}

	if o, ok := old["additionalProperties"].(map[string]any); ok {
		if n, ok := next["additionalProperties"].(map[string]any); ok {
			compare(o, n, path+".*", out)
		} else if !preserves {
			*out = append(*out, Change{Path: path + ".*", Kind: FieldRemoved})
		}
	}
}

func pathOr(p string) string {
	if p == "" {
		return "."
	}

	return p
}

func intOrString(s map[string]any) bool {
	b, _ := s["x-kubernetes-int-or-string"].(bool)

	return b
}

func preservesUnknown(s map[string]any) bool {
	b, _ := s["x-kubernetes-preserve-unknown-fields"].(bool)

	return b
}

func stringSet(v any) map[string]bool {
	out := map[string]bool{}

	list, _ := v.([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			out[s] = true
		}
	}

	if ss, ok := v.([]string); ok {
		for _, s := range ss {
			out[s] = true
		}
	}

	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	return slices.Clip(keys)
}
