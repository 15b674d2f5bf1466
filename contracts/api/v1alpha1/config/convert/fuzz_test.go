package convert_test

import (
	"reflect"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"

	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
)

// FuzzMirrorRoundTrip feeds machinery's config loader arbitrary documents
// (seeded with every kind, filled): each document it decodes converts to its
// mirror, back to machinery, and to a mirror again equal to the first; no
// input panics the conversion. The corpus is in testdata/fuzz.
func FuzzMirrorRoundTrip(f *testing.F) {
	for i, kind := range kindNames() {
		for _, full := range []bool{true, false} {
			doc := emptyDocument(f, kind)
			fl := newFiller(f, uint64(i)+1, kind)
			fl.full = full
			fl.fillDoc(reflect.ValueOf(doc), mirrorTypeOf(f, doc))

			b, err := encoder.NewEncoder(doc, encoder.WithComments(encoder.CommentsDisabled)).Encode()
			if err != nil {
				f.Fatalf("encoding a filled %s: %v", kind, err)
			}

			f.Add(b)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		provider, err := configloader.NewFromBytes(data, configloader.WithNoValidation())
		if err != nil {
			return
		}

		for _, doc := range provider.Documents() {
			m, err := convert.FromMachinery(doc)
			if err != nil {
				t.Fatalf("machinery decoded a %T the mirror does not convert: %v", doc, err)
			}

			back, err := convert.ToMachinery(m)
			if err != nil {
				t.Fatalf("the mirror of a %T does not convert back: %v", doc, err)
			}

			m2, err := convert.FromMachinery(back)
			if err != nil {
				t.Fatalf("FromMachinery (second pass) of a %T: %v", doc, err)
			}

			if !reflect.DeepEqual(m, m2) {
				t.Fatalf("the mirror of a %T is not stable across a round trip:\n%s", doc, diff(reflect.ValueOf(m), reflect.ValueOf(m2)))
			}
		}
	})
}
