package render_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Rule (issue 24, the stages of a key rotation): a key rotation's keys are
// rendered into a control plane's KubeServiceAccountConfig (the extra public
// keys after the issuing key's) and KubeEtcdEncryptionConfig (one secretbox
// provider with the keys in the rotation's order, the first encrypting); a
// worker's render does not change (it has neither document); the v1.12
// contract, which cannot hold two keys, is refused.
func TestKeysRender(t *testing.T) {
	t.Parallel()

	other, err := bundle.Generate(secrets.NewFixedClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	k, err := other.Certs.K8sServiceAccount.GetKey()
	if err != nil {
		t.Fatal(err)
	}

	b := testBundle(t)
	keys := bundle.KeyState{
		ServiceAccount: []string{string(k.GetPublicKeyPEM())},
		Encryption: []bundle.EncryptionKey{
			{Name: "ichor-rotating", Secret: other.Secrets.SecretboxEncryptionSecret},
			{Name: "key2", Secret: b.Secrets.SecretboxEncryptionSecret},
		},
	}

	in := input(t)
	in.Machine = machine("m-1", ichorv1alpha1.RoleControlPlane)
	in.Machine.Spec.Disks = nil
	in.Keys = keys
	r := renderOK(t, in)

	sa := r.Config.K8sServiceAccountConfig()
	if got := sa.AcceptedKeys(); len(got) != 2 || !bytes.Equal(bytes.TrimSpace(got[1].Key), bytes.TrimSpace(k.GetPublicKeyPEM())) {
		t.Errorf("the accepted service-account keys are %d, want the issuing key's then the rotation's", len(got))
	}

	if string(sa.IssuingKey().Key) != string(b.Certs.K8sServiceAccount.Key) {
		t.Error("the issuing service-account key is not the bundle's")
	}

	enc := fmt.Sprint(r.Config.K8sEtcdEncryptionConfig().EtcdEncryptionConfig())
	i, j := strings.Index(enc, "ichor-rotating"), strings.Index(enc, "key2")

	if i < 0 || j < 0 || i > j || strings.Count(enc, "secretbox") != 1 {
		t.Errorf("the encryption configuration does not list one secretbox provider with ichor-rotating then key2: %d %d", i, j)
	}

	// A worker renders the same bytes with and without the keys.
	in = input(t)
	in.Machine = machine("w-1", ichorv1alpha1.RoleWorker)
	in.Machine.Spec.Disks = nil
	plain := renderOK(t, in)
	in.Keys = keys

	if !bytes.Equal(plain.Bytes, renderOK(t, in).Bytes) {
		t.Error("the keys changed a worker's configuration")
	}

	in = input(t)
	in.Cluster.Spec.VersionContract = "v1.12"
	in.Machine = machine("m-1", ichorv1alpha1.RoleControlPlane)
	in.Machine.Spec.Disks = nil
	in.Keys = keys

	if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "cannot rotate") {
		t.Errorf("the v1.12 contract with rotated keys: %v", err)
	}
}
