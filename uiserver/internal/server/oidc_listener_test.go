package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/certs"
	"github.com/maeshinshin/ichor/uiserver/internal/frontend"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

// noServices answers no UI API call: these tests look at the listeners only.
type noServices struct {
	ichorv1.UnimplementedClusterServiceServer
	ichorv1.UnimplementedMachineServiceServer
}

const serviceName = "ichor-ui.ichor-system.svc"

// ichorLeaf makes a CA and a leaf for ichor-ui's Service names, as the
// controller's serving CA does.
func ichorLeaf(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ichor-serving-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "ichor-ui"},
		DNSNames:  []string{"ichor-ui", "ichor-ui.ichor-system", serviceName, serviceName + ".cluster.local"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}

type listeners struct {
	main, oidc string
	tokens     *auth.Tokens
	srv        *server.Server
	stop       context.CancelFunc
	done       chan error
}

// startListeners serves a server with the console on one port and the OIDC
// listener on another; withIssuer mounts the issuer.
func startListeners(t *testing.T, withIssuer bool) (*listeners, *x509.CertPool) {
	t.Helper()
	leaf, roots := ichorLeaf(t)
	// Tokens of their own: issuer.New hooks its sessions into them.
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	toks := &auth.Tokens{Issuer: "https://ichor.example.com", Key: key}
	opCert, _, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opts := server.Options{
		GetCertificate:     func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return opCert, nil },
		OIDCGetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return leaf, nil },
		Cluster:            noServices{}, Machines: noServices{}, Authenticator: toks, Frontend: frontend.FS(),
		Ready: func() bool { return true }, Log: slog.New(slog.NewJSONHandler(logSink(), nil)),
		ShutdownTimeout: 5 * time.Second,
	}
	if withIssuer {
		iss, err := issuer.New(issuer.Options{Tokens: toks, Users: &users.Store{Reader: admin, Namespace: testNS},
			Clients: []issuer.Client{{ID: oidcClientID, RedirectURIs: []string{oidcRedirect}}}})
		if err != nil {
			t.Fatal(err)
		}
		opts.Mount = iss.Mount
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mainLn, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	oidcLn, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listeners{tokens: toks, main: mainLn.Addr().String(), oidc: oidcLn.Addr().String(), srv: srv, stop: cancel, done: make(chan error, 1)}
	go func() { l.done <- srv.ServeListeners(ctx, mainLn, oidcLn) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-l.done:
			if err != nil {
				t.Errorf("the server's termination: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop")
		}
	})
	return l, roots
}

// serviceClient reaches addr as https://ichor-ui.ichor-system.svc:<port>,
// trusting roots only, as the kube-apiserver does through the Service.
func serviceClient(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

func get(t *testing.T, c *http.Client, method, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOIDCListenerServesDiscoveryAndKeysOnly(t *testing.T) {
	l, roots := startListeners(t, true)
	tokens := l.tokens
	_, port, _ := net.SplitHostPort(l.oidc)
	base := "https://" + serviceName + ":" + port
	c := serviceClient(l.oidc, roots)

	code, body := get(t, c, http.MethodGet, base+issuer.DiscoveryPath)
	if code != http.StatusOK {
		t.Fatalf("discovery on the OIDC listener: %d %s", code, body)
	}
	doc := map[string]any{}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["issuer"] != tokens.Issuer {
		t.Errorf("issuer %v, want the external URL %s (the tokens' iss)", doc["issuer"], tokens.Issuer)
	}
	if doc["jwks_uri"] != base+issuer.KeysPath {
		t.Errorf("jwks_uri %v, want this listener %s", doc["jwks_uri"], base+issuer.KeysPath)
	}
	if doc["token_endpoint"] != tokens.Issuer+issuer.TokenPath {
		t.Errorf("token_endpoint %v changed", doc["token_endpoint"])
	}
	code, body = get(t, c, http.MethodGet, doc["jwks_uri"].(string))
	set := jose.JSONWebKeySet{}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &set) != nil || len(set.Keys) == 0 || set.Keys[0].KeyID != tokens.Key.ID || !set.Keys[0].IsPublic() {
		t.Fatalf("keys through jwks_uri: %d %s", code, body)
	}
	if code, _ := get(t, c, http.MethodHead, base+issuer.KeysPath); code != http.StatusOK {
		t.Errorf("HEAD keys: %d", code)
	}

	// Nothing else: not the console, not the API, not the sign-in.
	for _, p := range []string{"/", "/healthz", "/readyz", "/metrics", "/api/v1/machines", "/api/v1/cluster",
		issuer.AuthorizePath, "/nodes/x", "/index.html", issuer.DiscoveryPath + "/x"} {
		if code, body := get(t, c, http.MethodGet, base+p); code != http.StatusNotFound {
			t.Errorf("GET %s on the OIDC listener: %d %.80s, want 404", p, code, body)
		}
	}
	for _, p := range []string{issuer.TokenPath, issuer.RevokePath, issuer.LoginPath, issuer.DiscoveryPath} {
		if code, _ := get(t, c, http.MethodPost, base+p); code != http.StatusNotFound {
			t.Errorf("POST %s on the OIDC listener: %d, want 404", p, code)
		}
	}

	// The console's listener still serves everything, with its own certificate.
	mc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // the operator's self-signed certificate
	if code, _ := get(t, mc, http.MethodGet, "https://"+l.main+"/healthz"); code != http.StatusOK {
		t.Errorf("the console's /healthz: %d", code)
	}
	code, body = get(t, mc, http.MethodGet, "https://"+l.main+issuer.DiscoveryPath)
	if code != http.StatusOK || !strings.Contains(body, `"jwks_uri":"`+tokens.Issuer+issuer.KeysPath+`"`) {
		t.Errorf("the console's discovery must keep the external jwks_uri: %d %s", code, body)
	}
	// The OIDC listener presents the Ichor leaf, which the operator's roots do not trust.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+serviceName+"/healthz", nil)
	if resp, err := serviceClient(l.main, roots).Do(req); err == nil {
		_ = resp.Body.Close()
		t.Error("the console's listener presented the Ichor leaf here; the test's certificates are mixed up")
	}
}

func TestOIDCListenerWithoutIssuerServesNothing(t *testing.T) {
	l, roots := startListeners(t, false)
	c := serviceClient(l.oidc, roots)
	for _, p := range []string{issuer.DiscoveryPath, issuer.KeysPath, "/"} {
		if code, body := get(t, c, http.MethodGet, "https://"+serviceName+p); code != http.StatusNotFound {
			t.Errorf("GET %s without the issuer: %d %.80s, want 404 (never the SPA)", p, code, body)
		}
	}
}

func TestOIDCListenerStopsWithTheServer(t *testing.T) {
	l, roots := startListeners(t, true)
	c := serviceClient(l.oidc, roots)
	if code, _ := get(t, c, http.MethodGet, "https://"+serviceName+issuer.KeysPath); code != http.StatusOK {
		t.Fatalf("keys before the stop: %d", code)
	}
	l.stop()
	select {
	case err := <-l.done:
		if err != nil {
			t.Fatalf("graceful termination returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not stop")
	}
	l.done <- nil // for the cleanup
	select {
	case <-l.srv.Stopping():
	default:
		t.Error("Stopping was not closed")
	}
	for _, addr := range []string{l.main, l.oidc} {
		if conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", addr); err == nil {
			_ = conn.Close()
			t.Errorf("%s still accepts connections after the stop", addr)
		}
	}
}

// When the OIDC listener cannot serve, the console's stops too, and the error says why.
func TestOIDCListenerFailureStopsBoth(t *testing.T) {
	srv, err := server.New(server.Options{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("none") },
		Cluster:        noServices{}, Machines: noServices{}, Authenticator: tokens, Log: slog.New(slog.NewJSONHandler(logSink(), nil)),
		ShutdownTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	mainLn, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	oidcLn, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = oidcLn.Close() // the OIDC listener fails at once
	done := make(chan error, 1)
	go func() { done <- srv.ServeListeners(context.Background(), mainLn, oidcLn) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a failed listener returned no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the console kept serving after the OIDC listener failed")
	}
	if conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", mainLn.Addr().String()); err == nil {
		_ = conn.Close()
		t.Error("the console's listener still accepts connections")
	}
}
