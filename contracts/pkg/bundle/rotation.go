package bundle

import (
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The bundle Secret through a CA rotation (architecture, "Backup, recovery,
// certificates"; Talos's own procedure is t:pkg/rotate/pki/talos/talos.go
// and t:pkg/rotate/pki/kubernetes/kubernetes.go). Each step below is one
// update of the Secret, and running a step again on a Secret it already
// changed changes nothing, so a controller that stops between its write and
// its own status write just writes again:
//
//	accept   NextKey = the bundle with new CAs; AcceptedKey = their certificates.
//	         The nodes accept the new CAs; the bundle's keep issuing.
//	issue    the bundle key = the next bundle; PreviousKey = the old one;
//	         AcceptedKey = the old CAs' certificates. The new CAs issue.
//	drop     AcceptedKey removed: the old CAs are no longer accepted.
//	finish   PreviousKey removed.
const (
	// NextKey holds the bundle a rotation moves to until it issues.
	NextKey = "next-secrets.yaml"
	// PreviousKey holds the bundle a rotation moved from until it finishes.
	PreviousKey = "previous-secrets.yaml"
)

// CASet says which CAs a rotation replaces.
type CASet struct {
	Talos, Kubernetes, Aggregator bool
}

// WithNewCAs is b with new CAs of which, everything else (cluster ID and
// secret, tokens, the etcd CA, keys) the same.
func WithNewCAs(b *secrets.Bundle, now time.Time, versionContract string, which CASet) (*secrets.Bundle, error) {
	if !which.Talos && !which.Kubernetes && !which.Aggregator {
		return nil, errors.New("a CA rotation rotates the Talos API CA, the Kubernetes CA, the aggregator CA or some of them")
	}

	vc, err := Contract(versionContract)
	if err != nil {
		return nil, err
	}

	// A deep copy, through the bundle's own encoding.
	data, err := Encode(b)
	if err != nil {
		return nil, err
	}

	next, err := Decode(data, versionContract)
	if err != nil {
		return nil, err
	}

	if which.Talos {
		ca, err := secrets.NewTalosCA(now)
		if err != nil {
			return nil, fmt.Errorf("generate the new Talos API CA: %w", err)
		}

		next.Certs.OS = &x509.PEMEncodedCertificateAndKey{Crt: ca.CrtPEM, Key: ca.KeyPEM}
	}

	if which.Kubernetes {
		ca, err := secrets.NewKubernetesCA(now, vc)
		if err != nil {
			return nil, fmt.Errorf("generate the new Kubernetes CA: %w", err)
		}

		next.Certs.K8s = &x509.PEMEncodedCertificateAndKey{Crt: ca.CrtPEM, Key: ca.KeyPEM}
	}

	if which.Aggregator {
		ca, err := secrets.NewAggregatorCA(now, vc)
		if err != nil {
			return nil, fmt.Errorf("generate the new aggregator CA: %w", err)
		}

		next.Certs.K8sAggregator = &x509.PEMEncodedCertificateAndKey{Crt: ca.CrtPEM, Key: ca.KeyPEM}
	}

	return next, nil
}

// changedCAs are the certificates of the CAs that differ between two bundles.
func changedCAs(from, to *secrets.Bundle) Accepted {
	var a Accepted

	if string(from.Certs.OS.Crt) != string(to.Certs.OS.Crt) {
		a.Talos = []string{string(from.Certs.OS.Crt)}
	}

	if string(from.Certs.K8s.Crt) != string(to.Certs.K8s.Crt) {
		a.Kubernetes = []string{string(from.Certs.K8s.Crt)}
	}

	if from.Certs.K8sAggregator != nil && to.Certs.K8sAggregator != nil && string(from.Certs.K8sAggregator.Crt) != string(to.Certs.K8sAggregator.Crt) {
		a.Aggregator = []string{string(from.Certs.K8sAggregator.Crt)}
	}

	return a
}

// RotationAccept is the accept step: next becomes NextKey (kept when a
// next bundle is there already, from an earlier run of this step) and its
// new CAs are accepted. It reports whether the Secret changed.
func RotationAccept(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster, next func(current *secrets.Bundle) (*secrets.Bundle, error)) (bool, error) {
	current, err := LoadForCluster(sec, cluster)
	if err != nil {
		return false, err
	}

	if _, ok := sec.Data[PreviousKey]; ok {
		return false, fmt.Errorf("secrets bundle Secret %s/%s still holds %q from a rotation that has not finished", sec.Namespace, sec.Name, PreviousKey)
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

	accepted := changedCAs(nb, current)

	return setKeys(sec, map[string]*secrets.Bundle{NextKey: nb}, &accepted)
}

// RotationIssue is the issue step: the next bundle becomes the bundle, the
// old one PreviousKey, and the old CAs are accepted. Run again after it
// changed the Secret, it changes nothing.
func RotationIssue(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster) (bool, error) {
	nb, err := nextToIssue(sec, cluster, "CAs")
	if nb == nil || err != nil {
		return false, err
	}

	current, err := LoadForCluster(sec, cluster)
	if err != nil {
		return false, err
	}

	accepted := changedCAs(current, nb)

	if _, err := setKeys(sec, map[string]*secrets.Bundle{Key(cluster.Spec.SecretsBundleRef): nb, PreviousKey: current}, &accepted); err != nil {
		return false, err
	}

	delete(sec.Data, NextKey)

	return true, nil
}

// RotationDrop is the drop step: only the bundle's CAs are accepted.
func RotationDrop(sec *corev1.Secret) bool {
	_, ok := sec.Data[AcceptedKey]
	delete(sec.Data, AcceptedKey)

	return ok
}

// RotationFinish is the finish step: the old bundle goes.
func RotationFinish(sec *corev1.Secret) bool {
	_, ok := sec.Data[PreviousKey]
	delete(sec.Data, PreviousKey)

	return ok
}

// LoadNext is the bundle a rotation hands credentials out for: the next
// bundle before it issues, the bundle itself after.
func LoadNext(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster) (*secrets.Bundle, error) {
	nb, err := loadKey(sec, NextKey, cluster.Spec.VersionContract)
	if errors.Is(err, ErrMissing) {
		return LoadForCluster(sec, cluster)
	}

	return nb, err
}

// LoadPrevious is the bundle a rotation moved from, nil when none.
func LoadPrevious(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster) (*secrets.Bundle, error) {
	b, err := loadKey(sec, PreviousKey, cluster.Spec.VersionContract)
	if errors.Is(err, ErrMissing) {
		return nil, nil
	}

	return b, err
}

func loadKey(sec *corev1.Secret, key, versionContract string) (*secrets.Bundle, error) {
	data, ok := sec.Data[key]
	if !ok || len(data) == 0 {
		return nil, fmt.Errorf("secrets bundle Secret %s/%s has no key %q: %w", sec.Namespace, sec.Name, key, ErrMissing)
	}

	b, err := Decode(data, versionContract)
	if err != nil {
		return nil, fmt.Errorf("secrets bundle Secret %s/%s key %q: %w", sec.Namespace, sec.Name, key, err)
	}

	return b, nil
}

// setKeys writes bundles and the accepted CAs (none: the key goes) into the
// Secret and reports whether anything changed.
func setKeys(sec *corev1.Secret, bundles map[string]*secrets.Bundle, accepted *Accepted) (bool, error) {
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}

	changed := false

	set := func(key string, data []byte) {
		if string(sec.Data[key]) != string(data) {
			sec.Data[key], changed = data, true
		}
	}

	for key, b := range bundles {
		data, err := Encode(b)
		if err != nil {
			return false, err
		}

		set(key, data)
	}

	if accepted != nil {
		if accepted.Empty() {
			if _, ok := sec.Data[AcceptedKey]; ok {
				delete(sec.Data, AcceptedKey)

				changed = true
			}
		} else {
			data, err := EncodeAccepted(*accepted)
			if err != nil {
				return false, err
			}

			set(AcceptedKey, data)
		}
	}

	return changed, nil
}

// nextToIssue is the next bundle an issue step makes the bundle; nil, and
// no error, when the step ran already (the next bundle is the bundle, the
// old one PreviousKey). what names the rotation's new secrets for the error.
func nextToIssue(sec *corev1.Secret, cluster *ichorv1alpha1.TalosCluster, what string) (*secrets.Bundle, error) {
	nb, err := loadKey(sec, NextKey, cluster.Spec.VersionContract)
	if errors.Is(err, ErrMissing) {
		if _, ok := sec.Data[PreviousKey]; ok {
			return nil, nil // issued already
		}

		return nil, fmt.Errorf("secrets bundle Secret %s/%s has neither %q nor %q: the rotation's new %s are lost", sec.Namespace, sec.Name, NextKey, PreviousKey, what)
	}

	return nb, err
}
