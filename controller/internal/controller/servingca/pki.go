package servingca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"
)

// authority is a CA certificate with its key.
type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// newAuthority makes a self-signed ECDSA P-256 CA valid from now for CALifetime.
func newAuthority(now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "ichor-serving-ca", Organization: []string{partOf}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// parseAuthority reads a CA from PEM; nil when either part is absent or bad,
// or when the key does not match the certificate.
func parseAuthority(certPEM, keyPEM []byte) *authority {
	cert, err := parseCert(certPEM)
	if err != nil || !cert.IsCA {
		return nil
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil
	}
	return &authority{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}
}

// leaf is a serving certificate with its key, PEM encoded.
type leaf struct {
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
}

// issueLeaf signs a new server certificate for names with ca, valid from now
// for lifetime but never beyond the CA.
func issueLeaf(ca *authority, names []string, now time.Time, lifetime time.Duration) (*leaf, error) {
	dns, ips := splitNames(names)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: names[0], Organization: []string{partOf}},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &leaf{cert: cert, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// parseLeaf reads a serving certificate and checks that its key matches.
func parseLeaf(certPEM, keyPEM []byte) (*x509.Certificate, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("the key holds no PEM block")
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, errors.New("the key is not an ECDSA key")
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the key does not match the certificate")
	}
	return cert, nil
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// splitNames parts a leaf's names into DNS names and IP addresses.
func splitNames(names []string) (dns []string, ips []net.IP) {
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, n)
		}
	}
	return dns, ips
}

// sameNames reports whether cert is for exactly names, DNS names and IP
// addresses (in any order and case).
func sameNames(cert *x509.Certificate, names []string) bool {
	if len(cert.DNSNames)+len(cert.IPAddresses) != len(names) {
		return false
	}
	got := make([]string, 0, len(names))
	for _, n := range cert.DNSNames {
		got = append(got, strings.ToLower(n))
	}
	for _, ip := range cert.IPAddresses {
		got = append(got, ip.String())
	}
	want := make([]string, len(names))
	for i, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			want[i] = ip.String()
		} else {
			want[i] = strings.ToLower(n)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// bundle concatenates the PEM certificates of cas, skipping nil ones.
func bundle(cas ...*authority) []byte {
	var b bytes.Buffer
	for _, ca := range cas {
		if ca != nil {
			b.Write(ca.certPEM)
			if !bytes.HasSuffix(ca.certPEM, []byte("\n")) {
				b.WriteByte('\n')
			}
		}
	}
	return b.Bytes()
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("making a serial number: %w", err)
	}
	return n, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
