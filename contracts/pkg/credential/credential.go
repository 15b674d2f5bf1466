// Package credential signs the short-lived Talos API client certificates a
// TalosCredentialRequest asks for: the least Talos role each purpose needs,
// for the purpose's default or requested duration, over a public key whose
// private half never leaves the requester. The controller's
// credentialrequest reconciler is its user; nothing here reads or writes a
// Kubernetes object.
//
// Errors name what is wrong with the input, never a key or a certificate.
package credential

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// ErrNotSupported is returned for a purpose this version cannot sign yet.
var ErrNotSupported = errors.New("not yet supported")

// Role returns the least Talos role a purpose needs (architecture, "Trust").
func Role(purpose string) (role.Role, error) {
	switch purpose {
	case ichorv1alpha1.PurposeReader, ichorv1alpha1.PurposeTalosconfigReader:
		return role.Reader, nil
	case ichorv1alpha1.PurposeSupportBundle, ichorv1alpha1.PurposePacketCapture:
		return role.Operator, nil
	case ichorv1alpha1.PurposeEtcdSnapshot:
		return role.EtcdBackup, nil
	case ichorv1alpha1.PurposeRotationCredentials:
		// the operator's talosconfig after the rotation, as `talosctl rotate-ca` writes it
		return role.Admin, nil
	}

	return "", fmt.Errorf("unknown purpose %q: use reader, talosconfig-reader, support-bundle, etcd-snapshot or packet-capture", purpose)
}

// DefaultDuration is the lifetime of a certificate whose request leaves
// spec.duration empty (the type's documentation).
func DefaultDuration(purpose string) time.Duration {
	switch purpose {
	case ichorv1alpha1.PurposeTalosconfigReader:
		return time.Hour
	case ichorv1alpha1.PurposeRotationCredentials:
		return 365 * 24 * time.Hour
	}

	return 10 * time.Minute
}

// Duration is the lifetime to sign for: the requested one or the default,
// never more than the purpose's maximum (the webhook refuses more already;
// the cap holds even without it).
func Duration(spec ichorv1alpha1.TalosCredentialRequestSpec) time.Duration {
	d := DefaultDuration(spec.Purpose)
	if spec.Duration != nil && spec.Duration.Duration > 0 {
		d = spec.Duration.Duration
	}

	if limit, ok := guard.MaxCredentialDuration[spec.Purpose]; ok && d > limit {
		d = limit
	}

	return d
}

// ParsePublicKey reads spec.publicKey: a PEM "PUBLIC KEY" (PKIX) or a PEM
// "CERTIFICATE REQUEST" whose signature verifies. ECDSA P-256/P-384/P-521,
// Ed25519 and RSA of at least 2048 bits are accepted.
func ParsePublicKey(text string) (crypto.PublicKey, error) {
	block, rest := pem.Decode([]byte(strings.TrimSpace(text)))
	if block == nil {
		return nil, errors.New("spec.publicKey is not PEM: give a PEM \"PUBLIC KEY\" or \"CERTIFICATE REQUEST\" block")
	}

	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("spec.publicKey holds more than one PEM block: give exactly one public key or certificate request")
	}

	var pub crypto.PublicKey

	switch block.Type {
	case "PUBLIC KEY":
		k, err := stdx509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("spec.publicKey: the PUBLIC KEY block does not parse as a PKIX public key: %w", err)
		}

		pub = k
	case "CERTIFICATE REQUEST":
		csr, err := stdx509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("spec.publicKey: the CERTIFICATE REQUEST does not parse: %w", err)
		}

		if err := csr.CheckSignature(); err != nil {
			return nil, fmt.Errorf("spec.publicKey: the CERTIFICATE REQUEST's signature does not verify: %w", err)
		}

		pub = csr.PublicKey
	case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY":
		return nil, fmt.Errorf("spec.publicKey holds a private key (%s): never send a private key; send its public half", block.Type)
	default:
		return nil, fmt.Errorf("spec.publicKey is a PEM %q block: give a \"PUBLIC KEY\" or \"CERTIFICATE REQUEST\" block", block.Type)
	}

	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return nil, errors.New("spec.publicKey: the ECDSA curve is not P-256, P-384 or P-521")
		}
	case ed25519.PublicKey:
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("spec.publicKey: an RSA key of %d bits is too short: use at least 2048 bits, or ECDSA P-256", k.N.BitLen())
		}
	default:
		return nil, fmt.Errorf("spec.publicKey: key type %T is not supported: use ECDSA P-256, Ed25519 or RSA", pub)
	}

	return pub, nil
}

// Certificate is a signed client certificate: public material only.
type Certificate struct {
	// PEM is the certificate.
	PEM []byte
	// CA is the Talos API CA certificate (PEM) to verify the nodes with.
	CA []byte
	// Role is the Talos role signed for.
	Role role.Role
	// NotAfter is when the certificate expires.
	NotAfter time.Time
}

// clockSkew is how far NotBefore is back-dated, for nodes whose clock is a little behind.
const clockSkew = time.Minute

// Sign signs pub with the bundle's Talos API (OS) CA as a client certificate
// for r, valid from now for ttl. Talos reads the caller's roles from the
// client certificate's Subject.Organization (t:pkg/grpc/middleware/authz/injector.go,
// mode Enabled) and apid accepts only ExtKeyUsage exactly [ClientAuth]
// (t:internal/app/apid/service.go); machinery's own client certificates are made the
// same way (m:config/generate/secrets/ca.go NewAdminCertificateAndKey:
// Organization(roles), KeyUsage DigitalSignature, ExtKeyUsage ClientAuth).
func Sign(b *secrets.Bundle, pub crypto.PublicKey, r role.Role, commonName string, now time.Time, ttl time.Duration) (*Certificate, error) {
	if b == nil || b.Certs == nil || b.Certs.OS == nil || len(b.Certs.OS.Crt) == 0 || len(b.Certs.OS.Key) == 0 {
		return nil, errors.New("the secrets bundle has no Talos API (OS) CA with its key")
	}

	der, notAfter, err := signClient(b.Certs.OS, "Talos API", pub, []string{string(r)}, commonName, now, ttl)
	if err != nil {
		return nil, err
	}

	return &Certificate{
		PEM:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		CA:       b.Certs.OS.Crt,
		Role:     r,
		NotAfter: notAfter,
	}, nil
}

// KubernetesAdminGroup is the group of the Kubernetes client certificate a
// CA rotation hands out: the admin kubeconfig's (Talos signs `talosctl
// kubeconfig` for system:masters, t:internal/app/machined/pkg/controllers/secrets/kubernetes.go).
const KubernetesAdminGroup = "system:masters"

// SignKubernetes signs pub with the bundle's Kubernetes CA as an admin
// client certificate (group system:masters) for commonName, valid from now
// for ttl: the kubeconfig of a CA rotation's credentials.
func SignKubernetes(b *secrets.Bundle, pub crypto.PublicKey, commonName string, now time.Time, ttl time.Duration) ([]byte, time.Time, error) {
	if b == nil || b.Certs == nil || b.Certs.K8s == nil || len(b.Certs.K8s.Crt) == 0 || len(b.Certs.K8s.Key) == 0 {
		return nil, time.Time{}, errors.New("the secrets bundle has no Kubernetes CA with its key")
	}

	der, notAfter, err := signClient(b.Certs.K8s, "Kubernetes", pub, []string{KubernetesAdminGroup}, commonName, now, ttl)
	if err != nil {
		return nil, time.Time{}, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), notAfter, nil
}

// signClient signs a client certificate (ExtKeyUsage exactly ClientAuth)
// for pub with ca. Errors name the CA, never a value.
func signClient(ca *x509.PEMEncodedCertificateAndKey, name string, pub crypto.PublicKey, orgs []string, commonName string, now time.Time, ttl time.Duration) ([]byte, time.Time, error) {
	caCert, err := ca.GetCert()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("the secrets bundle's %s CA certificate does not parse", name)
	}

	caKey, err := ca.GetKey()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("the secrets bundle's %s CA key does not parse", name)
	}

	signer, ok := caKey.(crypto.Signer)
	if !ok {
		return nil, time.Time{}, fmt.Errorf("the secrets bundle's %s CA key cannot sign", name)
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, time.Time{}, err
	}

	notAfter := now.Add(ttl).Truncate(time.Second)

	tmpl := &stdx509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: orgs, CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              stdx509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, caCert, pub, signer)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("signing the client certificate: %w", err)
	}

	return der, notAfter, nil
}
