package bundle

import (
	stdx509 "crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// CertificateExpiry reads when the bundle's certificate authorities expire
// (the Talos API CA, the Kubernetes CA, the etcd CA and the Kubernetes
// aggregator CA) from their certificates, for a TalosCluster's
// status.certificates. Only the public certificates are read, never a key.
// A CA the bundle lacks stays nil. clientCertificateExpiry is never set:
// Ichor's Talos client certificates are issued per connection, not kept.
func CertificateExpiry(b *secrets.Bundle) (ichorv1alpha1.CertificatesStatus, error) {
	var out ichorv1alpha1.CertificatesStatus

	if b == nil || b.Certs == nil {
		return out, errors.New("the secrets bundle has no certificates")
	}

	for _, ca := range []struct {
		name string
		crt  []byte
		dst  **metav1.Time
	}{
		{"the Talos API CA", crtOf(b.Certs.OS), &out.TalosCAExpiry},
		{"the Kubernetes CA", crtOf(b.Certs.K8s), &out.KubernetesCAExpiry},
		{"the etcd CA", crtOf(b.Certs.Etcd), &out.EtcdCAExpiry},
		{"the Kubernetes aggregator CA", crtOf(b.Certs.K8sAggregator), &out.AggregatorCAExpiry},
	} {
		if len(ca.crt) == 0 {
			continue
		}

		notAfter, err := notAfter(ca.crt)
		if err != nil {
			return ichorv1alpha1.CertificatesStatus{}, fmt.Errorf("the secrets bundle's %s: %w", ca.name, err)
		}

		t := metav1.NewTime(notAfter.UTC())
		*ca.dst = &t
	}

	return out, nil
}

func crtOf(p *x509.PEMEncodedCertificateAndKey) []byte {
	if p == nil {
		return nil
	}

	return p.Crt
}

// notAfter is the expiry of the first certificate of a PEM block; errors
// never quote the input.
func notAfter(crt []byte) (time.Time, error) {
	block, _ := pem.Decode(crt)
	if block == nil || block.Type != "CERTIFICATE" {
		return time.Time{}, errors.New("the certificate is not PEM")
	}

	c, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}, errors.New("the certificate does not parse")
	}

	return c.NotAfter, nil
}
