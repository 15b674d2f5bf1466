package selftrust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// authority is a CA and a serving certificate of 127.0.0.1 it issued.
type authority struct {
	pem    []byte
	server tls.Certificate
}

func newAuthority(t *testing.T, name string) authority {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}

	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}

	skey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}

	sder, err := x509.CreateCertificate(rand.Reader, leaf, ca, &skey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}

	return authority{
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		server: tls.Certificate{Certificate: [][]byte{sder}, PrivateKey: skey},
	}
}

// switchingServer presents the serving certificate of *current, which the
// test switches as a rotation's issue stage does.
func switchingServer(t *testing.T, current *atomic.Pointer[tls.Certificate]) string {
	t.Helper()

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	// httptest's StartTLS would put its own certificate first (a client
	// dialling an IP sends no server name, so GetCertificate would not run).
	srv.Listener = tls.NewListener(srv.Listener, &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return current.Load(), nil },
	})
	srv.Start()
	t.Cleanup(srv.Close)

	return "https://" + srv.Listener.Addr().String()
}

// get asks the server through a client of cfg, on a new connection.
func get(t *testing.T, cfg *rest.Config) error {
	t.Helper()

	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}

	hc.CloseIdleConnections()

	resp, err := hc.Get(cfg.Host) //nolint:noctx // a loopback test server
	if err != nil {
		return err
	}

	defer resp.Body.Close() //nolint:errcheck

	return nil
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()

	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTrustAheadOfTheSwitch: a client that trusts only its CA file loses an
// API server that switched to the new CA's certificate; the Transport with the
// new CA added keeps it, also after a restart (the extra file), and once the
// file carries the new CA the addition can go.
func TestTrustAheadOfTheSwitch(t *testing.T) {
	oldCA, newCA := newAuthority(t, "old"), newAuthority(t, "new")

	var current atomic.Pointer[tls.Certificate]

	current.Store(&oldCA.server)
	srv := switchingServer(t, &current)

	dir := t.TempDir()
	caFile, extraFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "trust.pem")
	write(t, caFile, oldCA.pem)

	plain := &rest.Config{Host: srv, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}

	cfg, tr, err := Wrap(plain, extraFile)
	if err != nil || tr == nil {
		t.Fatalf("Wrap: %v, transport %v", err, tr)
	}

	if err := get(t, cfg); err != nil {
		t.Fatalf("before the switch: %v", err)
	}

	if tr.Trusts(newCA.pem) {
		t.Fatal("the new CA is trusted before it was added")
	}

	// Added ahead of the switch.
	if err := tr.Trust(append(append([]byte{}, oldCA.pem...), newCA.pem...)); err != nil {
		t.Fatal(err)
	}

	if !tr.Trusts(newCA.pem) || !tr.Trusts(oldCA.pem) {
		t.Fatal("Trusts does not report the added CAs")
	}

	current.Store(&newCA.server)

	if err := get(t, plain); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client of the CA file alone reached the switched server: %v", err)
	}

	if err := get(t, cfg); err != nil {
		t.Fatalf("after the switch, with the new CA added: %v", err)
	}

	// A restart: the file is still the old CA; the extra file brings the new one.
	again, tr2, err := Wrap(plain, extraFile)
	if err != nil {
		t.Fatal(err)
	}

	if err := get(t, again); err != nil {
		t.Fatalf("after a restart: %v", err)
	}

	// The kubelet refreshed ca.crt: the addition can go.
	write(t, caFile, newCA.pem)

	if err := tr2.Trust(nil); err != nil {
		t.Fatal(err)
	}

	if _, err := os.Stat(extraFile); !os.IsNotExist(err) {
		t.Fatalf("the extra file stays after the addition went: %v", err)
	}

	tr2.mu.Lock()
	tr2.checked = time.Time{} // the recheck interval passed
	tr2.mu.Unlock()

	if err := get(t, again); err != nil {
		t.Fatalf("with the refreshed CA file alone: %v", err)
	}

	if tr2.Trusts(oldCA.pem) {
		t.Fatal("the old CA is still trusted after the file and the addition dropped it")
	}
}

// TestTrustRefusesWhatIsNotACertificate: nothing changes on bad input.
func TestTrustRefusesWhatIsNotACertificate(t *testing.T) {
	ca := newAuthority(t, "ca")

	var current atomic.Pointer[tls.Certificate]

	current.Store(&ca.server)
	srv := switchingServer(t, &current)

	extraFile := filepath.Join(t.TempDir(), "trust.pem")

	cfg, tr, err := Wrap(&rest.Config{Host: srv, TLSClientConfig: rest.TLSClientConfig{CAData: ca.pem}}, extraFile)
	if err != nil {
		t.Fatal(err)
	}

	for _, bad := range []string{"not a certificate", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if err := tr.Trust([]byte(bad)); err == nil {
			t.Fatalf("Trust(%q) accepted", bad)
		}
	}

	if _, err := os.Stat(extraFile); !os.IsNotExist(err) {
		t.Fatalf("a refused Trust wrote the extra file: %v", err)
	}

	if err := get(t, cfg); err != nil {
		t.Fatalf("a refused Trust broke the client: %v", err)
	}

	// A broken extra file is refused at start with the way out.
	write(t, extraFile, []byte("garbage"))

	if _, _, err := Wrap(&rest.Config{Host: srv, TLSClientConfig: rest.TLSClientConfig{CAData: ca.pem}}, extraFile); err == nil ||
		!strings.Contains(err.Error(), "delete the file") {
		t.Fatalf("a broken extra file: %v", err)
	}
}

// TestWrapLeavesConfigsWithoutACA: the system's roots and insecure configs
// have nothing to add to.
func TestWrapLeavesConfigsWithoutACA(t *testing.T) {
	for name, cfg := range map[string]*rest.Config{
		"system roots": {Host: "https://example.invalid"},
		"insecure":     {Host: "https://example.invalid", TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
	} {
		out, tr, err := Wrap(cfg, "")
		if err != nil || tr != nil || out != cfg {
			t.Errorf("%s: Wrap = %p, %v, %v; want the config unchanged", name, out, tr, err)
		}
	}
}
