// Command formschemagen writes the schema the web console generates its
// TalosConfigPatch forms from (webapp/src/api/configschema.json): for each
// document kind of the allow-list, the typed schema of the CRD's
// spec.documents (so a form can only write what the API server accepts, and
// secret fields, which the mirror drops, are never offered), annotated with
// what the types cannot carry: the valid values machinery documents for a
// field (its encoder.Doc Values), how a change reaches a node (plan.Classify
// over the configmeta table: NoReboot, InstallOnly, APIServerRestart,
// RebootRequired), the Talos version that introduced the kind, and whether
// the document or field is privileged (contracts/pkg/privileged, with the
// reason). Annotations are written only where they differ from the parent's.
// The output depends only on its inputs, so `go tool task verify` checks the
// committed file for drift.
//
//	go run ./cmd/formschemagen -crd ../kustomize/base/crd/ichor.maesh.dev_talosconfigpatches.yaml -out ../webapp/src/api/configschema.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
	"github.com/maeshinshin/ichor/contracts/pkg/configmeta"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Node is the schema of one field.
type Node struct {
	// Type is string, integer, number, boolean, object, array, map or intOrString.
	Type string   `json:"type"`
	Doc  string   `json:"doc,omitempty"`
	Enum []string `json:"enum,omitempty"`
	// Keys are the documented keys of a map (suggestions; other keys are allowed).
	Keys     []string         `json:"keys,omitempty"`
	Default  json.RawMessage  `json:"default,omitempty"`
	Format   string           `json:"format,omitempty"`
	Min      *float64         `json:"min,omitempty"`
	Max      *float64         `json:"max,omitempty"`
	Pattern  string           `json:"pattern,omitempty"`
	Required []string         `json:"required,omitempty"`
	MaxProps *int64           `json:"maxProps,omitempty"`
	Props    map[string]*Node `json:"props,omitempty"`
	Items    *Node            `json:"items,omitempty"`
	Values   *Node            `json:"values,omitempty"`
	// Class is how a change of the field reaches a node, where it differs from the parent's.
	Class string `json:"class,omitempty"`
	// Privileged is the reason the field is privileged, where the parent is not.
	Privileged string `json:"privileged,omitempty"`
}

// Kind is one document kind of the allow-list.
type Kind struct {
	// Kind is the Talos document kind.
	Kind string `json:"kind"`
	// Key is the field of spec.documents[] that holds it.
	Key string `json:"key"`
	// Since is the Talos version that introduced it.
	Since  string `json:"since,omitempty"`
	Schema *Node  `json:"schema"`
}

// Schema is the file.
type Schema struct {
	Kinds []Kind `json:"kinds"`
	// SecretFields are the secret paths the mirror drops (config.SecretFields):
	// the console's tests check that no form offers one.
	SecretFields []string `json:"secretFields"`
}

func main() {
	crd := flag.String("crd", "", "The TalosConfigPatch CRD.")
	out := flag.String("out", "", "The JSON file to write.")
	flag.Parse()
	if *crd == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "formschemagen: -crd and -out are required")
		os.Exit(2)
	}
	b, err := generate(*crd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "formschemagen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil { //nolint:gosec // a committed source file
		fmt.Fprintln(os.Stderr, "formschemagen:", err)
		os.Exit(1)
	}
}

func generate(crdPath string) ([]byte, error) {
	data, err := os.ReadFile(crdPath)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("%s: %w", crdPath, err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		return nil, errors.New("the CRD must have one version with a schema")
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	docs, ok := spec.Properties["documents"]
	if !ok || docs.Items == nil || docs.Items.Schema == nil {
		return nil, errors.New("the CRD has no spec.documents[]")
	}
	props := docs.Items.Schema.Properties

	out := Schema{SecretFields: append([]string(nil), mirror.SecretFields...)}
	t := reflect.TypeFor[mirror.PatchDocument]()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		kind, doc := kindOf(f)
		if kind == "" {
			return nil, fmt.Errorf("PatchDocument.%s is no mirrored kind", f.Name)
		}
		p, ok := props[key]
		if !ok {
			return nil, fmt.Errorf("the CRD has no spec.documents[].%s", key)
		}
		enums := map[string][]string{}
		if md, err := convert.PatchDocumentToMachinery(doc); err == nil {
			machineryValues(reflect.ValueOf(md), kind+":", enums, 0)
		} else {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		kindClass := plan.Classify(render.Path{Kind: kind}).String()
		root := node(&p, kind, "", enums, kindClass, "")
		root.Doc = strings.TrimSpace(strings.TrimPrefix(p.Description, key+" is a Talos "+kind+" document."))
		root.Class = kindClass
		if e, ok := privileged.Lookup(kind); ok {
			root.Privileged = e.Reason
		}
		out.Kinds = append(out.Kinds, Kind{Kind: kind, Key: key, Since: configmeta.Lookup(kind).Since, Schema: root})
	}
	sort.Slice(out.Kinds, func(i, j int) bool { return out.Kinds[i].Kind < out.Kinds[j].Kind })

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// kindOf returns the kind of a PatchDocument field and a PatchDocument that
// holds an empty document of it.
func kindOf(f reflect.StructField) (string, *mirror.PatchDocument) {
	for _, k := range mirror.Kinds {
		if k.Type != f.Type.Elem().Name() {
			continue
		}
		v, ok := mirror.New(k.Kind)
		if !ok {
			return "", nil
		}
		d := &mirror.PatchDocument{}
		if !d.SetDocument(v) {
			return "", nil
		}
		return k.Kind, d
	}
	return "", nil
}

// join extends a document path ("Kind:" + dotted fields, [] for list
// elements, {*} for map values: configmeta's and privileged's form).
func join(prefix, name string) string {
	if strings.HasSuffix(prefix, ":") {
		return prefix + name
	}
	return prefix + "." + name
}

var mirrorsLine = regexp.MustCompile(`^\w+ mirrors \S+ of Talos machinery\.\s*`)

// describe is a field's description without the mirror's bookkeeping: the
// "name: " prefix of a field and the "X mirrors … of Talos machinery." line.
func describe(name, d string) string {
	d = strings.TrimPrefix(d, name+": ")
	d = mirrorsLine.ReplaceAllString(d, "")
	if strings.HasPrefix(d, "Mirrors ") && strings.Contains(d, "(no description upstream)") {
		return ""
	}
	return strings.TrimSpace(d)
}

func node(p *apiextensionsv1.JSONSchemaProps, kind, field string, enums map[string][]string, parentClass, parentPriv string) *Node {
	path := kind + ":" + field
	n := &Node{Type: p.Type, Format: p.Format, Pattern: p.Pattern, Required: p.Required, MaxProps: p.MaxProperties, Min: p.Minimum, Max: p.Maximum}
	if p.Default != nil {
		n.Default = json.RawMessage(p.Default.Raw)
	}
	if p.XIntOrString {
		n.Type = "intOrString"
	}
	if field != "" {
		n.Enum = enums[path]
		if c := plan.Classify(render.Path{Kind: kind, Field: field}).String(); c != parentClass {
			n.Class = c
		}
		parentClass = plan.Classify(render.Path{Kind: kind, Field: field}).String()
		if e, ok := privileged.Lookup(path); ok && e.Reason != parentPriv {
			n.Privileged = e.Reason
			parentPriv = e.Reason
		}
	} else if e, ok := privileged.Lookup(kind); ok {
		parentPriv = e.Reason
	}
	switch {
	case p.Type == "array" && p.Items != nil && p.Items.Schema != nil:
		n.Items = node(p.Items.Schema, kind, field+"[]", enums, parentClass, parentPriv)
		// machinery documents a list's valid values on the list.
		if len(n.Enum) > 0 && len(n.Items.Enum) == 0 && len(n.Items.Props) == 0 {
			n.Items.Enum = n.Enum
		}
		n.Enum = nil
	case p.Type == "object" && len(p.Properties) > 0:
		n.Props = map[string]*Node{}
		for name := range p.Properties {
			child := p.Properties[name]
			f := name
			if field != "" {
				f = field + "." + name
			}
			c := node(&child, kind, f, enums, parentClass, parentPriv)
			c.Doc = describe(name, child.Description)
			n.Props[name] = c
		}
	case p.Type == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil:
		n.Type = "map"
		n.Values = node(p.AdditionalProperties.Schema, kind, field+"{*}", enums, parentClass, parentPriv)
		// machinery documents a map's known keys on the map.
		n.Keys, n.Enum = n.Enum, nil
	case p.Type == "boolean":
		// machinery lists the YAML spellings of a boolean; the form has its own control.
		n.Enum = nil
	}
	return n
}

// documented is a machinery type with its documentation.
type documented interface{ Doc() *encoder.Doc }

// machineryValues collects the valid values machinery documents for each
// field (encoder.Doc.Values), by document path, walking the types of a
// machinery document.
func machineryValues(v reflect.Value, prefix string, out map[string][]string, depth int) {
	if depth > 8 {
		return
	}
	t := v.Type()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	ptr := reflect.New(t)
	var doc *encoder.Doc
	if d, ok := ptr.Interface().(documented); ok {
		doc = d.Doc()
	}
	values := map[string][]string{}
	if doc != nil {
		for _, f := range doc.Fields {
			if len(f.Values) > 0 && f.Name != "" {
				values[f.Name] = f.Values
			}
		}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			if f.Anonymous {
				machineryValues(reflect.New(f.Type).Elem(), prefix, out, depth+1)
			}
			continue
		}
		path := join(prefix, name)
		if vs, ok := values[name]; ok {
			clean := make([]string, 0, len(vs))
			for _, v := range vs {
				clean = append(clean, strings.Trim(v, "`\"'"))
			}
			out[path] = clean
		}
		ft := f.Type
		suffix := ""
		for {
			switch ft.Kind() {
			case reflect.Pointer:
				ft = ft.Elem()
				continue
			case reflect.Slice, reflect.Array:
				ft, suffix = ft.Elem(), suffix+"[]"
				continue
			case reflect.Map:
				ft, suffix = ft.Elem(), suffix+"{*}"
				continue
			}
			break
		}
		if ft.Kind() == reflect.Struct {
			machineryValues(reflect.New(ft).Elem(), path+suffix, out, depth+1)
		}
	}
}
