package convert

import (
	"errors"
	"fmt"
	"reflect"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

// PatchDocumentToMachinery converts the one document a PatchDocument holds.
func PatchDocumentToMachinery(d *mirror.PatchDocument) (talosconfig.Document, error) {
	if d == nil {
		return nil, errors.New("no document")
	}

	set := 0

	v := reflect.ValueOf(d).Elem()
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			set++
		}
	}

	if set != 1 {
		return nil, fmt.Errorf("a patch document holds exactly one kind, this one holds %d", set)
	}

	kind, doc, _ := d.Document()

	out, err := ToMachinery(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}

	return out, nil
}

// PatchDocumentFromMachinery wraps a machinery document in a PatchDocument;
// it fails for a kind outside the allow-list, naming the kind.
func PatchDocumentFromMachinery(doc talosconfig.Document) (*mirror.PatchDocument, error) {
	m, err := FromMachinery(doc)
	if err != nil {
		return nil, err
	}

	var d mirror.PatchDocument
	if !d.SetDocument(m) {
		return nil, fmt.Errorf("document kind %q may not be carried by a TalosConfigPatch (see contracts/pkg/configpatch)", doc.Kind())
	}

	return &d, nil
}
