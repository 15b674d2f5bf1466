package convert_test

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
)

const expectedSecretFields = 38 // Talos's Redact in machinery v1.14.1 (talos-api.md §4)

// redactedPaths fills every field of every kind (those the mirror leaves out
// too), lets Talos's own Redact replace its secrets, and returns the document
// paths that changed: Talos's definition of secret material.
func redactedPaths(t *testing.T) map[string]bool {
	t.Helper()

	found := map[string]bool{}

	for _, kind := range kindNames() {
		doc := emptyDocument(t, kind)
		f := newFiller(t, 7, kind)
		f.full = true
		f.fillAbsent = true
		f.fillDoc(reflect.ValueOf(doc), mirrorTypeOf(t, doc))

		redacted := doc.Clone()

		sd, ok := redacted.(talosconfig.SecretDocument)
		if !ok {
			continue
		}

		sd.Redact("**redacted**")
		changed(reflect.ValueOf(doc).Elem(), reflect.ValueOf(redacted).Elem(), kind, "", found)
	}

	return found
}

// changed records the YAML paths at which a and b differ.
func changed(a, b reflect.Value, kind, path string, found map[string]bool) {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				found[kind+":"+path] = true
			}

			return
		}

		changed(a.Elem(), b.Elem(), kind, path, found)
	case reflect.Struct:
		if a.Type() == typeUnstructured || !allExported(a.Type()) {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				found[kind+":"+path] = true
			}

			return
		}

		for _, yf := range yamlFields(a.Type()) {
			changed(a.FieldByIndex(yf.Index), b.FieldByIndex(yf.Index), kind, joinPath(path, yf.Name), found)
		}
	case reflect.Slice:
		if a.Type().Elem().Kind() == reflect.Uint8 || a.Len() != b.Len() {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				found[kind+":"+path] = true
			}

			return
		}

		for i := range a.Len() {
			changed(a.Index(i), b.Index(i), kind, path+"[]", found)
		}
	case reflect.Map:
		for _, k := range a.MapKeys() {
			bv := b.MapIndex(k)
			if !bv.IsValid() {
				found[kind+":"+path] = true

				continue
			}

			changed(a.MapIndex(k), bv, kind, path+"{*}", found)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			found[kind+":"+path] = true
		}
	}
}

func allExported(t reflect.Type) bool {
	for i := range t.NumField() {
		if !t.Field(i).IsExported() {
			return false
		}
	}

	return true
}

func TestSecretTableIsTalosRedact(t *testing.T) {
	t.Parallel()

	found := redactedPaths(t)

	table := map[string]bool{}
	for _, p := range mirror.SecretFields {
		table[p] = true
	}

	if len(found) != expectedSecretFields {
		t.Errorf("Talos redacts %d fields, expected %d", len(found), expectedSecretFields)
	}

	var onlyTalos, onlyTable []string

	for p := range found {
		if !table[p] {
			onlyTalos = append(onlyTalos, p)
		}
	}

	for p := range table {
		if !found[p] {
			onlyTable = append(onlyTable, p)
		}
	}

	sort.Strings(onlyTalos)
	sort.Strings(onlyTable)

	if len(onlyTalos)+len(onlyTable) > 0 {
		t.Errorf("the secret table differs from Talos's Redact:\n redacted by Talos, not in the table: %v\n in the table, not redacted by Talos: %v", onlyTalos, onlyTable)
	}
}

// resolve finds the mirror type at a document path (JSON names, [] for list
// elements, {*} for map values).
func resolve(mt reflect.Type, path string) (reflect.Type, bool) {
	if path == "" {
		return mt, true
	}

	for seg := range strings.SplitSeq(path, ".") {
		name := strings.TrimRight(seg, "[]{*}")
		suffix := seg[len(name):]

		for mt.Kind() == reflect.Pointer {
			mt = mt.Elem()
		}

		if mt.Kind() != reflect.Struct {
			return nil, false
		}

		ft, ok := jsonField(mt, name)
		if !ok {
			return nil, false
		}

		mt = ft

		for ; suffix != ""; suffix = suffix[2:] {
			for mt.Kind() == reflect.Pointer {
				mt = mt.Elem()
			}

			if strings.HasPrefix(suffix, "{*}") {
				if mt.Kind() != reflect.Map {
					return nil, false
				}

				mt = mt.Elem()
				suffix = suffix[1:]

				continue
			}

			if mt.Kind() != reflect.Slice {
				return nil, false
			}

			mt = mt.Elem()
		}
	}

	return mt, true
}

func TestSecretFieldsAbsentFromMirror(t *testing.T) {
	t.Parallel()

	if len(mirror.SecretFields) != expectedSecretFields {
		t.Errorf("the secret table has %d entries, expected %d", len(mirror.SecretFields), expectedSecretFields)
	}

	for _, p := range append(append([]string(nil), mirror.SecretFields...), mirror.SharedSecretFields...) {
		kind, path, _ := strings.Cut(p, ":")
		mt := mirrorTypeOf(t, emptyDocument(t, kind))

		parent, leaf := "", path
		if i := strings.LastIndex(path, "."); i >= 0 {
			parent, leaf = path[:i], path[i+1:]
		}

		// The parent must resolve, or the check below would pass for a misspelt path.
		pt, ok := resolve(mt, parent)
		if !ok {
			t.Errorf("%s: parent path %q does not exist in the mirror", p, parent)

			continue
		}

		for pt.Kind() == reflect.Pointer || pt.Kind() == reflect.Slice || pt.Kind() == reflect.Map {
			pt = pt.Elem()
		}

		if _, present := jsonField(pt, strings.TrimRight(leaf, "[]{*}")); present {
			t.Errorf("secret field %s is present in the mirror type %s", p, pt)
		}
	}
}

// TestSecretsNeverReachTheMirror fills every field with distinct random
// values and checks that none of the secret values appears in the mirror's
// JSON, which is what would be stored in a TalosConfigPatch.
func TestSecretsNeverReachTheMirror(t *testing.T) {
	t.Parallel()

	secret := map[string]bool{}
	for _, p := range append(append([]string(nil), mirror.SecretFields...), mirror.SharedSecretFields...) {
		secret[p] = true
	}

	checked := 0

	for _, kind := range kindNames() {
		doc := emptyDocument(t, kind)
		f := newFiller(t, 11, kind)
		f.full = true
		f.fillAbsent = true
		f.fillDoc(reflect.ValueOf(doc), mirrorTypeOf(t, doc))

		m, err := convert.FromMachinery(doc)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}

		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}

		out := string(b)

		for path, values := range f.leaves {
			if !secret[kind+":"+path] {
				continue
			}

			for _, v := range values {
				checked++

				if strings.Contains(out, v) || strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(v))) {
					t.Errorf("the value of secret field %s:%s reaches the mirror", kind, path)
				}
			}
		}
	}

	if checked < expectedSecretFields {
		t.Errorf("only %d secret values were checked; the filler did not reach every secret field", checked)
	}
}
