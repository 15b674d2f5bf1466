// Package bundle keeps a cluster's Talos secrets bundle (the cluster ID and
// secret, the bootstrap and trustd tokens, the etcd encryption secret, and the
// etcd, Kubernetes, aggregator, service-account and Talos API CAs) in a
// Kubernetes Secret that a TalosCluster references by name. The bundle is
// never embedded in a custom resource.
//
// The Secret holds the bundle as the YAML document machinery itself reads and
// writes (secrets.LoadBundle, talosctl gen secrets), so the recovery path
// `talosctl gen config --with-secrets` works on the Secret's data without
// Ichor.
//
// Errors name the Secret and the key, never a value of the bundle.
package bundle

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.yaml.in/yaml/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// DefaultKey is the data key of the bundle when the reference names none; it
// is the file name `talosctl gen secrets` writes.
const DefaultKey = "secrets.yaml"

// ErrMissing is wrapped by the errors of Load when the Secret has no data
// under the key.
var ErrMissing = errors.New("secrets bundle key missing")

// Key returns the data key a reference points at.
func Key(ref ichorv1alpha1.SecretReference) string {
	if ref.Key == "" {
		return DefaultKey
	}

	return ref.Key
}

// Contract parses a TalosCluster's versionContract (for example v1.14) into
// machinery's version contract. An empty string is refused: the contract is
// pinned in the CR and never defaulted to the library's current one.
func Contract(versionContract string) (*config.VersionContract, error) {
	if versionContract == "" {
		return nil, errors.New("no version contract: spec.versionContract must name one, for example v1.14")
	}

	vc, err := config.ParseContractFromVersion(versionContract)
	if err != nil {
		return nil, fmt.Errorf("version contract %q: %w", versionContract, err)
	}

	return vc, nil
}

// Generate creates a new bundle under the cluster's pinned version contract
// with machinery's secrets.NewBundle. The clock decides the CA validity
// window; pass secrets.NewClock() outside tests.
func Generate(clock secrets.Clock, versionContract string) (*secrets.Bundle, error) {
	vc, err := Contract(versionContract)
	if err != nil {
		return nil, err
	}

	b, err := secrets.NewBundle(clock, vc)
	if err != nil {
		return nil, fmt.Errorf("generate secrets bundle: %w", err)
	}

	return b, nil
}

// Encode serialises a bundle into the YAML machinery reads back.
func Encode(b *secrets.Bundle) ([]byte, error) {
	if b == nil {
		return nil, errors.New("no secrets bundle to encode")
	}

	var buf bytes.Buffer

	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(b); err != nil {
		return nil, fmt.Errorf("encode secrets bundle: %w", err)
	}

	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode secrets bundle: %w", err)
	}

	return buf.Bytes(), nil
}

// Decode reads a bundle written by Encode or by talosctl gen secrets, and
// validates it against the version contract (machinery's Bundle.Validate). The
// error never quotes the input.
//
// The controller decodes the same bundle at every look at a machine: a
// validated bundle is kept (decoded, by the SHA-256 of its bytes and the
// contract, a few at most) and each call gets a copy of its own, so a
// caller that replaces a part (a rotation's new CA) changes nothing another
// caller holds. Validation reads the bytes alone (no clock), so the answer
// for the same bytes never changes.
func Decode(data []byte, versionContract string) (*secrets.Bundle, error) {
	key := decodedKey(data, versionContract)
	if b := decoded.get(key); b != nil {
		return copyBundle(b), nil
	}

	b, err := decode(data, versionContract)
	if err != nil {
		return nil, err
	}

	decoded.put(key, b)

	return copyBundle(b), nil
}

// decode is Decode without the kept bundles.
func decode(data []byte, versionContract string) (*secrets.Bundle, error) {
	vc, err := Contract(versionContract)
	if err != nil {
		return nil, err
	}

	b := &secrets.Bundle{Clock: secrets.NewClock()}

	// Mirrors secrets.LoadBundle (machinery config/generate/secrets/bundle.go),
	// which only reads from a file path. The YAML library's errors quote the
	// offending text, so they are not passed on.
	if err := yaml.Unmarshal(data, b); err != nil {
		return nil, errors.New("the data is not a secrets bundle (YAML does not decode)")
	}

	if err := b.Validate(vc); err != nil {
		return nil, fmt.Errorf("invalid secrets bundle: %w", err)
	}

	return b, nil
}

// Load reads the bundle from the Secret a TalosCluster references.
func Load(secret *corev1.Secret, ref ichorv1alpha1.SecretReference, versionContract string) (*secrets.Bundle, error) {
	if secret == nil {
		return nil, fmt.Errorf("secrets bundle Secret %q not found", ref.Name)
	}

	name := types.NamespacedName{Namespace: secret.Namespace, Name: secret.Name}
	if ref.Name != "" && ref.Name != secret.Name {
		return nil, fmt.Errorf("secrets bundle: Secret %s is not the referenced Secret %q", name, ref.Name)
	}

	key := Key(ref)

	data, ok := secret.Data[key]
	if !ok || len(data) == 0 {
		return nil, fmt.Errorf("secrets bundle Secret %s has no key %q: %w", name, key, ErrMissing)
	}

	b, err := Decode(data, versionContract)
	if err != nil {
		return nil, fmt.Errorf("secrets bundle Secret %s key %q: %w", name, key, err)
	}

	return b, nil
}

// LoadForCluster reads a TalosCluster's bundle from its referenced Secret
// (spec.secretsBundleRef, in the cluster's namespace) under the cluster's
// pinned version contract.
func LoadForCluster(secret *corev1.Secret, cluster *ichorv1alpha1.TalosCluster) (*secrets.Bundle, error) {
	if secret != nil && secret.Namespace != cluster.Namespace {
		return nil, fmt.Errorf("secrets bundle: Secret %s/%s is not in the namespace of TalosCluster %s/%s",
			secret.Namespace, secret.Name, cluster.Namespace, cluster.Name)
	}

	return Load(secret, cluster.Spec.SecretsBundleRef, cluster.Spec.VersionContract)
}

// Secret builds the Secret that stores a bundle under the reference's key.
// The caller sets owner references and labels.
func Secret(namespace string, ref ichorv1alpha1.SecretReference, b *secrets.Bundle) (*corev1.Secret, error) {
	if ref.Name == "" {
		return nil, errors.New("secrets bundle reference has no name")
	}

	data, err := Encode(b)
	if err != nil {
		return nil, err
	}

	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ref.Name},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{Key(ref): data},
	}, nil
}
