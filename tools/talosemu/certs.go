package talosemu

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/role"
)

// newKeyAndSerial makes the P-256 key and the random 127-bit serial number of
// a new leaf certificate.
func newKeyAndSerial() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}

	return key, serial, nil
}

// newMaintenanceCert creates a self-signed server certificate for the maintenance API.
// Talos serves maintenance mode with a certificate no client can verify; talosctl pins its
// SPKI fingerprint instead (m:client/options.go WithMaintenanceMode).
func newMaintenanceCert(address string) (certPEM, keyPEM []byte, err error) {
	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, nil, err
	}

	now := time.Now()
	tmpl := &stdx509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "maintenance-service", Organization: []string{nameTalos}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              stdx509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IPAddresses:           []net.IP{net.ParseIP(address)},
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}

	keyDER, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// loadOrCreateMaintenanceCert keeps the maintenance key in the machine's directory, so the
// fingerprint stays the same across restarts of talosemu.
func loadOrCreateMaintenanceCert(dir, address string, replace bool) (tls.Certificate, error) {
	crtPath, keyPath := filepath.Join(dir, fileMaintCert), filepath.Join(dir, fileMaintKey)

	if !replace {
		crt, err := readOptional(crtPath)
		if err != nil {
			return tls.Certificate{}, err
		}

		key, err := readOptional(keyPath)
		if err != nil {
			return tls.Certificate{}, err
		}

		if crt != nil && key != nil {
			pair, err := tls.X509KeyPair(crt, key)
			if err != nil {
				return tls.Certificate{}, fmt.Errorf("maintenance certificate in %s is unusable: %w", dir, err)
			}

			return pair, nil
		}
	}

	crt, key, err := newMaintenanceCert(address)
	if err != nil {
		return tls.Certificate{}, err
	}

	if err := writeFileAtomic(keyPath, key, secretFileMode); err != nil {
		return tls.Certificate{}, err
	}

	if err := writeFileAtomic(crtPath, crt, nonSecretFileMode); err != nil {
		return tls.Certificate{}, err
	}

	return tls.X509KeyPair(crt, key)
}

// fingerprint returns the SPKI fingerprint talosctl and machinery pin in maintenance mode.
func fingerprint(cert tls.Certificate) string {
	if len(cert.Certificate) == 0 {
		return ""
	}

	fp, err := x509.SPKIFingerprintFromDER(cert.Certificate[0])
	if err != nil {
		return ""
	}

	return fp.String()
}

// issueServerCert issues the configured-mode apid certificate from the OS CA, the way Talos
// issues it from machine.ca (t:internal/app/machined/pkg/controllers/secrets/api.go).
func issueServerCert(ca *x509.PEMEncodedCertificateAndKey, address, hostname string) (tls.Certificate, error) {
	if ca == nil || len(ca.Key) == 0 {
		return tls.Certificate{}, errors.New("no OS CA key available to issue the API certificate")
	}

	return issueFromOSCA(ca, "API certificate", func(tmpl *stdx509.Certificate) {
		tmpl.Subject = pkix.Name{CommonName: hostname}
		tmpl.ExtKeyUsage = []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP(address), net.ParseIP("127.0.0.1"), net.IPv6loopback}
		tmpl.DNSNames = []string{hostname, hostLocalhost}
	})
}

// issueFromOSCA signs a year-long certificate for a new key with the OS CA;
// shape fills in what the certificate is for (subject, usages, names).
func issueFromOSCA(ca *x509.PEMEncodedCertificateAndKey, what string, shape func(*stdx509.Certificate)) (tls.Certificate, error) {
	caCert, err := ca.GetCert()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("parsing OS CA certificate: %w", err)
	}

	caKeyAny, err := ca.GetKey()
	if err != nil {
		return tls.Certificate{}, errors.New("parsing OS CA key failed")
	}

	caKey, ok := caKeyAny.(crypto.Signer)
	if !ok {
		return tls.Certificate{}, errors.New("OS CA key cannot sign")
	}

	key, serial, err := newKeyAndSerial()
	if err != nil {
		return tls.Certificate{}, err
	}

	now := time.Now()
	tmpl := &stdx509.Certificate{
		SerialNumber: serial,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     stdx509.KeyUsageDigitalSignature,
	}
	shape(tmpl)

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issuing %s: %w", what, err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// issueProxyClientCert issues the client certificate a control plane's apid presents when it
// forwards a request to another node: Organization os:impersonator, ExtKeyUsage [ClientAuth]
// (t:internal/app/machined/pkg/controllers/secrets/api.go generateControlPlane; workers get
// none, generateWorker sets Client to nil).
func issueProxyClientCert(ca *x509.PEMEncodedCertificateAndKey, hostname string) (tls.Certificate, error) {
	return issueFromOSCA(ca, "API client certificate", func(tmpl *stdx509.Certificate) {
		tmpl.Subject = pkix.Name{CommonName: hostname, Organization: []string{string(role.Impersonator)}}
		tmpl.ExtKeyUsage = []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}
	})
}

// verifyConnectionExtKeyUsage applies the same check to every handshake, resumed ones included.
func verifyConnectionExtKeyUsage(cs tls.ConnectionState) error {
	if len(cs.VerifiedChains) == 0 {
		return errors.New("client certificate required")
	}

	return verifyExtKeyUsage(nil, cs.VerifiedChains)
}

// verifyExtKeyUsage mirrors apid's check that every non-CA certificate of the client's chain
// has ExtKeyUsage exactly [ClientAuth] (t:internal/app/apid/service.go verifyExtKeyUsage).
func verifyExtKeyUsage(_ [][]byte, verifiedChains [][]*stdx509.Certificate) error {
	if len(verifiedChains) == 0 {
		return errors.New("no verified chains")
	}

	for _, cert := range verifiedChains[0] {
		if cert.IsCA {
			continue
		}

		if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != stdx509.ExtKeyUsageClientAuth {
			return fmt.Errorf("certificate %q is missing the client auth extended key usage", cert.Subject)
		}
	}

	return nil
}
