package bundle_test

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// Rule: the accepted CAs of a rotation hold certificates only. A Secret
// without the key accepts nothing more; what Encode writes, LoadAccepted
// reads back; a list entry that is a key, two certificates or no PEM is
// refused, and the error names the Secret, the key and the entry, never its
// content (a private key pasted there must not reach a status).
func TestAcceptedCAs(t *testing.T) {
	b, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	secret := func(data []byte) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod-secrets"}, Data: map[string][]byte{bundle.DefaultKey: []byte("x")}}
		if data != nil {
			s.Data[bundle.AcceptedKey] = data
		}

		return s
	}

	if a, err := bundle.LoadAccepted(secret(nil)); err != nil || !a.Empty() {
		t.Fatalf("a Secret without %s: %+v, %v", bundle.AcceptedKey, a, err)
	}

	want := bundle.Accepted{Talos: []string{string(b.Certs.OS.Crt)}, Kubernetes: []string{string(b.Certs.K8s.Crt)}}

	data, err := bundle.EncodeAccepted(want)
	if err != nil {
		t.Fatal(err)
	}

	got, err := bundle.LoadAccepted(secret(data))
	if err != nil || len(got.Talos) != 1 || got.Talos[0] != want.Talos[0] || len(got.Kubernetes) != 1 || got.Kubernetes[0] != want.Kubernetes[0] {
		t.Fatalf("round trip: %+v, %v", got, err)
	}

	if pem := got.TalosPEM(b.Certs.OS.Crt); strings.Count(string(pem), "BEGIN CERTIFICATE") != 1 {
		t.Errorf("the bundle's own CA accepted again is listed twice in the trust: %d", strings.Count(string(pem), "BEGIN CERTIFICATE"))
	}

	for name, bad := range map[string]bundle.Accepted{
		"a key":                     {Talos: []string{string(b.Certs.OS.Key)}},
		"two certificates":          {Kubernetes: []string{string(b.Certs.K8s.Crt) + string(b.Certs.OS.Crt)}},
		"a certificate and its key": {Talos: []string{string(b.Certs.OS.Crt) + string(b.Certs.OS.Key)}},
		"no PEM":                    {Kubernetes: []string{"SECRET-NOT-PEM"}},
	} {
		if _, err := bundle.EncodeAccepted(bad); err == nil {
			t.Errorf("%s: EncodeAccepted took it", name)
		}

		data := []byte("talos: [" + strings.Join(quote(bad.Talos), ",") + "]\nkubernetes: [" + strings.Join(quote(bad.Kubernetes), ",") + "]\n")

		_, err := bundle.LoadAccepted(secret(data))
		if err == nil {
			t.Errorf("%s: LoadAccepted took it", name)

			continue
		}

		if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "ns/prod-secrets") ||
			!strings.Contains(err.Error(), bundle.AcceptedKey) {
			t.Errorf("%s: the error %q quotes the content or does not name the Secret and key", name, err)
		}
	}

	if _, err := bundle.LoadAccepted(secret([]byte("talos: {SECRET: 1}"))); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("YAML that does not decode: %v", err)
	}
}

func quote(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(`"`+s+`"`, "\n", `\n`), "\r", "")
	}

	return out
}
