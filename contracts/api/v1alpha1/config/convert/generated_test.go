package convert_test

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
)

// generatedConfig returns the documents machinery generates for a machine type.
func generatedConfig(tb testing.TB, mt machine.Type) (*secrets.Bundle, []talosconfig.Document) {
	tb.Helper()

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), nil)
	if err != nil {
		tb.Fatal(err)
	}

	in, err := generate.NewInput("ichor-test", "https://10.5.0.1:6443", constants.DefaultKubernetesVersion,
		generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/vda"))
	if err != nil {
		tb.Fatal(err)
	}

	cfg, err := in.Config(mt)
	if err != nil {
		tb.Fatal(err)
	}

	return bundle, cfg.Documents()
}

// prune zeroes the fields of a machinery value that its mirror type does not
// have (except the legacy document's version, which the conversion sets).
func prune(v reflect.Value, mt reflect.Type) {
	for mt != nil && mt.Kind() == reflect.Pointer && v.Kind() != reflect.Pointer {
		mt = mt.Elem()
	}

	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			prune(v.Elem(), elemOf(mt))
		}
	case reflect.Struct:
		if v.Type() == typeUnstructured || !allExported(v.Type()) || mt.Kind() != reflect.Struct {
			return
		}

		for _, yf := range yamlFields(v.Type()) {
			if v.Type() == reflect.TypeFor[v1alpha1.Config]() && yf.Name == "version" {
				continue
			}

			ft, ok := jsonField(mt, yf.Name)
			if !ok {
				f := v.FieldByIndex(yf.Index)
				f.Set(reflect.Zero(f.Type()))

				continue
			}

			prune(v.FieldByIndex(yf.Index), ft)
		}
	case reflect.Slice:
		if mt.Kind() != reflect.Slice {
			return
		}

		for i := range v.Len() {
			prune(v.Index(i), mt.Elem())
		}
	case reflect.Map:
		if mt.Kind() != reflect.Map {
			return
		}

		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			prune(e, mt.Elem())
			v.SetMapIndex(k, e)
		}
	}
}

var typeCEL = reflect.TypeFor[cel.Expression]()

// celToText replaces every CEL expression by the one its text parses to.
func celToText(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			celToText(t, v.Elem())
		}
	case reflect.Struct:
		if v.Type() == typeCEL {
			text, err := v.Interface().(cel.Expression).MarshalText() //nolint:forcetypeassert // type checked above
			if err != nil {
				t.Fatal(err)
			}

			var e cel.Expression
			if err := e.UnmarshalText(text); err != nil {
				t.Fatal(err)
			}

			v.Set(reflect.ValueOf(e))

			return
		}

		if !allExported(v.Type()) {
			return
		}

		for i := range v.NumField() {
			celToText(t, v.Field(i))
		}
	case reflect.Slice:
		for i := range v.Len() {
			celToText(t, v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			celToText(t, e)
			v.SetMapIndex(k, e)
		}
	}
}

func bundleSecrets(b *secrets.Bundle) map[string]string {
	return map[string]string{
		"cluster secret":        b.Cluster.Secret,
		"bootstrap token":       b.Secrets.BootstrapToken,
		"secretbox secret":      b.Secrets.SecretboxEncryptionSecret,
		"aescbc secret":         b.Secrets.AESCBCEncryptionSecret,
		"trustd token":          b.TrustdInfo.Token,
		"etcd CA key":           base64.StdEncoding.EncodeToString(b.Certs.Etcd.Key),
		"kubernetes CA key":     base64.StdEncoding.EncodeToString(b.Certs.K8s.Key),
		"aggregator CA key":     base64.StdEncoding.EncodeToString(b.Certs.K8sAggregator.Key),
		"service account key":   base64.StdEncoding.EncodeToString(b.Certs.K8sServiceAccount.Key),
		"Talos API (OS) CA key": base64.StdEncoding.EncodeToString(b.Certs.OS.Key),
	}
}

// TestRoundTripGeneratedConfigs converts every document machinery generates
// for a control plane and a worker and back: every mirrored field survives,
// and no secret of the bundle reaches the mirror.
func TestRoundTripGeneratedConfigs(t *testing.T) {
	t.Parallel()

	for _, mt := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		t.Run(mt.String(), func(t *testing.T) {
			t.Parallel()

			bundle, docs := generatedConfig(t, mt)
			if len(docs) < 2 {
				t.Fatalf("machinery generated %d documents", len(docs))
			}

			for _, doc := range docs {
				t.Run(doc.Kind(), func(t *testing.T) {
					m, err := convert.FromMachinery(doc)
					if err != nil {
						t.Fatal(err)
					}

					want := doc.Clone()
					prune(reflect.ValueOf(want), reflect.TypeOf(m))
					// Machinery builds some CEL expressions as an AST; the
					// mirror carries their text, which parses to an equal
					// expression but a different Go value.
					celToText(t, reflect.ValueOf(want))

					back := roundTrip(t, doc)
					if !reflect.DeepEqual(want, back) {
						t.Fatalf("the document changed across the round trip:\n%s", diff(reflect.ValueOf(want), reflect.ValueOf(back)))
					}

					b, err := json.Marshal(m)
					if err != nil {
						t.Fatal(err)
					}

					for what, s := range bundleSecrets(bundle) {
						if s != "" && strings.Contains(string(b), s) {
							t.Errorf("the %s reaches the mirror of %s", what, doc.Kind())
						}
					}
				})
			}
		})
	}
}

func BenchmarkFromMachineryControlPlane(b *testing.B) {
	_, docs := generatedConfig(b, machine.TypeControlPlane)

	for b.Loop() {
		for _, doc := range docs {
			if _, err := convert.FromMachinery(doc); err != nil {
				b.Fatal(err)
			}
		}
	}

	b.ReportMetric(float64(len(docs)), "docs/op")
}

func BenchmarkToMachineryControlPlane(b *testing.B) {
	_, docs := generatedConfig(b, machine.TypeControlPlane)

	mirrors := make([]any, 0, len(docs))

	for _, doc := range docs {
		m, err := convert.FromMachinery(doc)
		if err != nil {
			b.Fatal(err)
		}

		mirrors = append(mirrors, m)
	}

	for b.Loop() {
		for _, m := range mirrors {
			if _, err := convert.ToMachinery(m); err != nil {
				b.Fatal(err)
			}
		}
	}

	b.ReportMetric(float64(len(mirrors)), "docs/op")
}
