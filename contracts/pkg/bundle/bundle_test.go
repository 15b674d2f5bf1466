package bundle_test

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func generate(t *testing.T) *secrets.Bundle {
	t.Helper()

	b, err := bundle.Generate(secrets.NewFixedClock(now), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// secretValues lists the bundle's secret material, for leak checks.
func secretValues(b *secrets.Bundle) []string {
	return []string{
		b.Cluster.Secret, b.Secrets.BootstrapToken, b.Secrets.SecretboxEncryptionSecret, b.TrustdInfo.Token,
		string(b.Certs.OS.Key), string(b.Certs.K8s.Key), string(b.Certs.Etcd.Key),
		string(b.Certs.K8sAggregator.Key), string(b.Certs.K8sServiceAccount.Key),
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()

	b := generate(t)
	ref := ichorv1alpha1.SecretReference{Name: "prod-secrets"}

	s, err := bundle.Secret("ns", ref, b)
	if err != nil {
		t.Fatal(err)
	}

	if s.Namespace != "ns" || s.Name != "prod-secrets" || len(s.Data) != 1 || len(s.Data[bundle.DefaultKey]) == 0 {
		t.Fatalf("unexpected Secret %s/%s with keys %d", s.Namespace, s.Name, len(s.Data))
	}

	got, err := bundle.Load(s, ref, "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	if got.Cluster.ID != b.Cluster.ID || got.Cluster.Secret != b.Cluster.Secret ||
		got.Secrets.BootstrapToken != b.Secrets.BootstrapToken ||
		string(got.Certs.OS.Key) != string(b.Certs.OS.Key) ||
		string(got.Certs.K8sServiceAccount.Key) != string(b.Certs.K8sServiceAccount.Key) {
		t.Fatal("loaded bundle differs from the stored one")
	}

	if got.Clock == nil {
		t.Fatal("loaded bundle has no clock")
	}

	// The stored data is what machinery's own loader reads (talosctl gen config --with-secrets).
	path := t.TempDir() + "/secrets.yaml"
	if err := writeFile(path, s.Data[bundle.DefaultKey]); err != nil {
		t.Fatal(err)
	}

	m, err := secrets.LoadBundle(path)
	if err != nil {
		t.Fatal(err)
	}

	if m.TrustdInfo.Token != b.TrustdInfo.Token || string(m.Certs.Etcd.Crt) != string(b.Certs.Etcd.Crt) {
		t.Fatal("machinery's LoadBundle reads a different bundle")
	}
}

func TestCustomKey(t *testing.T) {
	t.Parallel()

	b := generate(t)
	ref := ichorv1alpha1.SecretReference{Name: "s", Key: "bundle"}

	s, err := bundle.Secret("ns", ref, b)
	if err != nil {
		t.Fatal(err)
	}

	if _, ok := s.Data["bundle"]; !ok {
		t.Fatal("bundle not stored under the reference's key")
	}

	if _, err := bundle.Load(s, ref, "v1.14"); err != nil {
		t.Fatal(err)
	}

	if _, err := bundle.Load(s, ichorv1alpha1.SecretReference{Name: "s"}, "v1.14"); !errors.Is(err, bundle.ErrMissing) {
		t.Fatalf("default key on a custom-key Secret: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()

	b := generate(t)

	good, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}

	meta := metav1.ObjectMeta{Namespace: "team-a", Name: "prod-secrets"}
	ref := ichorv1alpha1.SecretReference{Name: "prod-secrets"}

	for _, tc := range []struct {
		name     string
		secret   *corev1.Secret
		ref      ichorv1alpha1.SecretReference
		contract string
		want     []string
		missing  bool
	}{
		{
			name:    "missing key",
			secret:  &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"other": good}},
			ref:     ref,
			want:    []string{"team-a/prod-secrets", `"secrets.yaml"`},
			missing: true,
		},
		{
			name:    "empty value",
			secret:  &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"secrets.yaml": nil}},
			ref:     ref,
			want:    []string{"team-a/prod-secrets", `"secrets.yaml"`},
			missing: true,
		},
		{
			name:   "no Secret",
			secret: nil,
			ref:    ref,
			want:   []string{`"prod-secrets"`, "not found"},
		},
		{
			name:   "another Secret",
			secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "x"}},
			ref:    ref,
			want:   []string{"team-a/x", `"prod-secrets"`},
		},
		{
			name:   "not YAML",
			secret: &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"secrets.yaml": append([]byte("{{"), good...)}},
			ref:    ref,
			want:   []string{"team-a/prod-secrets", "does not decode"},
		},
		{
			name:   "incomplete bundle",
			secret: &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"secrets.yaml": []byte("cluster:\n  id: x\n")}},
			ref:    ref,
			want:   []string{"team-a/prod-secrets", "invalid secrets bundle", "trustdinfo is required"},
		},
		{
			name:     "no contract",
			secret:   &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"secrets.yaml": good}},
			ref:      ref,
			contract: "-",
			want:     []string{"no version contract"},
		},
		{
			name:     "bad contract",
			secret:   &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"secrets.yaml": good}},
			ref:      ref,
			contract: "vX",
			want:     []string{`"vX"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			contract := tc.contract

			switch contract {
			case "":
				contract = "v1.14"
			case "-":
				contract = ""
			}

			_, err := bundle.Load(tc.secret, tc.ref, contract)
			if err == nil {
				t.Fatal("no error")
			}

			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}

			if errors.Is(err, bundle.ErrMissing) != tc.missing {
				t.Errorf("errors.Is(ErrMissing) = %v, want %v", !tc.missing, tc.missing)
			}

			for _, v := range secretValues(b) {
				if strings.Contains(err.Error(), v) {
					t.Fatalf("error leaks bundle material: %q", err)
				}
			}
		})
	}
}

func TestGenerateUnderContract(t *testing.T) {
	t.Parallel()

	// The bundle validates under the contract it was generated for.
	for _, c := range []string{"v1.14", "v1.12"} {
		b, err := bundle.Generate(secrets.NewFixedClock(now), c)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}

		data, err := bundle.Encode(b)
		if err != nil {
			t.Fatal(err)
		}

		if _, err := bundle.Decode(data, c); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
	}

	a, b := generate(t), generate(t)
	if a.Cluster.Secret == b.Cluster.Secret || string(a.Certs.OS.Key) == string(b.Certs.OS.Key) {
		t.Fatal("two generated bundles share secrets")
	}

	block, _ := pem.Decode(a.Certs.OS.Crt)
	if block == nil {
		t.Fatal("OS CA is not PEM")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	// The injected clock decides the validity window.
	if crt.NotBefore.After(now) || now.Sub(crt.NotBefore) > time.Hour {
		t.Fatalf("OS CA NotBefore %s, want about %s", crt.NotBefore, now)
	}
}

func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o600)
}

func TestLoadForCluster(t *testing.T) {
	t.Parallel()

	b := generate(t)
	c := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"}}
	c.Spec.VersionContract = "v1.14"
	c.Spec.SecretsBundleRef = ichorv1alpha1.SecretReference{Name: "prod-secrets", Key: "b.yaml"}

	s, err := bundle.Secret("team-a", c.Spec.SecretsBundleRef, b)
	if err != nil {
		t.Fatal(err)
	}

	got, err := bundle.LoadForCluster(s, c)
	if err != nil || got.Cluster.ID != b.Cluster.ID {
		t.Fatalf("LoadForCluster: %v", err)
	}

	s.Namespace = "team-b"
	if _, err := bundle.LoadForCluster(s, c); err == nil || !strings.Contains(err.Error(), "team-b/prod-secrets") {
		t.Fatalf("Secret in another namespace: %v", err)
	}
}

func TestCorruptKeyDoesNotLeak(t *testing.T) {
	t.Parallel()

	b := generate(t)

	// A key that is not PEM: the validation error must not quote it.
	const marker = "c2VjcmV0LW1hdGVyaWFsLXRoYXQtbXVzdC1ub3QtbGVhaw"

	b.Certs.OS.Key = []byte("-----BEGIN EC PRIVATE KEY-----\n" + marker + "\n-----END EC PRIVATE KEY-----\n")

	data, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}

	_, err = bundle.Decode(data, "v1.14")
	if err == nil {
		t.Fatal("a corrupt key was accepted")
	}

	if strings.Contains(err.Error(), marker) {
		t.Fatalf("the error quotes the key: %v", err)
	}
}

// The expiry of each CA is read from its certificate, and a bundle whose
// certificate does not parse is refused without quoting it.
func TestCertificateExpiry(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

	b, err := bundle.Generate(secrets.NewFixedClock(now), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	got, err := bundle.CertificateExpiry(b)
	if err != nil {
		t.Fatal(err)
	}

	for name, ts := range map[string]*metav1.Time{
		"talos": got.TalosCAExpiry, "kubernetes": got.KubernetesCAExpiry, "etcd": got.EtcdCAExpiry, "aggregator": got.AggregatorCAExpiry,
	} {
		// machinery issues its CAs for secrets.CAValidityTime from its clock.
		if ts == nil || !ts.Time.Equal(now.Add(secrets.CAValidityTime)) {
			t.Errorf("%s CA expiry %v, want %v", name, ts, now.Add(secrets.CAValidityTime))
		}
	}

	if got.ClientCertificateExpiry != nil {
		t.Errorf("no client certificate is in a bundle: %v", got.ClientCertificateExpiry)
	}

	// A bundle without an aggregator CA (as an old one may be) records none.
	withoutAggregator := *b.Certs
	withoutAggregator.K8sAggregator = nil
	old := *b
	old.Certs = &withoutAggregator

	if got, err := bundle.CertificateExpiry(&old); err != nil || got.AggregatorCAExpiry != nil || got.EtcdCAExpiry == nil {
		t.Errorf("a bundle without the aggregator CA: %+v, %v", got, err)
	}

	const secret = "NOT-A-CERTIFICATE-SECRET" //nolint:gosec // a marker that must not appear in errors

	b.Certs.Etcd.Crt = []byte("-----BEGIN CERTIFICATE-----\n" + secret + "\n-----END CERTIFICATE-----\n")
	if _, err := bundle.CertificateExpiry(b); err == nil || !strings.Contains(err.Error(), "etcd CA") || strings.Contains(err.Error(), secret) {
		t.Fatalf("a broken etcd CA: %v, want an error naming the etcd CA and not quoting it", err)
	}
}
