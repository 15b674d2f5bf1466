package bundle_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// TestKeyRotationSteps: each key-rotation step is one idempotent change of
// the bundle Secret; the render's view (LoadTrust) lists the secretbox keys
// in the order the kube-apiserver must have them at each step, with their
// secrets from the right bundle; at the end the Secret holds the bundle
// alone, with new keys and the same CAs; nothing in keys.yaml is a secret.
func TestKeyRotationSteps(t *testing.T) {
	cluster := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"},
		Spec:       ichorv1alpha1.TalosClusterSpec{VersionContract: "v1.14", SecretsBundleRef: ichorv1alpha1.SecretReference{Name: "prod-secrets"}},
	}

	old, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	sec, err := bundle.Secret("ns", cluster.Spec.SecretsBundleRef, old)
	if err != nil {
		t.Fatal(err)
	}

	var nb *secrets.Bundle

	next := func(current *secrets.Bundle) (*secrets.Bundle, error) {
		if nb != nil {
			t.Fatal("the next bundle was made twice")
		}

		nb, err = bundle.WithNewKeys(current, time.Now(), "v1.14", true, true)

		return nb, err
	}

	type want struct {
		names    []string
		secrets  func() []string
		accepted int
	}

	step := func(name string, f func() (bool, error), w want) {
		t.Helper()

		if changed, err := f(); err != nil || !changed {
			t.Fatalf("%s: changed %t, %v", name, changed, err)
		}

		before := maps.Clone(sec.Data)
		if changed, err := f(); err != nil || changed || !maps.EqualFunc(before, sec.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("%s run again: changed %t, %v", name, changed, err)
		}

		tr, err := bundle.LoadTrust(sec, cluster)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}

		names, values := make([]string, 0, len(tr.Keys.Encryption)), make([]string, 0, len(tr.Keys.Encryption))
		for _, k := range tr.Keys.Encryption {
			names, values = append(names, k.Name), append(values, k.Secret)
		}

		var ws []string
		if w.secrets != nil {
			ws = w.secrets()
		}

		if !slices.Equal(names, w.names) || !slices.Equal(values, ws) || len(tr.Keys.ServiceAccount) != w.accepted {
			t.Fatalf("%s: secretbox keys %v (secrets in order %t), %d accepted public keys; want %v, %d", name, names, slices.Equal(values, ws),
				len(tr.Keys.ServiceAccount), w.names, w.accepted)
		}

		for _, s := range []string{old.Secrets.SecretboxEncryptionSecret, string(old.Certs.K8sServiceAccount.Key)} {
			if strings.Contains(string(sec.Data[bundle.KeysKey]), s) {
				t.Fatalf("%s: keys.yaml holds a secret", name)
			}
		}
	}

	o := old.Secrets.SecretboxEncryptionSecret
	n := func() string { return nb.Secrets.SecretboxEncryptionSecret }

	// accept: the old key encrypts under Talos's name, the new one decrypts after it.
	step("accept", func() (bool, error) { return bundle.KeysAccept(sec, cluster, "ichor-rotating", next) },
		want{names: []string{"key2", "ichor-rotating"}, secrets: func() []string { return []string{o, n()} }, accepted: 1})

	if o == n() {
		t.Fatal("the secretbox secret is not new")
	}

	step("issue", func() (bool, error) { return bundle.KeysIssue(sec, cluster) },
		want{names: []string{"ichor-rotating", "key2"}, secrets: func() []string { return []string{n(), o} }, accepted: 1})
	step("retire", func() (bool, error) { return bundle.KeysDrop(sec, "key2") },
		want{names: []string{"ichor-rotating", "key2"}, secrets: func() []string { return []string{n(), n()} }})
	step("rename", func() (bool, error) { return bundle.KeysRename(sec, "key2") },
		want{names: []string{"key2", "ichor-rotating"}, secrets: func() []string { return []string{n(), n()} }})
	step("finish", func() (bool, error) { return bundle.KeysFinish(sec), nil }, want{})

	if len(sec.Data) != 1 {
		t.Fatalf("the Secret holds %d keys at the end, want the bundle alone", len(sec.Data))
	}

	got, err := bundle.LoadForCluster(sec, cluster)
	if err != nil {
		t.Fatal(err)
	}

	if got.Secrets.SecretboxEncryptionSecret != n() || string(got.Certs.K8sServiceAccount.Key) == string(old.Certs.K8sServiceAccount.Key) ||
		string(got.Certs.OS.Crt) != string(old.Certs.OS.Crt) || got.Cluster.ID != old.Cluster.ID {
		t.Fatal("the bundle at the end: new keys, the same CAs and cluster")
	}

	// A bundle that encrypts with aescbc is refused, the Secret unchanged.
	aes, _ := bundle.Generate(secrets.NewClock(), "v1.14")
	aes.Secrets.AESCBCEncryptionSecret, aes.Secrets.SecretboxEncryptionSecret = aes.Secrets.SecretboxEncryptionSecret, ""

	sec2, err := bundle.Secret("ns", cluster.Spec.SecretsBundleRef, aes)
	if err != nil {
		t.Fatal(err)
	}

	if changed, err := bundle.KeysAccept(sec2, cluster, "ichor-rotating", next); changed || err == nil || !strings.Contains(err.Error(), "secretbox keys only") {
		t.Fatalf("an aescbc bundle: changed %t, %v", changed, err)
	}
}
