package crdcheck_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maeshinshin/ichor/contracts/pkg/crdcheck"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

const machines = "talosmachines.ichor.maesh.dev"

// crd returns a CRD of Ichor's install manifest, as the API server stores it
// (status.storedVersions set).
func crd(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()

	objs, err := install.Objects()
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" && o.GetName() == name {
			o = o.DeepCopy()
			if err := unstructured.SetNestedStringSlice(o.Object, []string{"v1alpha1"}, "status", "storedVersions"); err != nil {
				t.Fatal(err)
			}

			return o
		}
	}

	t.Fatalf("no CRD %s in the manifest", name)

	return nil
}

func schema(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()

	versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
	v := versions[0].(map[string]any)
	s, _, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema")

	return s
}

// edit changes the first version's schema of a copy of o.
func edit(t *testing.T, o *unstructured.Unstructured, f func(s map[string]any)) *unstructured.Unstructured {
	t.Helper()

	o = o.DeepCopy()
	versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
	v := versions[0].(map[string]any)
	s := schema(t, o)
	f(s)

	if err := unstructured.SetNestedMap(v, s, "schema", "openAPIV3Schema"); err != nil {
		t.Fatal(err)
	}

	versions[0] = v
	if err := unstructured.SetNestedSlice(o.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}

	return o
}

func props(t *testing.T, s map[string]any, path ...string) map[string]any {
	t.Helper()

	cur := s
	for _, p := range path {
		next, ok := cur["properties"].(map[string]any)[p].(map[string]any)
		if !ok {
			t.Fatalf("no property %s in the schema", strings.Join(path, "."))
		}

		cur = next
	}

	return cur
}

func check(t *testing.T, stored, next *unstructured.Unstructured, retired []crdcheck.Retired) []crdcheck.Change {
	t.Helper()

	changes, err := crdcheck.Check(stored, next, retired)
	if err != nil {
		t.Fatal(err)
	}

	return changes
}

func TestSameAndAdditive(t *testing.T) {
	stored := crd(t, machines)

	if c := check(t, stored, stored.DeepCopy(), nil); len(c) != 0 {
		t.Fatalf("the same CRD changed: %v", c)
	}

	// A new optional field, a new version, and a CRD that did not exist are additive.
	next := edit(t, stored, func(s map[string]any) {
		props(t, s, "spec")["properties"].(map[string]any)["newField"] = map[string]any{"type": "string"}
	})

	if c := check(t, stored, next, nil); len(c) != 0 {
		t.Fatalf("adding a field: %v", c)
	}

	versions, _, _ := unstructured.NestedSlice(next.Object, "spec", "versions")
	v2 := versions[0].(map[string]any)
	v2 = deepCopyMap(v2)
	v2["name"], v2["storage"] = "v1alpha2", false
	_ = unstructured.SetNestedSlice(next.Object, append(versions, v2), "spec", "versions")

	if c := check(t, stored, next, nil); len(c) != 0 {
		t.Fatalf("adding a version: %v", c)
	}

	if c := check(t, nil, next, nil); len(c) != 0 {
		t.Fatalf("a new CRD: %v", c)
	}
}

func deepCopyMap(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

func TestRemovedFieldRefused(t *testing.T) {
	stored := crd(t, machines)
	next := edit(t, stored, func(s map[string]any) {
		delete(props(t, s, "spec", "install")["properties"].(map[string]any), "disk")
	})

	changes := check(t, stored, next, nil)
	refused := crdcheck.Refused(changes)

	if len(refused) != 1 || refused[0].Path != ".spec.install.disk" || refused[0].Kind != crdcheck.FieldRemoved ||
		refused[0].CRD != machines || refused[0].Version != "v1alpha1" {
		t.Fatalf("removing .spec.install.disk: %v", changes)
	}

	err := crdcheck.Explain(refused)
	if err == nil || !strings.Contains(err.Error(), machines+" v1alpha1 .spec.install.disk: removed") ||
		!strings.Contains(err.Error(), "Nothing was changed") || !strings.Contains(err.Error(), "RetiredFields") {
		t.Fatalf("the refusal does not name the field and the way out: %v", err)
	}

	// The retired list allows it, and the fields below it.
	allowed := check(t, stored, next, []crdcheck.Retired{{CRD: machines, Version: "v1alpha1", Path: ".spec.install.disk"}})
	if len(crdcheck.Refused(allowed)) != 0 || len(allowed) != 1 || !allowed[0].Retired {
		t.Fatalf("a retired field was refused: %v", allowed)
	}

	// Retiring another field, or the same field of another CRD, does not.
	for _, r := range []crdcheck.Retired{
		{CRD: machines, Version: "v1alpha1", Path: ".spec.install.dis"},
		{CRD: "talosclusters.ichor.maesh.dev", Version: "v1alpha1", Path: ".spec.install.disk"},
		{CRD: machines, Version: "v1alpha2", Path: ".spec.install.disk"},
	} {
		if len(crdcheck.Refused(check(t, stored, next, []crdcheck.Retired{r}))) != 1 {
			t.Fatalf("retired %+v allowed removing .spec.install.disk", r)
		}
	}
}

func TestNestedAndArrayFields(t *testing.T) {
	stored := crd(t, machines)

	// A field of an object in an array, and a field below a removed one:
	// only the removed one is reported, not every field below it.
	next := edit(t, stored, func(s map[string]any) {
		status := props(t, s, "status")
		conds := status["properties"].(map[string]any)["conditions"].(map[string]any)
		delete(conds["items"].(map[string]any)["properties"].(map[string]any), "reason")
		delete(status["properties"].(map[string]any)["hardware"].(map[string]any)["properties"].(map[string]any), "disks")
	})

	changes := check(t, stored, next, nil)
	paths := make([]string, 0, len(changes))

	for _, c := range changes {
		paths = append(paths, c.Path+" "+c.Kind)
	}

	got := strings.Join(paths, ", ")
	if !strings.Contains(got, ".status.conditions[*].reason removed") || !strings.Contains(got, ".status.hardware.disks removed") ||
		strings.Contains(got, ".status.hardware.disks[*]") {
		t.Fatalf("changes: %s", got)
	}
}

func TestTypeRequiredScopeVersion(t *testing.T) {
	stored := crd(t, machines)

	typed := edit(t, stored, func(s map[string]any) {
		props(t, s, "spec", "address")["type"] = "integer"
	})
	if c := crdcheck.Refused(check(t, stored, typed, nil)); len(c) != 1 || c[0].Kind != crdcheck.TypeChanged || c[0].Detail != "string to integer" {
		t.Fatalf("a type change: %v", c)
	}

	required := edit(t, stored, func(s map[string]any) {
		spec := props(t, s, "spec")
		spec["required"] = append(spec["required"].([]any), "address")
	})
	if c := crdcheck.Refused(check(t, stored, required, nil)); len(c) != 1 || c[0].Kind != crdcheck.NewlyRequired || c[0].Path != ".spec.address" {
		t.Fatalf("a newly required field: %v", c)
	}

	scoped := stored.DeepCopy()
	_ = unstructured.SetNestedField(scoped.Object, "Cluster", "spec", "scope")
	if c := crdcheck.Refused(check(t, stored, scoped, nil)); len(c) != 1 || c[0].Kind != crdcheck.ScopeChanged {
		t.Fatalf("a scope change: %v", c)
	}

	renamed := stored.DeepCopy()
	versions, _, _ := unstructured.NestedSlice(renamed.Object, "spec", "versions")
	versions[0].(map[string]any)["name"] = "v1beta1"
	_ = unstructured.SetNestedSlice(renamed.Object, versions, "spec", "versions")

	c := crdcheck.Refused(check(t, stored, renamed, nil))
	if len(c) != 1 || c[0].Kind != crdcheck.VersionRemoved || c[0].Version != "v1alpha1" {
		t.Fatalf("a stored version dropped: %v", c)
	}

	if r := check(t, stored, renamed, []crdcheck.Retired{{CRD: machines, Version: "v1alpha1"}}); len(crdcheck.Refused(r)) != 0 {
		t.Fatalf("a retired version: %v", r)
	}
}

// TestPreserveUnknownFields: a schema that keeps unknown fields accepts what
// the old one described, so the fields are not lost.
func TestPreserveUnknownFields(t *testing.T) {
	stored := crd(t, machines)
	next := edit(t, stored, func(s map[string]any) {
		install := props(t, s, "spec", "install")
		delete(install, "properties")
		install["x-kubernetes-preserve-unknown-fields"] = true
	})

	if c := check(t, stored, next, nil); len(crdcheck.Refused(c)) != 0 {
		t.Fatalf("opening an object to unknown fields: %v", c)
	}
}

// TestEveryManifestCRD: each CRD of the manifest compared with itself is
// clean, so the walk handles every schema construct Ichor's CRDs use.
func TestEveryManifestCRD(t *testing.T) {
	objs, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}

	n := 0

	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}

		n++

		if c := check(t, crd(t, o.GetName()), o, nil); len(c) != 0 {
			t.Errorf("%s against itself: %v", o.GetName(), c)
		}
	}

	if n < 10 {
		t.Fatalf("%d CRDs", n)
	}
}
