package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var serviceNames = []string{"ichor-ui", "ichor-ui.ichor-system", "ichor-ui.ichor-system.svc", "ichor-ui.ichor-system.svc.cluster.local"}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serialSeq int64 = 100

// leaf returns PEM certificate and key for names, signed by ca.
func (ca *testCA) leaf(t *testing.T, names ...string) (certPEM, keyPEM []byte, serial *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serialSeq++
	serial = big.NewInt(serialSeq)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), serial
}

// mounted writes a pair the way the kubelet mounts a Secret: the files are
// symlinks through ..data, which is swapped atomically on an update.
type mounted struct {
	dir string
	gen int
}

func mount(t *testing.T, certPEM, keyPEM []byte) *mounted {
	t.Helper()
	m := &mounted{dir: t.TempDir()}
	m.update(t, certPEM, keyPEM)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(m.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func (m *mounted) update(t *testing.T, certPEM, keyPEM []byte) {
	t.Helper()
	m.gen++
	ts := filepath.Join(m.dir, fmt.Sprintf("..ts%d", m.gen))
	if err := os.Mkdir(ts, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "tls.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func (m *mounted) files() (string, string) {
	return filepath.Join(m.dir, "tls.crt"), filepath.Join(m.dir, "tls.key")
}

func reloader(t *testing.T, m *mounted) *Reloader {
	t.Helper()
	c, k := m.files()
	r, err := NewReloader(c, k, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// serve runs a TLS listener that completes handshakes with getCert.
func serve(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = c.(*tls.Conn).HandshakeContext(hctx)
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake connects with server name sni (empty sends none: the address is
// an IP) and returns the serial the server presented; roots, when set, must
// verify it for sni.
func handshake(t *testing.T, addr, sni string, roots *x509.CertPool) (*big.Int, error) {
	t.Helper()
	cfg := &tls.Config{ServerName: sni, MinVersion: tls.VersionTLS12}
	if roots == nil {
		cfg.InsecureSkipVerify = true
	} else {
		cfg.RootCAs = roots
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func TestSNIChoosesTheIchorLeafForServiceNames(t *testing.T) {
	ichor, operatorCA := newCA(t), newCA(t)
	sc, sk, serviceSerial := ichor.leaf(t, serviceNames...)
	oc, ok, operatorSerial := operatorCA.leaf(t, "ichor.example.com")
	sni := &SNI{Service: reloader(t, mount(t, sc, sk)), Operator: reloader(t, mount(t, oc, ok))}
	addr := serve(t, sni.GetCertificate)

	ichorRoots := x509.NewCertPool()
	ichorRoots.AddCert(ichor.cert)
	for _, name := range append(serviceNames, "ICHOR-UI.ichor-system.svc.cluster.local.") {
		got, err := handshake(t, addr, name, ichorRoots)
		if err != nil {
			t.Fatalf("SNI %s: a client trusting ichor-ui-ca fails: %v", name, err)
		}
		if got.Cmp(serviceSerial) != 0 {
			t.Errorf("SNI %s got serial %v, want the Ichor leaf", name, got)
		}
	}
	operatorRoots := x509.NewCertPool()
	operatorRoots.AddCert(operatorCA.cert)
	if got, err := handshake(t, addr, "ichor.example.com", operatorRoots); err != nil || got.Cmp(operatorSerial) != 0 {
		t.Errorf("the external name gets serial %v (%v), want the operator's", got, err)
	}
	for _, name := range []string{"", "other.example.com", "ichor-ui.elsewhere"} {
		if got, err := handshake(t, addr, name, nil); err != nil || got.Cmp(operatorSerial) != 0 {
			t.Errorf("SNI %q gets serial %v (%v), want the operator's", name, got, err)
		}
	}
	// The Ichor CA does not vouch for the external name: the choice is real.
	if _, err := handshake(t, addr, "ichor.example.com", ichorRoots); err == nil {
		t.Error("the external name verified against ichor-ui-ca")
	}
}

func TestSNIWithOneCertificateServesItForEveryName(t *testing.T) {
	ca := newCA(t)
	sc, sk, serviceSerial := ca.leaf(t, serviceNames...)
	oc, ok, operatorSerial := ca.leaf(t, "ichor.example.com")
	for name, tc := range map[string]struct {
		sni  *SNI
		want *big.Int
	}{
		"only the Ichor leaf": {&SNI{Service: reloader(t, mount(t, sc, sk))}, serviceSerial},
		"only the operator's": {&SNI{Operator: reloader(t, mount(t, oc, ok))}, operatorSerial},
	} {
		addr := serve(t, tc.sni.GetCertificate)
		for _, server := range []string{"", "ichor-ui", "ichor.example.com"} {
			if got, err := handshake(t, addr, server, nil); err != nil || got.Cmp(tc.want) != 0 {
				t.Errorf("%s, SNI %q: serial %v (%v), want %v", name, server, got, err, tc.want)
			}
		}
	}
	if _, err := (&SNI{}).GetCertificate(&tls.ClientHelloInfo{}); err == nil {
		t.Error("an SNI with no certificate answered")
	}
}

func TestReloaderFollowsASwappedSecret(t *testing.T) {
	ichor, operatorCA := newCA(t), newCA(t)
	sc, sk, first := ichor.leaf(t, serviceNames...)
	oc, ok, opFirst := operatorCA.leaf(t, "ichor.example.com")
	sm, om := mount(t, sc, sk), mount(t, oc, ok)
	sni := &SNI{Service: reloader(t, sm), Operator: reloader(t, om)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sni.Service.Run(ctx, 20*time.Millisecond)
	go sni.Operator.Run(ctx, 20*time.Millisecond)
	addr := serve(t, sni.GetCertificate)

	sc2, sk2, second := ichor.leaf(t, serviceNames...)
	oc2, ok2, opSecond := operatorCA.leaf(t, "ichor.example.com")
	sm.update(t, sc2, sk2)
	om.update(t, oc2, ok2)
	waitSerial(t, addr, "ichor-ui.ichor-system.svc", second, first)
	waitSerial(t, addr, "ichor.example.com", opSecond, opFirst)

	// A broken update is refused; the last good pair stays.
	_, otherKey, _ := ichor.leaf(t, serviceNames...)
	sm.update(t, sc2, otherKey)
	time.Sleep(200 * time.Millisecond)
	if got, err := handshake(t, addr, "ichor-ui", nil); err != nil || got.Cmp(second) != 0 {
		t.Errorf("after a mismatched update: serial %v (%v), want the last good %v", got, err, second)
	}
}

func waitSerial(t *testing.T, addr, sni string, want, old *big.Int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := handshake(t, addr, sni, nil)
		if err == nil && got.Cmp(want) == 0 {
			return
		}
		if err == nil && got.Cmp(old) != 0 {
			t.Fatalf("SNI %s: unexpected serial %v", sni, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("SNI %s still gets serial %v (%v) after the files changed, want %v", sni, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewReloaderExplainsABadPair(t *testing.T) {
	ca := newCA(t)
	c, _, _ := ca.leaf(t, "a")
	_, k, _ := ca.leaf(t, "b")
	m := mount(t, c, k)
	cf, kf := m.files()
	_, err := NewReloader(cf, kf, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "do not form a pair") {
		t.Fatalf("want a clear error for a mismatched pair, got %v", err)
	}
	if strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Fatal("the error holds the key")
	}
	if _, err := NewReloader(filepath.Join(m.dir, "missing.crt"), kf, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// The handshake helper really fails on an untrusted certificate.
func TestHandshakeVerifies(t *testing.T) {
	ca := newCA(t)
	c, k, _ := ca.leaf(t, serviceNames...)
	addr := serve(t, (&SNI{Service: reloader(t, mount(t, c, k))}).GetCertificate)
	if _, err := handshake(t, addr, "ichor-ui", x509.NewCertPool()); err == nil {
		t.Fatal("an untrusted certificate verified")
	}
}
