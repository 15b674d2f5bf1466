package cilium

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// object is one rendered Kubernetes object, as a generic map.
type object map[string]any

func (o object) kind() string { return str(o["kind"]) }

func (o object) name() string { return str(get(o, "metadata", "name")) }

func (o object) namespace() string { return str(get(o, "metadata", "namespace")) }

func str(v any) string {
	s, _ := v.(string)
	return s
}

// get walks nested maps.
func get(v any, path ...string) any {
	if o, ok := v.(object); ok {
		v = map[string]any(o)
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// render renders with opts and fails the test on error.
func render(t testing.TB, opts Options) *Rendered {
	t.Helper()
	r, err := Render(context.Background(), opts)
	if err != nil {
		t.Fatalf("Render(%+v): %v", opts, err)
	}
	return r
}

// objects splits a manifest into objects.
func objects(t testing.TB, manifest string) []object {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []object
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("the manifest does not parse: %v", err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// find returns the object of kind and name, failing the test if it is missing.
func find(t testing.TB, objs []object, kind, name string) object {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("no %s %q in the render", kind, name)
	return nil
}

func has(objs []object, kind, name string) bool {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return true
		}
	}
	return false
}

// config returns the data of the cilium-config ConfigMap.
func config(t testing.TB, objs []object) map[string]any {
	t.Helper()
	data, _ := get(find(t, objs, "ConfigMap", "cilium-config"), "data").(map[string]any)
	if data == nil {
		t.Fatal("cilium-config has no data")
	}
	return data
}

// containers returns the containers (or init containers) of a workload's pod template.
func containers(o object, init bool) []map[string]any {
	key := "containers"
	if init {
		key = "initContainers"
	}
	list, _ := get(o, "spec", "template", "spec", key).([]any)
	out := make([]map[string]any, 0, len(list))
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func container(t testing.TB, o object, init bool, name string) map[string]any {
	t.Helper()
	for _, c := range containers(o, init) {
		if c["name"] == name {
			return c
		}
	}
	t.Fatalf("%s %s has no container %q", o.kind(), o.name(), name)
	return nil
}

func env(c map[string]any, name string) string {
	list, _ := c["env"].([]any)
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return str(m["value"])
		}
	}
	return ""
}

func strings2(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		out = append(out, str(e))
	}
	return out
}
