package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var patchGVR = schema.GroupVersionResource{Group: "ichor.maesh.dev", Version: "v1alpha1", Resource: "talosconfigpatches"}

// fillMirror writes a value into every field of a mirror type (one element
// per list and map), so every property of the schema is exercised.
func fillMirror(v reflect.Value, n *int) {
	*n++

	switch v.Type() {
	case reflect.TypeFor[metav1.Duration]():
		v.Set(reflect.ValueOf(metav1.Duration{Duration: time.Duration(*n) * time.Second}))

		return
	case reflect.TypeFor[metav1.TypeMeta]():
		v.Set(reflect.ValueOf(metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1", Kind: "CredentialProviderConfig"}))

		return
	case reflect.TypeFor[mirror.ArgValue]():
		v.Set(reflect.ValueOf(mirror.ArgValue{Values: []string{"a", "b"}}))

		return
	}

	if v.Kind() == reflect.Map && v.Type().Elem() == reflect.TypeFor[resource.Quantity]() {
		// A Kubernetes resource list.
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.ValueOf("cpu").Convert(v.Type().Key()), reflect.ValueOf(resource.MustParse("250m")))
		v.SetMapIndex(reflect.ValueOf("memory").Convert(v.Type().Key()), reflect.ValueOf(resource.MustParse("1Gi")))

		return
	}

	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillMirror(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillMirror(v.Field(i), n)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes(fmt.Appendf(nil, "bytes-%d", *n))

			return
		}

		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillMirror(v.Index(0), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		e := reflect.New(v.Type().Elem()).Elem()
		fillMirror(e, n)
		v.SetMapIndex(reflect.ValueOf(fmt.Sprintf("key%d", *n)).Convert(v.Type().Key()), e)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n % 100))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n % 100)) //nolint:gosec // n is positive
	default:
		panic("fillMirror: unexpected " + v.Type().String())
	}
}

func jsonRoundTrip(t *testing.T, v any) any {
	t.Helper()

	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}

	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}

	return out
}

// nested builds a JSON object with value at path (JSON names, [] for a list
// element, {*} for a map value).
func nested(path string, value any) map[string]any {
	segs := strings.Split(path, ".")
	v := value

	for i := len(segs) - 1; i >= 0; i-- {
		name := strings.TrimRight(segs[i], "[]{*}")
		suffix := segs[i][len(name):]

		for suffix != "" {
			switch {
			case strings.HasSuffix(suffix, "[]"):
				v = []any{v}
				suffix = strings.TrimSuffix(suffix, "[]")
			case strings.HasSuffix(suffix, "{*}"):
				v = map[string]any{"key": v}
				suffix = strings.TrimSuffix(suffix, "{*}")
			default:
				panic("nested: bad path " + path)
			}
		}

		v = map[string]any{name: v}
	}

	return v.(map[string]any) //nolint:forcetypeassert // the loop ends with an object
}

// holder is a cluster-layer TalosConfigPatch carrying docs.
func holder(name string, docs ...any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": patchGVR.GroupVersion().String(),
		"kind":       "TalosConfigPatch",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       map[string]any{"clusterName": "c", "layer": "cluster", "documents": docs},
	}}
}

// TestPatchDocumentCRD installs Ichor's generated TalosConfigPatch CRD (from
// kustomize/base/crd) in a real API server, and checks that a typed document
// of every allowed kind is stored unchanged under strict field validation,
// that secret fields are refused (strict) or pruned (otherwise), and that the
// CRD stays small enough for client-side apply.
func TestPatchDocumentCRD(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(filepath.Join(root, testenv.DefaultCRDDir, "ichor.maesh.dev_talosconfigpatches.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096).Decode(&crd); err != nil {
		t.Fatal(err)
	}

	compact, err := json.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("TalosConfigPatch CRD (%d document kinds): %d bytes YAML, %d bytes JSON", len(configpatch.Allowed), len(raw), len(compact))

	// kubectl's client-side apply keeps the whole object in an annotation
	// limited to 256 KiB; the API server's request limit is far above that.
	if len(compact) > 256*1024 {
		t.Errorf("the CRD is %d bytes of JSON, over the 256 KiB an annotation (client-side apply) can hold", len(compact))
	}

	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})

	cfg := env.Config

	res := dynamic.NewForConfigOrDie(cfg).Resource(patchGVR).Namespace("default")
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	lax := metav1.CreateOptions{FieldValidation: metav1.FieldValidationIgnore}

	n := 0

	for i, kind := range configpatch.Allowed {
		doc, ok := mirror.New(kind)
		if !ok {
			t.Fatalf("no mirror type for %s", kind)
		}

		fillMirror(reflect.ValueOf(doc).Elem(), &n)

		var pd mirror.PatchDocument
		if !pd.SetDocument(doc) {
			t.Fatalf("PatchDocument cannot hold %s", kind)
		}

		sent := jsonRoundTrip(t, pd)

		got, err := res.Create(t.Context(), holder(fmt.Sprintf("doc-%d", i), sent), strict)
		if err != nil {
			t.Errorf("%s: %v", kind, err)

			continue
		}

		stored := jsonRoundTrip(t, got.Object["spec"].(map[string]any)["documents"].([]any)[0]) //nolint:forcetypeassert // the schema says so
		if !reflect.DeepEqual(stored, sent) {
			t.Errorf("%s: the API server changed the document:\nsent   %v\nstored %v", kind, sent, stored)
		}
	}

	two := map[string]any{"sysctlConfig": map[string]any{"params": map[string]any{"a": "1"}}, "kubeletConfig": map[string]any{"image": "x"}}
	if _, err := res.Create(t.Context(), holder("two", two), strict); !apierrors.IsInvalid(err) {
		t.Errorf("a document with two kinds: got %v, want Invalid", err)
	}

	if _, err := res.Create(t.Context(), holder("none", map[string]any{}), strict); !apierrors.IsInvalid(err) {
		t.Errorf("a document with no kind: got %v, want Invalid", err)
	}

	// Every secret field of Talos's Redact, set in a document of its kind:
	// strict validation reports it, and without it the API server prunes it.
	refusedStrict, prunedLax, refusedLax := 0, 0, 0

	for i, p := range mirror.SecretFields {
		kind, path, _ := strings.Cut(p, ":")
		secret := fmt.Sprintf("s3cr3t-%d-%d", i, time.Now().UnixNano())
		doc := map[string]any{jsonKindName(kind): nested(path, secret)}

		_, err := res.Create(t.Context(), holder(fmt.Sprintf("secret-strict-%d", i), doc), strict)
		switch {
		case err == nil || !strings.Contains(err.Error(), "unknown field"):
			t.Errorf("%s: strict validation did not report it: %v", p, err)
		case strings.Contains(err.Error(), secret):
			t.Errorf("%s: the error quotes the secret", p)
		default:
			refusedStrict++
		}

		got, err := res.Create(t.Context(), holder(fmt.Sprintf("secret-lax-%d", i), doc), lax)
		if err != nil {
			// Pruning left an empty document, which the schema refuses: not stored either.
			if !apierrors.IsInvalid(err) {
				t.Errorf("%s: %v", p, err)
			}

			refusedLax++

			continue
		}

		b, err := json.Marshal(got.Object)
		if err != nil {
			t.Fatal(err)
		}

		if strings.Contains(string(b), secret) {
			t.Errorf("%s: the API server stored the secret", p)
		} else {
			prunedLax++
		}
	}

	t.Logf("secret fields: %d/%d reported under strict validation; without it %d pruned, %d refused (nothing left)",
		refusedStrict, len(mirror.SecretFields), prunedLax, refusedLax)

	for _, tc := range []struct {
		name, secret string
		doc          map[string]any
	}{
		{"tls-key", "tls-key-s3cr3t", map[string]any{"registryTLSConfig": map[string]any{"name": "r", "clientIdentity": map[string]any{"cert": "c", "key": "tls-key-s3cr3t"}}}},
		{"passphrase", "passphrase-s3cr3t", map[string]any{"userVolumeConfig": map[string]any{"name": "u", "encryption": map[string]any{"provider": "luks2", "keys": []any{map[string]any{"slot": int64(0), "static": map[string]any{"passphrase": "passphrase-s3cr3t"}}}}}}},
		{"raw-passphrase", "raw-s3cr3t", map[string]any{"rawVolumeConfig": map[string]any{"name": "r", "encryption": map[string]any{"provider": "luks2", "keys": []any{map[string]any{"slot": int64(1), "static": map[string]any{"passphrase": "raw-s3cr3t"}}}}}}},
	} {
		_, err := res.Create(t.Context(), holder("strict-"+tc.name, tc.doc), strict)
		if err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: strict validation did not report the unknown field: %v", tc.name, err)
		}

		if err != nil && strings.Contains(err.Error(), tc.secret) {
			t.Errorf("%s: the error quotes the secret", tc.name)
		}

		got, err := res.Create(t.Context(), holder("lax-"+tc.name, tc.doc), lax)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}

		b, err := json.Marshal(got.Object)
		if err != nil {
			t.Fatal(err)
		}

		if strings.Contains(string(b), tc.secret) {
			t.Errorf("%s: the API server stored the secret", tc.name)
		}
	}
}
