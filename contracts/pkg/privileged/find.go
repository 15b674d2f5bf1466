package privileged

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

// Finding is one privileged document or field a TalosConfigPatch carries.
type Finding struct {
	// Entry is the table's entry that makes it privileged.
	Entry
	// Location is where it is in the TalosConfigPatch, for example
	// spec.documents[1].kubeletConfig.image.
	Location string
}

// String is "KubeletConfig:image at spec.documents[1].kubeletConfig.image".
func (f Finding) String() string {
	return f.Path + " at " + f.Location
}

// InDocument returns the entries of the table that a mirror document of
// kind sets: the kind itself when it is listed, and each listed field that
// is present. A field counts when the document's JSON form has it (the
// mirror types omit empty values), whatever its value.
func InDocument(kind string, doc any) []Entry {
	var out []Entry
	var obj map[string]any
	for _, e := range table {
		if e.Kind() != kind {
			continue
		}
		if e.Field() == "" {
			out = append(out, e)
			continue
		}
		if obj == nil {
			obj = asObject(doc)
		}
		if has(obj, strings.Split(e.Field(), ".")) {
			out = append(out, e)
		}
	}
	return out
}

// asObject is the JSON form of a mirror document; an empty object when it
// has none.
func asObject(doc any) map[string]any {
	obj := map[string]any{}
	b, err := json.Marshal(doc)
	if err != nil {
		return obj
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return map[string]any{} // not a JSON object: no fields
	}
	return obj
}

func has(obj map[string]any, path []string) bool {
	v, ok := obj[path[0]]
	if !ok || v == nil {
		return false
	}
	if len(path) == 1 {
		return true
	}
	next, ok := v.(map[string]any)
	return ok && has(next, path[1:])
}

// patchDocument is one document a PatchDocument holds.
type patchDocument struct {
	kind, key string
	doc       any
}

// kindOfType maps a mirror type's name to the document kind it mirrors.
var kindOfType = func() map[string]string {
	m := make(map[string]string, len(mirror.Kinds))
	for _, k := range mirror.Kinds {
		m[k.Type] = k.Kind
	}
	return m
}()

// documentsOf returns every document d holds. The CRD schema lets a
// PatchDocument hold exactly one; every set field is read all the same, so
// nothing is missed whatever the object went through.
func documentsOf(d *mirror.PatchDocument) []patchDocument {
	var out []patchDocument
	v := reflect.ValueOf(d).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Pointer || f.IsNil() {
			continue
		}
		sf := v.Type().Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		kind, ok := kindOfType[f.Elem().Type().Name()]
		if !ok {
			kind = f.Elem().Type().Name()
		}
		out = append(out, patchDocument{kind: kind, key: key, doc: f.Interface()})
	}
	return out
}

// InDocuments returns the privileged documents and fields of a patch's
// spec.documents, in order.
func InDocuments(docs []mirror.PatchDocument) []Finding {
	var out []Finding
	for i := range docs {
		for _, pd := range documentsOf(&docs[i]) {
			base := fmt.Sprintf("spec.documents[%d].%s", i, pd.key)
			for _, e := range InDocument(pd.kind, pd.doc) {
				loc := base
				if e.Field() != "" {
					loc += "." + e.Field()
				}
				out = append(out, Finding{Entry: e, Location: loc})
			}
		}
	}
	return out
}

// InPatch returns the privileged documents and fields p carries; nil when it
// carries none.
func InPatch(p *ichorv1alpha1.TalosConfigPatch) []Finding {
	if p == nil {
		return nil
	}
	return InDocuments(p.Spec.Documents)
}

// Patch is a TalosConfigPatch that carries privileged configuration.
type Patch struct {
	// Name is the TalosConfigPatch's name.
	Name string `json:"name"`
	// Paths are the table's paths it sets, sorted and without repeats.
	Paths []string `json:"paths"`
}

// Paths returns the table's paths of findings, sorted and without repeats.
func Paths(findings []Finding) []string {
	out := make([]string, 0, len(findings))
	for _, f := range findings {
		out = append(out, f.Path)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// OfCluster returns the patches of cluster that carry privileged
// configuration, by name. patches may hold other clusters' patches; they
// are left out.
func OfCluster(cluster string, patches []ichorv1alpha1.TalosConfigPatch) []Patch {
	var out []Patch
	for i := range patches {
		p := &patches[i]
		if p.Spec.ClusterName != cluster {
			continue
		}
		if f := InPatch(p); len(f) > 0 {
			out = append(out, Patch{Name: p.Name, Paths: Paths(f)})
		}
	}
	slices.SortFunc(out, func(a, b Patch) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Describe names the findings for a message: "KubeletConfig:image at
// spec.documents[1].kubeletConfig.image (it chooses the image …), …".
func Describe(findings []Finding) string {
	parts := make([]string, 0, len(findings))
	for _, f := range findings {
		parts = append(parts, fmt.Sprintf("%s (%s)", f, f.Reason))
	}
	return strings.Join(parts, ", ")
}
