package bundle

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// KeysKey is the bundle Secret's data key that lists the keys a key
// rotation moves through.
//
// The bundle Secret through a key rotation (architecture, "Backup,
// recovery, certificates": the service-account signing key and the secretbox
// key of the Secrets' encryption at rest). Talos keeps both in the
// control planes' configuration (the KubeServiceAccountConfig document: an
// issuing private key and accepted public keys; the KubeEtcdEncryptionConfig
// document: the kube-apiserver's EncryptionConfiguration), and documents no
// order, so the order is Kubernetes's own for both: a new key is first only
// accepted (it verifies tokens; it decrypts but does not encrypt), then it
// issues with the old one still accepted, Secrets are written again so they
// are encrypted with it, and the old one goes. As for a CA rotation each
// step is one idempotent update of the Secret:
//
//	accept  NextKey = the bundle with a new service-account key and secretbox
//	        secret; KeysKey accepts the new public key and lists the new
//	        secretbox key after the one that encrypts.
//	issue   the bundle key = the next bundle; PreviousKey = the old one;
//	        KeysKey accepts the old public key and lists the new secretbox
//	        key first, the old one after it.
//	drop    KeysKey accepts no extra public key and lists the new secretbox
//	        key alone.
//	finish  PreviousKey removed (RotationFinish).
//
// KeysKey names keys and the bundle that holds them, never a key itself,
// so a copy of the Secret's other keys is all the secret material there is.
const KeysKey = "keys.yaml"

// DefaultEncryptionKeyName is the name Talos gives the bundle's secretbox
// key in the kube-apiserver's encryption configuration; the prefix of every
// Secret it encrypted in etcd carries it
// (t:pkg/machinery/config/generate/kubernetes.go and
// t:internal/app/machined/pkg/controllers/k8s/internal/k8stemplates/apiserver.go).
const DefaultEncryptionKeyName = "key2"

// Where a secretbox key's secret is kept.
const (
	FromBundle   = "bundle"
	FromNext     = "next"
	FromPrevious = "previous"
)

// Keys is KeysKey's content.
type Keys struct {
	// ServiceAccount are public keys (PEM) that verify service-account
	// tokens beside the bundle's own key.
	ServiceAccount []string `json:"serviceAccount,omitempty"`
	// Encryption is the whole list of secretbox keys, the one that encrypts
	// first; empty means the bundle's secret alone, named
	// DefaultEncryptionKeyName.
	Encryption []EncryptionKeyRef `json:"encryption,omitempty"`
}

// EncryptionKeyRef is one secretbox key: its name in the encryption
// configuration and the bundle that holds its secret.
type EncryptionKeyRef struct {
	Name string `json:"name"`
	// From is FromBundle, FromNext or FromPrevious.
	From string `json:"from"`
}

// EncryptionKey is a secretbox key with its secret, for the render only.
type EncryptionKey struct {
	Name   string
	Secret string
}

// KeyState is what a render needs of a key rotation: the extra public keys
// and, when the rotation changed them, the secretbox keys in order.
type KeyState struct {
	ServiceAccount []string
	Encryption     []EncryptionKey
}

// Empty is true when the bundle's keys alone are in use, as Talos names them.
func (k KeyState) Empty() bool { return len(k.ServiceAccount) == 0 && len(k.Encryption) == 0 }

var keyName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func (k Keys) validate() error {
	for i, p := range k.ServiceAccount {
		block, rest := pem.Decode([]byte(p))
		if block == nil || block.Type != "PUBLIC KEY" || len(bytes.TrimSpace(rest)) > 0 {
			return fmt.Errorf("serviceAccount[%d] is not one PEM public key", i)
		}
	}

	seen := map[string]bool{}

	for i, e := range k.Encryption {
		if !keyName.MatchString(e.Name) {
			return fmt.Errorf("encryption[%d].name is not a key name (lower-case letters, digits and '-', at most 63)", i)
		}

		if seen[e.Name] {
			return fmt.Errorf("encryption[%d].name repeats an earlier key's name", i)
		}

		seen[e.Name] = true

		if !slices.Contains([]string{FromBundle, FromNext, FromPrevious}, e.From) {
			return fmt.Errorf("encryption[%d].from is not one of %s, %s, %s", i, FromBundle, FromNext, FromPrevious)
		}
	}

	return nil
}

// LoadKeys reads KeysKey; a Secret without it uses the bundle's keys alone.
// Errors name the Secret and the key, never a value.
func LoadKeys(sec *corev1.Secret) (Keys, error) {
	var k Keys

	if sec == nil {
		return k, nil
	}

	data, ok := sec.Data[KeysKey]
	if !ok || len(data) == 0 {
		return k, nil
	}

	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return Keys{}, fmt.Errorf("secrets bundle Secret %s/%s key %q does not decode as the key rotation's keys", sec.Namespace, sec.Name, KeysKey)
	}

	if err := k.validate(); err != nil {
		return Keys{}, fmt.Errorf("secrets bundle Secret %s/%s key %q: %w", sec.Namespace, sec.Name, KeysKey, err)
	}

	return k, nil
}

// LoadKeyState is KeysKey with each secretbox key's secret read from the
// bundle that holds it.
func LoadKeyState(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster, current *secrets.Bundle) (KeyState, error) {
	k, err := LoadKeys(sec)
	if err != nil {
		return KeyState{}, err
	}

	out := KeyState{ServiceAccount: k.ServiceAccount}

	for _, e := range k.Encryption {
		b := current

		switch e.From {
		case FromNext:
			b, err = loadKey(sec, NextKey, cluster.Spec.VersionContract)
		case FromPrevious:
			b, err = loadKey(sec, PreviousKey, cluster.Spec.VersionContract)
		}

		if err != nil {
			return KeyState{}, fmt.Errorf("the secretbox key %s of %q: %w", e.Name, KeysKey, err)
		}

		if b.Secrets == nil || b.Secrets.SecretboxEncryptionSecret == "" {
			return KeyState{}, fmt.Errorf("secrets bundle Secret %s/%s: the %s bundle holds no secretbox secret for the key %s", sec.Namespace, sec.Name, e.From, e.Name)
		}

		out.Encryption = append(out.Encryption, EncryptionKey{Name: e.Name, Secret: b.Secrets.SecretboxEncryptionSecret})
	}

	return out, nil
}

// WithNewKeys is b with a new service-account signing key and/or a new
// secretbox secret, everything else the same.
func WithNewKeys(b *secrets.Bundle, now time.Time, versionContract string, serviceAccount, secretbox bool) (*secrets.Bundle, error) {
	if !serviceAccount && !secretbox {
		return nil, errors.New("a key rotation rotates the service-account key, the secretbox key or both")
	}

	vc, err := Contract(versionContract)
	if err != nil {
		return nil, err
	}

	data, err := Encode(b)
	if err != nil {
		return nil, err
	}

	next, err := Decode(data, versionContract)
	if err != nil {
		return nil, err
	}

	// A fresh bundle of the same contract makes the keys the way Talos
	// makes them (RSA or ECDSA service-account key by contract; a 32-byte
	// secretbox secret); only those two are kept from it.
	fresh, err := secrets.NewBundle(secrets.NewFixedClock(now), vc)
	if err != nil {
		return nil, fmt.Errorf("generate the new keys: %w", err)
	}

	if serviceAccount {
		next.Certs.K8sServiceAccount = fresh.Certs.K8sServiceAccount
	}

	if secretbox {
		next.Secrets.SecretboxEncryptionSecret = fresh.Secrets.SecretboxEncryptionSecret
	}

	return next, nil
}

// publicKey is the PEM public key of a bundle's service-account key.
func publicKey(b *secrets.Bundle) (string, error) {
	k, err := b.Certs.K8sServiceAccount.GetKey()
	if err != nil {
		return "", errors.New("the service-account key of the bundle does not parse")
	}

	return string(k.GetPublicKeyPEM()), nil
}

// checkRotatable refuses a bundle whose keys this release cannot rotate.
func checkRotatable(sec *corev1.Secret, b *secrets.Bundle) error {
	if b.Secrets == nil || b.Secrets.SecretboxEncryptionSecret == "" || b.Secrets.AESCBCEncryptionSecret != "" {
		return fmt.Errorf("secrets bundle Secret %s/%s encrypts Secrets with an aescbc key, not a secretbox key: this release rotates secretbox keys only", sec.Namespace, sec.Name)
	}

	if b.Certs == nil || b.Certs.K8sServiceAccount == nil {
		return fmt.Errorf("secrets bundle Secret %s/%s has no service-account key", sec.Namespace, sec.Name)
	}

	return nil
}

// KeysAccept is the accept step: next (made once; kept when NextKey is
// there from an earlier run of this step) becomes NextKey, its
// service-account public key is accepted, and its secretbox key is listed
// after the encrypting one under name. It reports whether the Secret changed.
func KeysAccept(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster, name string, next func(current *secrets.Bundle) (*secrets.Bundle, error)) (bool, error) {
	current, err := LoadForCluster(sec, cluster)
	if err != nil {
		return false, err
	}

	if err := checkRotatable(sec, current); err != nil {
		return false, err
	}

	for _, k := range []string{PreviousKey, AcceptedKey} {
		if _, ok := sec.Data[k]; ok {
			return false, fmt.Errorf("secrets bundle Secret %s/%s still holds %q from a rotation that has not finished", sec.Namespace, sec.Name, k)
		}
	}

	keys, err := LoadKeys(sec)
	if err != nil {
		return false, err
	}

	nb, err := loadKey(sec, NextKey, cluster.Spec.VersionContract)

	switch {
	case errors.Is(err, ErrMissing):
		if nb, err = next(current); err != nil {
			return false, err
		}
	case err != nil:
		return false, err
	}

	sa, err := changedPublicKey(current, nb)
	if err != nil {
		return false, err
	}

	enc := keys.Encryption
	if nb.Secrets.SecretboxEncryptionSecret != current.Secrets.SecretboxEncryptionSecret &&
		!slices.ContainsFunc(enc, func(e EncryptionKeyRef) bool { return e.From == FromNext }) {
		enc = currentEncryption(keys)
		if slices.ContainsFunc(enc, func(e EncryptionKeyRef) bool { return e.Name == name }) {
			return false, fmt.Errorf("the new secretbox key's name %s is in use already", name)
		}

		enc = append(enc, EncryptionKeyRef{Name: name, From: FromNext})
	}

	return setBundlesAndKeys(sec, map[string]*secrets.Bundle{NextKey: nb}, Keys{ServiceAccount: sa, Encryption: enc})
}

// changedPublicKey is the public key of to's service-account key when it
// differs from from's (the key to accept beside the bundle's), else none.
func changedPublicKey(from, to *secrets.Bundle) ([]string, error) {
	a, err := publicKey(from)
	if err != nil {
		return nil, err
	}

	b, err := publicKey(to)
	if err != nil {
		return nil, err
	}

	if a == b {
		return nil, nil
	}

	return []string{b}, nil
}

// currentEncryption is the bundle's own secretbox key as KeysKey lists it:
// its recorded entries, or Talos's name for it.
func currentEncryption(k Keys) []EncryptionKeyRef {
	if len(k.Encryption) > 0 {
		return slices.Clone(k.Encryption)
	}

	return []EncryptionKeyRef{{Name: DefaultEncryptionKeyName, From: FromBundle}}
}

// KeysIssue is the issue step: the next bundle becomes the bundle, the old
// one PreviousKey; the old public key is accepted and the new secretbox key
// encrypts, the old one after it. Run again after it changed the Secret, it
// changes nothing.
func KeysIssue(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster) (bool, error) {
	nb, err := nextToIssue(sec, cluster, "keys")
	if nb == nil || err != nil {
		return false, err
	}

	current, err := LoadForCluster(sec, cluster)
	if err != nil {
		return false, err
	}

	keys, err := LoadKeys(sec)
	if err != nil {
		return false, err
	}

	sa, err := changedPublicKey(nb, current)
	if err != nil {
		return false, err
	}

	enc := keys.Encryption
	if slices.ContainsFunc(enc, func(e EncryptionKeyRef) bool { return e.From == FromNext }) {
		enc = nil

		for _, e := range keys.Encryption {
			switch e.From {
			case FromNext:
				enc = slices.Insert(enc, 0, EncryptionKeyRef{Name: e.Name, From: FromBundle})
			case FromBundle:
				enc = append(enc, EncryptionKeyRef{Name: e.Name, From: FromPrevious})
			}
		}

		if len(enc) != 2 {
			return false, fmt.Errorf("secrets bundle Secret %s/%s key %q does not list the new secretbox key beside one old one", sec.Namespace, sec.Name, KeysKey)
		}
	}

	if _, err := setBundlesAndKeys(sec, map[string]*secrets.Bundle{Key(cluster.Spec.SecretsBundleRef): nb, PreviousKey: current},
		Keys{ServiceAccount: sa, Encryption: enc}); err != nil {
		return false, err
	}

	delete(sec.Data, NextKey)

	return true, nil
}

// KeysDrop is the retire step: only the bundle's service-account key
// verifies, the old secretbox key goes, and the new one, which encrypts
// under the rotation's name, is listed a second time under name (Talos's),
// so that every control plane reads that name with the new secret before
// any writes with it (KeysRename).
func KeysDrop(sec *corev1.Secret, name string) (bool, error) {
	keys, err := LoadKeys(sec)
	if err != nil {
		return false, err
	}

	if len(keys.Encryption) == 0 || len(keys.Encryption) == 2 && keys.Encryption[1].Name == name && keys.Encryption[1].From == FromBundle {
		// the secretbox key is not rotated, or this step ran already
		return setBundlesAndKeys(sec, nil, Keys{Encryption: keys.Encryption})
	}

	var enc []EncryptionKeyRef

	for _, e := range keys.Encryption {
		if e.From == FromBundle && e.Name != name {
			enc = append(enc, e)
		}
	}

	if len(enc) != 1 {
		return false, fmt.Errorf("secrets bundle Secret %s/%s key %q lists %d secretbox keys of the bundle under a name of the rotation, not one: the issue step did not run",
			sec.Namespace, sec.Name, KeysKey, len(enc))
	}

	return setBundlesAndKeys(sec, nil, Keys{Encryption: append(enc, EncryptionKeyRef{Name: name, From: FromBundle})})
}

// KeysRename is the rename step: the bundle's secretbox key encrypts under
// name; its other name still decrypts.
func KeysRename(sec *corev1.Secret, name string) (bool, error) {
	keys, err := LoadKeys(sec)
	if err != nil {
		return false, err
	}

	if len(keys.Encryption) == 0 {
		return false, nil // the secretbox key is not rotated
	}

	i := slices.IndexFunc(keys.Encryption, func(e EncryptionKeyRef) bool { return e.Name == name && e.From == FromBundle })
	if i < 0 || len(keys.Encryption) != 2 || keys.Encryption[1-i].From != FromBundle {
		return false, fmt.Errorf("secrets bundle Secret %s/%s key %q does not list the bundle's secretbox key under %s and one other name: the retire step did not run",
			sec.Namespace, sec.Name, KeysKey, name)
	}

	return setBundlesAndKeys(sec, nil, Keys{Encryption: []EncryptionKeyRef{keys.Encryption[i], keys.Encryption[1-i]}})
}

// KeysFinish is the finish step: the bundle alone holds the keys, as Talos
// names them, and the old bundle goes.
func KeysFinish(sec *corev1.Secret) bool {
	_, ok := sec.Data[KeysKey]
	delete(sec.Data, KeysKey)

	return RotationFinish(sec) || ok
}

func setBundlesAndKeys(sec *corev1.Secret, bundles map[string]*secrets.Bundle, k Keys) (bool, error) {
	changed, err := setKeys(sec, bundles, nil)
	if err != nil {
		return false, err
	}

	if err := k.validate(); err != nil {
		return false, err
	}

	if len(k.ServiceAccount) == 0 && len(k.Encryption) == 0 {
		if _, ok := sec.Data[KeysKey]; ok {
			delete(sec.Data, KeysKey)

			changed = true
		}

		return changed, nil
	}

	data, err := yaml.Marshal(k)
	if err != nil {
		return false, err
	}

	if string(sec.Data[KeysKey]) != string(data) {
		sec.Data[KeysKey], changed = data, true
	}

	return changed, nil
}

// Trust is everything of the bundle Secret a render needs: the bundle, the
// CAs a CA rotation accepts beside it and a key rotation's keys.
type Trust struct {
	Bundle   *secrets.Bundle
	Accepted Accepted
	Keys     KeyState
}

// LoadTrust reads the bundle Secret the way every renderer does (the
// controller, `ichor config`). Errors name the Secret and its keys, never a
// value.
func LoadTrust(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster) (Trust, error) {
	b, err := LoadForCluster(sec, cluster)
	if err != nil {
		return Trust{}, err
	}

	accepted, err := LoadAccepted(sec)
	if err != nil {
		return Trust{}, err
	}

	keys, err := LoadKeyState(sec, cluster, b)
	if err != nil {
		return Trust{}, err
	}

	return Trust{Bundle: b, Accepted: accepted, Keys: keys}, nil
}
