package convert_test

import (
	"encoding"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

// The filler writes random values into a machinery document, field by field,
// walking the mirror type alongside: a machinery field the mirror does not
// have is "absent", and must be listed in one of the mirror package's tables
// (SecretFields, SharedSecretFields, DroppedFields); the round-trip tests
// leave absent fields zero and expect every other field back unchanged.

var (
	typeMeta         = reflect.TypeFor[meta.Meta]()
	typeUnstructured = reflect.TypeFor[meta.Unstructured]()
	typeResourceList = reflect.TypeFor[corev1.ResourceList]()
	typeCredProvider = reflect.TypeFor[*kubeletconfigv1.CredentialProviderConfig]()
)

type filler struct {
	t   testing.TB
	rng *rand.Rand
	// full sets every pointer and puts one element in every slice and map,
	// so every path of the document is reached.
	full bool
	// fillAbsent also fills the fields the mirror does not have (for the
	// secret tests, which need Talos's Redact to see every field).
	fillAbsent bool
	kind       string
	// absent collects the document paths of fields absent from the mirror.
	absent map[string]bool
	// strings collects every string and []byte leaf written, by path.
	leaves map[string][]string
}

func newFiller(t testing.TB, seed uint64, kind string) *filler {
	return &filler{
		t:      t,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), //nolint:gosec // test data, not cryptography
		kind:   kind,
		absent: map[string]bool{},
		leaves: map[string][]string{},
	}
}

// yamlField is one YAML-visible field of a machinery struct.
type yamlField struct {
	Index []int
	Name  string
}

// yamlFields lists the YAML-visible fields of a machinery struct, flattening
// inlined embedded structs and leaving meta.Meta (set from the kind) out.
func yamlFields(t reflect.Type) []yamlField {
	var out []yamlField

	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")

		if name == "-" || !f.IsExported() {
			continue
		}

		if f.Anonymous && strings.Contains(opts, "inline") {
			if f.Type == typeMeta {
				continue
			}

			for _, sub := range yamlFields(f.Type) {
				out = append(out, yamlField{Index: append([]int{i}, sub.Index...), Name: sub.Name})
			}

			continue
		}

		if name == "" {
			name = strings.ToLower(f.Name)
		}

		out = append(out, yamlField{Index: []int{i}, Name: name})
	}

	return out
}

// jsonField finds a field of a mirror struct by its JSON name.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name {
			return f.Type, true
		}
	}

	return nil, false
}

func joinPath(path, seg string) string {
	if path == "" {
		return seg
	}

	return path + "." + seg
}

// fillDoc fills a machinery document whose mirror type is mt.
func (f *filler) fillDoc(doc reflect.Value, mt reflect.Type) {
	f.fillStruct(doc.Elem(), mt, "")
}

func (f *filler) fillStruct(v reflect.Value, mt reflect.Type, path string) {
	for _, yf := range yamlFields(v.Type()) {
		p := joinPath(path, yf.Name)

		// The legacy document's version is set by the conversion, like apiVersion and kind.
		if f.kind == "v1alpha1" && p == "version" {
			continue
		}

		var fmt reflect.Type

		if mt != nil {
			var ok bool

			fmt, ok = jsonField(mt, yf.Name)
			if !ok {
				f.absent[f.kind+":"+p] = true

				if !f.fillAbsent {
					continue
				}
			}
		}

		f.fill(v.FieldByIndex(yf.Index), fmt, p)
	}
}

func elemOf(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}

	return t.Elem()
}

func (f *filler) pick(n int) int { return f.rng.IntN(n) }

func (f *filler) str(path string) string {
	s := fmt.Sprintf("v%d-%x", f.pick(1000), f.rng.Uint64())
	f.leaves[path] = append(f.leaves[path], s)

	return s
}

// fill writes a random value into v; mt is the mirror type (nil for absent fields).
//
//nolint:gocyclo,cyclop // one case per kind of Go type
func (f *filler) fill(v reflect.Value, mt reflect.Type, path string) {
	if gen, ok := f.special(v.Type(), mt, path); ok {
		gen(v)

		return
	}

	switch v.Kind() {
	case reflect.Pointer:
		if !f.full && f.pick(3) == 0 {
			return
		}

		v.Set(reflect.New(v.Type().Elem()))

		mtElem := mt
		if mt != nil && mt.Kind() == reflect.Pointer {
			mtElem = mt.Elem()
		}

		f.fill(v.Elem(), mtElem, path)
	case reflect.Struct:
		if v.Type() == typeUnstructured {
			f.fillUnstructured(v, path)

			return
		}

		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				f.t.Fatalf("%s:%s: %s has unexported fields and the filler has no generator for it", f.kind, path, v.Type())
			}
		}

		f.fillStruct(v, mt, path)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if !f.full && f.pick(3) == 0 {
				return
			}

			b := []byte(f.str(path))
			f.leaves[path] = append(f.leaves[path], string(b))
			v.Set(reflect.ValueOf(b).Convert(v.Type()))

			return
		}

		n := 1
		if !f.full {
			n = f.pick(4) - 1 // -1 leaves the slice nil, 0 makes it empty
		}

		if n < 0 {
			return
		}

		v.Set(reflect.MakeSlice(v.Type(), n, n))

		for i := range n {
			f.fill(v.Index(i), elemOf(mt), path+"[]")
		}
	case reflect.Map:
		n := 1
		if !f.full {
			n = f.pick(4) - 1
		}

		if n < 0 {
			return
		}

		v.Set(reflect.MakeMapWithSize(v.Type(), n))

		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			k.SetString(fmt.Sprintf("key-%x", f.rng.Uint32()))

			e := reflect.New(v.Type().Elem()).Elem()
			f.fill(e, elemOf(mt), path+"{*}")
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		if !f.full && f.pick(4) == 0 {
			return
		}

		v.SetString(f.str(path))
	case reflect.Bool:
		v.SetBool(f.full || f.pick(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := v.Type().Bits()
		v.SetInt(f.rng.Int64N(int64(1)<<(bits-2)) - int64(1)<<(bits-3))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := v.Type().Bits()
		if bits == 64 {
			v.SetUint(f.rng.Uint64())
		} else {
			v.SetUint(f.rng.Uint64N(uint64(1) << bits))
		}
	default:
		f.t.Fatalf("%s:%s: the filler cannot fill a %s", f.kind, path, v.Type())
	}
}

func (f *filler) fillUnstructured(v reflect.Value, path string) {
	// An absent free-form field: something Redact can find secrets in.
	obj := map[string]any{
		"secret": f.str(path),
		"resources": []any{map[string]any{
			"providers": []any{map[string]any{"aescbc": map[string]any{"keys": []any{map[string]any{"name": "k", "secret": f.str(path)}}}}},
		}},
	}

	v.Set(reflect.ValueOf(meta.Unstructured{Object: obj}))
}

// special returns a generator for the types the mirror substitutes.
//
//nolint:gocyclo,cyclop // one case per substituted type
func (f *filler) special(t, mt reflect.Type, path string) (func(reflect.Value), bool) {
	set := func(x any) func(reflect.Value) {
		return func(v reflect.Value) { v.Set(reflect.ValueOf(x)) }
	}

	text := func(s string) func(reflect.Value) {
		return func(v reflect.Value) {
			u, ok := v.Addr().Interface().(encoding.TextUnmarshaler)
			if !ok {
				f.t.Fatalf("%s:%s: %s is not a TextUnmarshaler", f.kind, path, t)
			}

			if err := u.UnmarshalText([]byte(s)); err != nil {
				f.t.Fatalf("%s:%s: %s rejects %q: %v", f.kind, path, t, s, err)
			}
		}
	}

	maybe := func(gen func(reflect.Value)) (func(reflect.Value), bool) {
		if !f.full && f.pick(4) == 0 {
			return func(reflect.Value) {}, true
		}

		return gen, true
	}

	ip4 := func() string { return fmt.Sprintf("10.%d.%d.%d", f.pick(256), f.pick(256), f.pick(256)) }

	switch t {
	case reflect.TypeFor[cel.Expression]():
		return maybe(text(fmt.Sprintf("disk.size > %du * GiB", f.pick(1000))))
	case reflect.TypeFor[block.ByteSize]():
		forms := []string{strconv.Itoa(f.pick(1 << 30)), fmt.Sprintf("%dMiB", f.pick(4096)), fmt.Sprintf("%d GB", f.pick(100))}

		return maybe(text(forms[f.pick(len(forms))]))
	case reflect.TypeFor[block.Size]():
		forms := []string{fmt.Sprintf("%d%%", f.pick(100)), fmt.Sprintf("%dGiB", 1+f.pick(100))}

		return maybe(text(forms[f.pick(len(forms))]))
	case reflect.TypeFor[meta.Addr](), reflect.TypeFor[netip.Addr]():
		return maybe(text(ip4()))
	case reflect.TypeFor[meta.AddrPort](), reflect.TypeFor[netip.AddrPort]():
		return maybe(text(fmt.Sprintf("%s:%d", ip4(), 1+f.pick(65535))))
	case reflect.TypeFor[meta.Prefix](), reflect.TypeFor[netip.Prefix]():
		return maybe(text(fmt.Sprintf("fd00:%x::/64", f.pick(65536))))
	case reflect.TypeFor[time.Duration]():
		return set(time.Duration(f.rng.Int64N(int64(100 * time.Hour)))), true
	case reflect.TypeFor[network.PortRange]():
		lo := uint16(1 + f.pick(60000)) //nolint:gosec // bounded by pick's argument
		hi := lo + uint16(f.pick(3))    //nolint:gosec // bounded by pick's argument

		return set(network.PortRange{Lo: lo, Hi: hi}), true
	case reflect.TypeFor[meta.URL](), reflect.TypeFor[v1alpha1.Endpoint]():
		u, err := url.Parse(fmt.Sprintf("https://host-%d.example.org:%d/p%d", f.pick(100), 1+f.pick(65535), f.pick(10)))
		if err != nil {
			f.t.Fatal(err)
		}

		if t == reflect.TypeFor[meta.URL]() {
			return maybe(set(meta.URL{URL: u}))
		}

		return maybe(set(v1alpha1.Endpoint{URL: u}))
	case reflect.TypeFor[v1alpha1.InstallDiskSizeMatcher]():
		ops := []string{">= ", "<= ", "> ", "< ", "", "=="}
		cond := fmt.Sprintf("%s%dGB", ops[f.pick(len(ops))], 1+f.pick(1000))

		return maybe(func(v reflect.Value) {
			m := v.Addr().Interface().(*v1alpha1.InstallDiskSizeMatcher) //nolint:forcetypeassert // the case above checked the type
			if err := m.UnmarshalYAML(func(x any) error {
				*(x.(*string)) = cond //nolint:forcetypeassert // UnmarshalYAML asks for a string

				return nil
			}); err != nil {
				f.t.Fatal(err)
			}
		})
	case reflect.TypeFor[meta.ArgValue]():
		if f.pick(2) == 0 {
			return set(meta.NewArgValue(f.str(path), nil)), true
		}

		return set(meta.NewArgValue("", []string{f.str(path), f.str(path)})), true
	case reflect.TypeFor[nethelpers.HardwareAddr]():
		mac := nethelpers.HardwareAddr{0x02, 0, 0, 0, 0, 1}
		for i := 1; i < len(mac); i++ {
			mac[i] = byte(f.rng.UintN(256)) //nolint:gosec // bounded by UintN's argument
		}

		return maybe(set(mac))
	case typeUnstructured:
		switch mt {
		case typeResourceList:
			// Quantities travel in their canonical form (1000m becomes 1,
			// 1024Mi becomes 1Gi: the same quantity, see TestQuantitiesAreCanonicalized).
			cpu := resource.MustParse(fmt.Sprintf("%dm", 1+f.pick(4000)))
			memory := resource.MustParse(fmt.Sprintf("%dMi", 1+f.pick(8192)))

			return maybe(set(meta.Unstructured{Object: map[string]any{"cpu": cpu.String(), "memory": memory.String()}}))
		case typeCredProvider:
			return maybe(func(v reflect.Value) { v.Set(reflect.ValueOf(f.credentialProvider())) })
		}

		return nil, false
	}

	if _, ok := reflect.New(t).Interface().(encoding.TextUnmarshaler); ok && t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 {
		return f.enum(t, path), true
	}

	return nil, false
}

var enumCache sync.Map // reflect.Type → []reflect.Value

// enum picks a value of a machinery enum that survives MarshalText/UnmarshalText.
func (f *filler) enum(t reflect.Type, path string) func(reflect.Value) {
	if cached, ok := enumCache.Load(t); ok {
		valid := cached.([]reflect.Value) //nolint:forcetypeassert // only this function stores

		choice := valid[f.pick(len(valid))]

		return func(v reflect.Value) { v.Set(choice) }
	}

	var valid []reflect.Value

	limit := 1 << 16
	if t.Bits() < 16 {
		limit = 1 << t.Bits()
	}

	for i := range limit {
		v := reflect.New(t).Elem()
		if t.Kind() >= reflect.Uint {
			v.SetUint(uint64(i))
		} else {
			v.SetInt(int64(i))
		}

		m, ok := v.Interface().(encoding.TextMarshaler)
		if !ok {
			continue
		}

		text, err := m.MarshalText()
		if err != nil {
			continue
		}

		back := reflect.New(t)
		if err := back.Interface().(encoding.TextUnmarshaler).UnmarshalText(text); err != nil || !back.Elem().Equal(v) { //nolint:forcetypeassert // checked by the caller
			continue
		}

		valid = append(valid, v)
	}

	if len(valid) == 0 {
		f.t.Fatalf("%s:%s: no value of %s survives its text form", f.kind, path, t)
	}

	enumCache.Store(t, valid)

	choice := valid[f.pick(len(valid))]

	return func(v reflect.Value) { v.Set(choice) }
}

func (f *filler) credentialProvider() meta.Unstructured {
	cfg := kubeletconfigv1.CredentialProviderConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1", Kind: "CredentialProviderConfig"},
		Providers: []kubeletconfigv1.CredentialProvider{{
			Name:                 fmt.Sprintf("provider-%d", f.pick(100)),
			MatchImages:          []string{fmt.Sprintf("*.registry-%d.example", f.pick(100))},
			DefaultCacheDuration: &metav1.Duration{Duration: time.Duration(1+f.pick(60)) * time.Minute},
			APIVersion:           "credentialprovider.kubelet.k8s.io/v1",
			Args:                 []string{"--flag", f.str("credentialProvider")},
			Env:                  []kubeletconfigv1.ExecEnvVar{{Name: "A", Value: f.str("credentialProvider")}},
		}},
	}

	b, err := json.Marshal(cfg)
	if err != nil {
		f.t.Fatal(err)
	}

	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		f.t.Fatal(err)
	}

	return meta.Unstructured{Object: obj}
}

// mirrorTypes maps every kind to its mirror type, through the conversion of an
// empty machinery document, which also proves FromMachinery knows the kind.
func emptyDocument(t testing.TB, kind string) talosconfig.Document {
	t.Helper()

	src := "apiVersion: v1alpha1\nkind: " + kind + "\n"
	if kind == "v1alpha1" {
		// The legacy document is recognised by its top-level keys.
		src = "version: v1alpha1\ndebug: false\n"
	}

	provider, err := configloader.NewFromBytes([]byte(src), configloader.WithNoValidation())
	if err != nil {
		t.Fatalf("machinery does not decode kind %s: %v", kind, err)
	}

	docs := provider.Documents()
	if len(docs) != 1 {
		t.Fatalf("kind %s: %d documents", kind, len(docs))
	}

	return docs[0]
}

// mirrorTypeOf returns the mirror type registered for a kind in mirror.Kinds.
func mirrorTypeOf(t testing.TB, doc talosconfig.Document) reflect.Type {
	t.Helper()

	m, err := convertFrom(doc)
	if err != nil {
		t.Fatalf("FromMachinery(%T): %v", doc, err)
	}

	return reflect.TypeOf(m).Elem()
}

func kindNames() []string {
	out := make([]string, 0, len(mirror.Kinds))
	for _, k := range mirror.Kinds {
		out = append(out, k.Kind)
	}

	return out
}
