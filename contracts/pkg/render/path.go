package render

import (
	"sort"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"go.yaml.in/yaml/v4"
)

// LegacyKind is the document kind of the legacy v1alpha1 document, as the
// field metadata table (contracts/pkg/configmeta) spells it.
const LegacyKind = "v1alpha1"

// Path names one value of a configuration: the document (kind and, for named
// documents, name) and the field inside it. Maps are descended into; lists
// are values of their own (Talos merges and replaces them as a whole or by
// appending, so an element has no stable identity). A map key that is not a
// plain identifier is quoted: labels["node-role.kubernetes.io/control-plane"].
type Path struct {
	// Kind is the document kind (v1alpha1 for the legacy document).
	Kind string `json:"kind"`
	// Name is the document name of a named document.
	Name string `json:"name,omitempty"`
	// Field is the dotted path inside the document; empty for the whole document.
	Field string `json:"field,omitempty"`
}

// String is "Kind:field" or "Kind/name:field".
func (p Path) String() string {
	var b strings.Builder

	b.WriteString(p.Kind)

	if p.Name != "" {
		b.WriteByte('/')
		b.WriteString(p.Name)
	}

	b.WriteByte(':')
	b.WriteString(p.Field)

	return b.String()
}

// MarshalText makes a Path a JSON map key (its String form).
func (p Path) MarshalText() ([]byte, error) {
	return []byte(p.String()), nil
}

// MetaPath is the path in the form contracts/pkg/configmeta.Lookup takes
// ("Kind:field", without the document name).
func (p Path) MetaPath() string {
	if p.Field == "" {
		return p.Kind
	}

	return p.Kind + ":" + p.Field
}

// Values maps each value of a configuration, by path, to its YAML-decoded
// value (a scalar, a list, or an empty map).
type Values map[Path]any

// SortedPaths returns the paths of v in a stable order.
func (v Values) SortedPaths() []Path {
	out := make([]Path, 0, len(v))
	for p := range v {
		out = append(out, p)
	}

	SortPaths(out)

	return out
}

// SortPaths sorts paths by kind, name and field.
func SortPaths(ps []Path) {
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}

		if a.Name != b.Name {
			return a.Name < b.Name
		}

		return a.Field < b.Field
	})
}

// EncodeOptions are the encoder options of every rendered byte: no comments,
// empty values omitted.
func encodeOptions() []encoder.Option {
	return []encoder.Option{encoder.WithComments(encoder.CommentsDisabled), encoder.WithOmitEmpty(true)}
}

// DocumentValues flattens machinery documents into values by path. Each
// document is encoded with machinery's encoder, the same bytes a rendered
// configuration carries.
func DocumentValues(docs []config.Document) (Values, error) {
	out := Values{}

	for _, d := range docs {
		b, err := encoder.NewEncoder(d, encodeOptions()...).Encode()
		if err != nil {
			return nil, err
		}

		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, err
		}

		kind, name := documentID(d)
		flattenDoc(kind, name, m, out)
	}

	return out, nil
}

// ConfigValues loads configuration bytes (a node's, or a render's) with
// machinery's configloader and flattens them.
func ConfigValues(b []byte) (Values, error) {
	c, err := configloader.NewFromBytes(b, configloader.WithNoValidation())
	if err != nil {
		return nil, err
	}

	return DocumentValues(c.Documents())
}

func documentID(d config.Document) (kind, name string) {
	kind = d.Kind()
	if kind == "" {
		kind = LegacyKind
	}

	if n, ok := d.(config.NamedDocument); ok {
		name = n.Name()
	}

	return kind, name
}

// keyName is the key of a named document's name.
const keyName = "name"

// envelope holds the keys that identify a document rather than configure it.
var envelope = map[string]bool{"apiVersion": true, "kind": true, "version": true}

func flattenDoc(kind, name string, m map[string]any, out Values) {
	keys := sortedKeys(m)
	for _, k := range keys {
		if envelope[k] {
			continue
		}

		if k == keyName && name != "" {
			continue
		}

		flatten(Path{Kind: kind, Name: name}, "", k, m[k], out)
	}
}

func flatten(base Path, prefix, key string, v any, out Values) {
	field := joinKey(prefix, key)

	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for _, k := range sortedKeys(m) {
			flatten(base, field, k, m[k], out)
		}

		return
	}

	p := base
	p.Field = field
	out[p] = v
}

func joinKey(prefix, key string) string {
	if plainKey(key) {
		if prefix == "" {
			return key
		}

		return prefix + "." + key
	}

	return prefix + "[" + strconv.Quote(key) + "]"
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}

	for _, r := range k {
		if !plainRune(r) {
			return false
		}
	}

	return true
}

func plainRune(r rune) bool {
	return r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	sort.Strings(keys)

	return keys
}
