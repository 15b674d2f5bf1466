// Package certs serves ichor-ui's TLS certificates: the leaf of the Ichor
// serving CA (the Secret ichor-ui-tls the controller keeps, mounted) and the
// operator's certificate (ichorUI.tls.secretName, mounted), each reloaded
// when its files change and chosen by the handshake's server name (SNI), or
// else a self-signed leaf made in memory for a local run.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Reloader keeps the certificate of a pair of PEM files and loads them again
// when their content changes (a mounted Secret is replaced by a symlink swap,
// so the files are compared by content, not by modification time).
type Reloader struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
	certPEM, keyPEM   []byte
	log               *slog.Logger
}

// NewReloader loads certFile and keyFile; a missing or bad pair is an error.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := r.reload(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reloader) reload() (bool, error) {
	c, err := os.ReadFile(r.certFile)
	if err != nil {
		return false, fmt.Errorf("reading the TLS certificate: %w", err)
	}
	k, err := os.ReadFile(r.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading the TLS key: %w", err)
	}
	if bytes.Equal(c, r.certPEM) && bytes.Equal(k, r.keyPEM) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		// The error names the files' problem, never their content.
		return false, fmt.Errorf("the TLS certificate %s and key %s do not form a pair: %w", r.certFile, r.keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return false, fmt.Errorf("the TLS certificate %s: %w", r.certFile, err)
		}
	}
	r.certPEM, r.keyPEM = c, k
	r.cur.Store(&pair)
	return true, nil
}

// Run checks the files every interval until ctx ends; a bad new pair is
// logged and the last good one kept.
func (r *Reloader) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			changed, err := r.reload()
			switch {
			case err != nil:
				r.log.Error("keeping the previous TLS certificate", "error", err.Error())
			case changed:
				r.log.Info("TLS certificate reloaded", "file", r.certFile)
			}
		}
	}
}

// GetCertificate is a tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.cur.Load()
	if c == nil {
		return nil, errors.New("no TLS certificate loaded")
	}
	return c, nil
}

// SelfSigned makes a self-signed ECDSA leaf for hosts (names or IPs), valid
// for validity; its certificate PEM is returned so a client can trust it.
func SelfSigned(hosts []string, validity time.Duration) (*tls.Certificate, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "ichor-ui"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	tmpl.KeyUsage |= x509.KeyUsageCertSign
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, leaf, nil
}

// Current returns the loaded certificate.
func (r *Reloader) Current() *tls.Certificate { return r.cur.Load() }

// SNI chooses ichor-ui's certificate by the handshake's server name: a name
// of ichor-ui's Service (the Ichor leaf's DNS names) gets the Ichor leaf, so
// in-cluster clients verify ichor-ui against ichor-ui-ca; any other name, or
// none (a connection by IP address), gets the operator's certificate when
// there is one, else the Ichor leaf (architecture, "Trust").
type SNI struct {
	// Service serves the Ichor leaf (ichor-ui-tls); nil when none is mounted.
	Service *Reloader
	// Operator serves the operator's certificate; nil when none is set.
	Operator *Reloader
}

// GetCertificate is a tls.Config.GetCertificate.
func (s *SNI) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	switch {
	case s.Service == nil && s.Operator == nil:
		return nil, errors.New("no TLS certificate configured")
	case s.Operator == nil:
		return s.Service.GetCertificate(hello)
	case s.Service == nil:
		return s.Operator.GetCertificate(hello)
	}
	if name := strings.TrimSuffix(strings.ToLower(hello.ServerName), "."); name != "" {
		if c := s.Service.Current(); c != nil && c.Leaf != nil && slices.ContainsFunc(c.Leaf.DNSNames, func(n string) bool {
			return strings.EqualFold(n, name)
		}) {
			return c, nil
		}
	}
	return s.Operator.GetCertificate(hello)
}
