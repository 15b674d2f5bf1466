package convert_test

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"go.yaml.in/yaml/v4"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
)

const expectedKinds = 90 // machinery v1.14.1 registers 90 document kinds (talos-api.md §4)

func convertFrom(doc talosconfig.Document) (any, error) { return convert.FromMachinery(doc) }

// listedAbsent is every document path the mirror package says it leaves out.
func listedAbsent() map[string]string {
	out := map[string]string{}
	for _, p := range mirror.SecretFields {
		out[p] = "secret"
	}

	for _, p := range mirror.SharedSecretFields {
		out[p] = "secret (shared Go field)"
	}

	for p, reason := range mirror.DroppedFields {
		out[p] = reason
	}

	return out
}

func TestEveryRegisteredKindIsMirrored(t *testing.T) {
	t.Parallel()

	if len(mirror.Kinds) != expectedKinds {
		t.Errorf("mirrored %d kinds, machinery v1.14.1 registers %d", len(mirror.Kinds), expectedKinds)
	}

	seenTypes := map[reflect.Type]string{}

	for _, k := range mirror.Kinds {
		doc := emptyDocument(t, k.Kind)
		mt := mirrorTypeOf(t, doc)

		if mt.Name() != k.Type {
			t.Errorf("kind %s: FromMachinery returns %s, the table says %s", k.Kind, mt.Name(), k.Type)
		}

		if other, dup := seenTypes[mt]; dup {
			t.Errorf("kinds %s and %s share the mirror type %s", k.Kind, other, mt)
		}

		seenTypes[mt] = k.Kind
	}

	// An unknown kind is refused by machinery and by the dispatcher alike.
	if _, err := convert.ToMachinery(&struct{}{}); err == nil {
		t.Error("ToMachinery accepted a type that is not a mirror document")
	}
}

// roundTrip converts doc to its mirror and back, and checks the mirror is a
// fixed point too.
func roundTrip(t *testing.T, doc talosconfig.Document) talosconfig.Document {
	t.Helper()

	m, err := convert.FromMachinery(doc)
	if err != nil {
		t.Fatalf("FromMachinery: %v", err)
	}

	back, err := convert.ToMachinery(m)
	if err != nil {
		t.Fatalf("ToMachinery: %v", err)
	}

	m2, err := convert.FromMachinery(back)
	if err != nil {
		t.Fatalf("FromMachinery (second pass): %v", err)
	}

	if !reflect.DeepEqual(m, m2) {
		t.Errorf("the mirror is not stable across a round trip:\n%s", diff(reflect.ValueOf(m), reflect.ValueOf(m2)))
	}

	return back
}

// TestRoundTripRandom fills every kind with random values (one run that
// reaches every field, then random shapes) and expects machinery → mirror →
// machinery to give back the same document.
func TestRoundTripRandom(t *testing.T) {
	t.Parallel()

	const runs = 40

	listed := listedAbsent()

	for _, kind := range kindNames() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()

			mt := mirrorTypeOf(t, emptyDocument(t, kind))

			for run := range runs {
				doc := emptyDocument(t, kind)
				f := newFiller(t, uint64(run)+1, kind)
				f.full = run == 0
				f.fillDoc(reflect.ValueOf(doc), mt)

				for p := range f.absent {
					if _, ok := listed[p]; !ok {
						t.Fatalf("field %s is absent from the mirror but listed in no table", p)
					}
				}

				want := doc.Clone()
				back := roundTrip(t, doc)

				if !reflect.DeepEqual(want, back) {
					t.Fatalf("run %d: the document changed across the round trip:\n%s", run, diff(reflect.ValueOf(want), reflect.ValueOf(back)))
				}
			}
		})
	}
}

// TestEveryListedAbsenceIsReal checks the tables do not list fields the
// mirror has after all, and that every listed path exists in machinery.
func TestEveryListedAbsenceIsReal(t *testing.T) {
	t.Parallel()

	absent := map[string]bool{}

	for _, kind := range kindNames() {
		doc := emptyDocument(t, kind)
		f := newFiller(t, 1, kind)
		f.full = true
		f.fillDoc(reflect.ValueOf(doc), mirrorTypeOf(t, doc))

		for p := range f.absent {
			absent[p] = true
		}
	}

	var missing []string

	for p := range listedAbsent() {
		if !absent[p] {
			missing = append(missing, p)
		}
	}

	sort.Strings(missing)

	if len(missing) > 0 {
		t.Errorf("listed as absent, but the mirror has them or machinery does not: %v", missing)
	}
}

// diff describes the first differences between two values.
func diff(a, b reflect.Value) string {
	var out []string

	diffInto(a, b, "", &out)

	if len(out) > 10 {
		out = append(out[:10], "…")
	}

	return strings.Join(out, "\n")
}

//nolint:gocyclo,cyclop // one case per kind of Go type
func diffInto(a, b reflect.Value, path string, out *[]string) {
	if len(*out) > 10 {
		return
	}

	if !a.IsValid() || !b.IsValid() {
		if a.IsValid() != b.IsValid() {
			*out = append(*out, path+": one side is missing")
		}

		return
	}

	if a.Type() != b.Type() {
		*out = append(*out, path+": types differ "+a.Type().String()+" vs "+b.Type().String())

		return
	}

	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				*out = append(*out, path+": nil on one side")
			}

			return
		}

		diffInto(a.Elem(), b.Elem(), path, out)
	case reflect.Struct:
		for i := range a.NumField() {
			if !a.Type().Field(i).IsExported() {
				if a.CanInterface() && !reflect.DeepEqual(a.Interface(), b.Interface()) {
					*out = append(*out, path+": values of "+a.Type().String()+" differ")
				}

				return
			}
		}

		for i := range a.NumField() {
			diffInto(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, out)
		}
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			*out = append(*out, path+": slice nil/len differs")

			return
		}

		for i := range a.Len() {
			diffInto(a.Index(i), b.Index(i), path+"[]", out)
		}
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			*out = append(*out, path+": map nil/len differs")

			return
		}

		keys := a.MapKeys()
		slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })

		for _, k := range keys {
			diffInto(a.MapIndex(k), b.MapIndex(k), path+"{"+k.String()+"}", out)
		}
	default:
		if !a.CanInterface() || !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path+": values differ")
		}
	}
}

// TestUint32RangeIsChecked: uint32 fields are int64 in the mirror (so the
// CRD can bound them to 0..2^32-1); a value outside that range is refused,
// never truncated.
func TestUint32RangeIsChecked(t *testing.T) {
	t.Parallel()

	for _, v := range []int64{-1, 1 << 32} {
		if _, err := convert.ToMachinery(&mirror.RoutingRuleConfig{FwMark: v}); err == nil {
			t.Errorf("fwMark %d was accepted", v)
		}
	}

	doc, err := convert.ToMachinery(&mirror.RoutingRuleConfig{FwMark: 1<<32 - 1})
	if err != nil {
		t.Fatal(err)
	}

	back, err := convert.FromMachinery(doc)
	if err != nil {
		t.Fatal(err)
	}

	if got := back.(*mirror.RoutingRuleConfig).FwMark; got != 1<<32-1 { //nolint:forcetypeassert // FromMachinery returns the kind's mirror type
		t.Errorf("fwMark came back as %d", got)
	}
}

// TestConversionErrorsNameTheFieldNotTheValue: a value machinery cannot
// parse is refused with the mirror field's name and without the value.
func TestConversionErrorsNameTheFieldNotTheValue(t *testing.T) {
	t.Parallel()

	const bad = "not-an-address-s3cr3t"

	_, err := convert.ToMachinery(&mirror.LinkConfig{Name: "eth0", Addresses: []mirror.AddressConfig{{Address: bad}}})
	if err == nil {
		t.Fatal("an invalid address was accepted")
	}

	if !strings.Contains(err.Error(), "AddressConfig.address") {
		t.Errorf("the error does not name the field: %v", err)
	}

	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("the error quotes the value: %v", err)
	}
}

// TestToMachinerySetsTheKind: a mirror document carries no apiVersion, kind
// or (legacy) version; the conversion sets them, so machinery encodes the
// document under its kind.
func TestToMachinerySetsTheKind(t *testing.T) {
	t.Parallel()

	for _, k := range mirror.Kinds {
		m, ok := mirror.New(k.Kind)
		if !ok {
			t.Fatalf("mirror.New(%q) failed", k.Kind)
		}

		doc, err := convert.ToMachinery(m)
		if err != nil {
			t.Fatalf("%s: %v", k.Kind, err)
		}

		b, err := encoder.NewEncoder(doc, encoder.WithComments(encoder.CommentsDisabled)).Encode()
		if err != nil {
			t.Fatalf("%s: %v", k.Kind, err)
		}

		var header map[string]any
		if err := yaml.Unmarshal(b, &header); err != nil {
			t.Fatalf("%s: %v", k.Kind, err)
		}

		if k.Kind == "v1alpha1" {
			if header["version"] != "v1alpha1" {
				t.Errorf("legacy document: version %v, want v1alpha1", header["version"])
			}

			continue
		}

		if header["kind"] != k.Kind || header["apiVersion"] != "v1alpha1" {
			t.Errorf("%s: encoded as apiVersion %v kind %v", k.Kind, header["apiVersion"], header["kind"])
		}
	}
}

// TestQuantitiesAreCanonicalized: a resource list travels as Kubernetes
// quantities, so a non-canonical spelling comes back canonical, with the same value.
func TestQuantitiesAreCanonicalized(t *testing.T) {
	t.Parallel()

	doc := emptyDocument(t, "KubeAPIServerConfig").(*k8s.KubeAPIServerConfigV1Alpha1) //nolint:forcetypeassert // the kind's machinery type
	doc.PodResources.Requests = meta.Unstructured{Object: map[string]any{"cpu": "1000m", "memory": "1024Mi", "ephemeral-storage": 2048}}

	m, err := convert.FromMachinery(doc)
	if err != nil {
		t.Fatal(err)
	}

	q := m.(*mirror.KubeAPIServerConfig).Resources.Requests["cpu"] //nolint:forcetypeassert // the kind's mirror type
	if q.MilliValue() != 1000 {
		t.Errorf("cpu is %v in the mirror, want 1000m", q.String())
	}

	out, err := convert.ToMachinery(m)
	if err != nil {
		t.Fatal(err)
	}

	back := out.(*k8s.KubeAPIServerConfigV1Alpha1) //nolint:forcetypeassert // the kind's machinery type

	want := map[string]any{"cpu": "1", "memory": "1Gi", "ephemeral-storage": "2048"}
	if !reflect.DeepEqual(back.PodResources.Requests.Object, want) {
		t.Errorf("requests came back as %v, want %v", back.PodResources.Requests.Object, want)
	}
}
