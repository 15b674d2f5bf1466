package convert_test

import (
	"reflect"
	"testing"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
)

// TestPatchDocumentCarriesExactlyTheAllowedKinds wraps a filled document of
// every kind: allowed kinds round-trip through PatchDocument, the others are refused.
func TestPatchDocumentCarriesExactlyTheAllowedKinds(t *testing.T) {
	t.Parallel()

	if n := reflect.TypeFor[mirror.PatchDocument]().NumField(); n != len(configpatch.Allowed) {
		t.Errorf("PatchDocument has %d fields, the allow-list %d kinds", n, len(configpatch.Allowed))
	}

	for _, kind := range kindNames() {
		doc := emptyDocument(t, kind)
		f := newFiller(t, 3, kind)
		f.full = true
		f.fillDoc(reflect.ValueOf(doc), mirrorTypeOf(t, doc))

		pd, err := convert.PatchDocumentFromMachinery(doc)

		if !configpatch.IsAllowed(kind) {
			if err == nil {
				t.Errorf("%s is not allowed, but PatchDocumentFromMachinery accepted it", kind)
			}

			continue
		}

		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}

		gotKind, _, ok := pd.Document()
		if !ok || gotKind != kind {
			t.Errorf("PatchDocument holds %q, want %q", gotKind, kind)
		}

		back, err := convert.PatchDocumentToMachinery(pd)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}

		if !reflect.DeepEqual(doc, back) {
			t.Errorf("%s changed through PatchDocument:\n%s", kind, diff(reflect.ValueOf(doc), reflect.ValueOf(back)))
		}
	}
}

func TestPatchDocumentRefusesZeroOrTwoKinds(t *testing.T) {
	t.Parallel()

	if _, err := convert.PatchDocumentToMachinery(&mirror.PatchDocument{}); err == nil {
		t.Error("an empty patch document was accepted")
	}

	two := &mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{}, KubeletConfig: &mirror.KubeletConfig{}}
	if _, err := convert.PatchDocumentToMachinery(two); err == nil {
		t.Error("a patch document with two kinds was accepted")
	}

	one := &mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"net.ipv4.ip_forward": "1"}}}

	doc, err := convert.PatchDocumentToMachinery(one)
	if err != nil {
		t.Fatal(err)
	}

	if doc.Kind() != "SysctlConfig" {
		t.Errorf("kind %q, want SysctlConfig", doc.Kind())
	}
}
