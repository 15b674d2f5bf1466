package server_test

// Sign-in through an external OIDC provider (ichorUI.oidc.*): ichor-ui is the
// relying party of a real OpenID provider running in-process, zitadel/oidc's
// op package with its example storage (users, clients, RS256 keys), served
// over HTTPS with its own certificate that ichor-ui trusts through
// --oidc-ca-file. The browser is a cookie jar that follows redirects, as a
// person's would.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/uiserver/internal/api"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/certs"
	"github.com/maeshinshin/ichor/uiserver/internal/external"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

const (
	idpPassword     = "idp-password-secret-1"
	rpClientID      = "ichor-ui"
	rpPublicID      = "ichor-ui-public"
	rpSecret        = "rp-client-secret-xyz"
	mappedGroup     = "oidc:platform-admins"
	spaHost         = "ichor-ui.test"
	extRetryTimeout = 200 * time.Millisecond
)

// idpUsers are the provider's users, by ID (the sub claim).
type idpUsers map[string]*storage.User

func (u idpUsers) GetUserByID(id string) *storage.User { return u[id] }
func (u idpUsers) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (idpUsers) ExampleClientID() string { return "service" }

// idpStorage is the example storage plus a groups claim in the ID token.
type idpStorage struct {
	*storage.Storage
	groups map[string][]string
}

func (s *idpStorage) SetUserinfoFromRequest(ctx context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, info, req, scopes); err != nil {
		return err
	}
	if g, ok := s.groups[req.GetSubject()]; ok {
		info.AppendClaims("groups", g)
	}
	return nil
}

// idp is a running OpenID provider.
type idp struct {
	url    string
	caFile string
	leaf   *x509.Certificate
}

// reservePort returns a loopback address nothing listens on (yet).
func reservePort(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// startIDP serves an OpenID provider on addr whose clients redirect to
// callback, with a certificate of its own that ichor-ui trusts by caFile.
func startIDP(t *testing.T, addr, callback string) *idp {
	t.Helper()
	cert, leaf, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return startIDPWithCert(t, addr, callback, cert, leaf)
}

// startIDPWithCert is startIDP with a given certificate.
func startIDPWithCert(t *testing.T, addr, callback string, cert *tls.Certificate, leaf *x509.Certificate) *idp {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // a reserved port was closed and may linger briefly
		if ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	iss := "https://" + ln.Addr().String()
	u := idpUsers{
		"alice": {ID: "alice", Username: "alice@idp.test", Password: idpPassword, Email: "alice@idp.test", EmailVerified: true, PreferredLanguage: language.English},
		"bob":   {ID: "bob", Username: "bob@idp.test", Password: idpPassword, Email: "bob@idp.test", EmailVerified: true, PreferredLanguage: language.English},
		"eve:x": {ID: "eve:x", Username: "eve@idp.test", Password: idpPassword, PreferredLanguage: language.English},
	}
	st := &idpStorage{
		Storage: storage.NewStorageWithClients(u, map[string]*storage.Client{
			rpClientID: storage.WebClient(rpClientID, rpSecret, callback),
			rpPublicID: storage.NativeClient(rpPublicID, callback),
		}),
		groups: map[string][]string{
			// platform-admins is the one group the deployment maps; the
			// others must never be impersonated.
			"alice": {"platform-admins", "ichor:admin", "system:masters", "developers"},
			"bob":   {"ichor:admin", "developers"},
		},
	}
	srv := &http.Server{Handler: exampleop.SetupServer(iss, st, nil, false), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Log("provider:", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return &idp{url: iss, caFile: writeCA(t, leaf), leaf: leaf}
}

func writeCA(t *testing.T, leaf *x509.Certificate) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "idp-ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// rpUI is an ichor-ui whose login page offers the external provider.
type rpUI struct {
	url    string
	tokens *auth.Tokens
	log    *syncBuffer
	leaf   *x509.Certificate
}

type rpOptions struct {
	addr, idpURL, caFile  string
	clientID, secret      string
	usernameClaim         string
	passwords             bool // Ichor's own users too
	policy                identity.Policy
	providerRetryInterval time.Duration
}

// startRPUI serves a whole ichor-ui (API, issuer, external provider) on
// opts.addr, backed by the suite's API server under the backend's identity.
func startRPUI(t *testing.T, opts rpOptions) *rpUI {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", opts.addr)
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + ln.Addr().String()
	backendCfg, err := suite.Env.UserConfig(backendUser, "system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	clients, err := kube.New(kube.Options{Config: backendCfg, Scheme: suite.Scheme, Namespace: testNS, Policy: opts.policy})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = clients.Cache.Start(ctx) }()
	if !clients.Cache.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(log, logSink()), nil))
	tok := &auth.Tokens{Issuer: base, Key: key, Policy: opts.policy}
	hc, err := external.HTTPClient(opts.caFile)
	if err != nil {
		t.Fatal(err)
	}
	provider, err := external.New(external.Config{
		IssuerURL: opts.idpURL, ClientID: opts.clientID, ClientSecret: opts.secret,
		RedirectURL: base + issuer.ExternalCallbackPath, UsernameClaim: opts.usernameClaim,
		Policy: opts.policy, HTTPClient: hc, RetryInterval: opts.providerRetryInterval, Log: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	issOpts := issuer.Options{Tokens: tok, External: provider, Log: logger,
		Clients: []issuer.Client{{ID: oidcClientID, RedirectURIs: []string{oidcRedirect}}}}
	if opts.passwords {
		direct, err := client.New(backendCfg, client.Options{Scheme: suite.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		issOpts.Users = &users.Store{Reader: direct, Namespace: testNS}
	}
	iss, err := issuer.New(issOpts)
	if err != nil {
		t.Fatal(err)
	}
	cert, leaf, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	deps := api.Deps{Clients: clients, ClusterName: testCluster}
	machines := &api.MachineService{Deps: deps}
	srv, err := server.New(server.Options{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
		Cluster:        &api.ClusterService{Deps: deps}, Machines: machines, Encodings: machines, Authenticator: tok, Ready: func() bool { return true },
		Mount: iss.Mount, TokenCacheTTL: tokenCacheTTL, Log: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	machines.Stopping = srv.Stopping()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return &rpUI{url: base, tokens: tok, log: log, leaf: leaf}
}

// page is a response as the browser saw it.
type page struct {
	url    *url.URL
	status int
	header http.Header
	body   string
}

func (p page) location(t *testing.T) *url.URL {
	t.Helper()
	loc, err := p.url.Parse(p.header.Get("Location"))
	if err != nil || p.header.Get("Location") == "" {
		t.Fatalf("%s answered %d without a redirect: %s", p.url.Redacted(), p.status, p.body)
	}
	return loc
}

// extBrowser trusts the provider's and ichor-ui's certificates and keeps
// cookies; redirects are followed by follow, one hop at a time.
func extBrowser(t *testing.T, leaves ...*x509.Certificate) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, l := range leaves {
		roots.AddCert(l)
	}
	return &http.Client{Timeout: 30 * time.Second, Jar: jar,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func visit(t *testing.T, c *http.Client, method, u string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{url: req.URL, status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// follow follows redirects as a browser does, until one leads to the
// console's redirect URI (not served here) or a page is shown.
func follow(t *testing.T, c *http.Client, p page) page {
	t.Helper()
	for range 10 {
		if p.status < 300 || p.status >= 400 {
			return p
		}
		loc := p.location(t)
		if loc.Host == spaHost {
			return p
		}
		p = visit(t, c, http.MethodGet, loc.String(), nil)
	}
	t.Fatalf("too many redirects, last at %s", p.url.Redacted())
	return p
}

var (
	idpLoginID = regexp.MustCompile(`name="id" value="([^"]+)"`)
	providerBt = regexp.MustCompile(`<button type="submit">Sign in with ([^<]+)</button>`)
)

// loginPage opens the console's sign-in and returns the login page.
func loginPage(t *testing.T, c *http.Client, ui *rpUI, challenge string) page {
	t.Helper()
	q := url.Values{"response_type": {"code"}, "client_id": {oidcClientID}, "redirect_uri": {oidcRedirect},
		"scope": {"openid offline_access"}, "state": {"st-123"}, "nonce": {"n-456"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}}
	p := visit(t, c, http.MethodGet, ui.url+issuer.AuthorizePath+"?"+q.Encode(), nil)
	if p.status != http.StatusOK {
		t.Fatalf("authorize: %d %s", p.status, p.body)
	}
	return p
}

// extAuthorize opens the login page and returns it with its form's request id.
func extAuthorize(t *testing.T, c *http.Client, ui *rpUI, challenge string) (page, string) {
	t.Helper()
	p := loginPage(t, c, ui, challenge)
	m := requestField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("the login page has no form: %s", p.body)
	}
	return p, m[1]
}

// toProvider presses "Sign in with <provider>" and returns the redirect to the provider.
func toProvider(t *testing.T, c *http.Client, ui *rpUI, request string) page {
	t.Helper()
	p := visit(t, c, http.MethodPost, ui.url+issuer.ExternalStartPath, url.Values{"request": {request}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("the provider button answered %d: %s", p.status, p.body)
	}
	return p
}

// providerLogin follows to the provider's login page, signs in there and
// returns the provider's redirect back to ichor-ui's callback (not followed).
func providerLogin(t *testing.T, c *http.Client, toIDP page, user string) page {
	t.Helper()
	login := follow(t, c, toIDP)
	m := idpLoginID.FindStringSubmatch(login.body)
	if login.status != http.StatusOK || m == nil {
		t.Fatalf("the provider's login page: %d %s", login.status, login.body)
	}
	p := visit(t, c, http.MethodPost, login.url.ResolveReference(&url.URL{Path: "/login/username"}).String(),
		url.Values{"id": {m[1]}, "username": {user}, "password": {idpPassword}})
	// The provider's login answers with its callback, which redirects to ichor-ui's.
	p = visit(t, c, http.MethodGet, p.location(t).String(), nil)
	if cb := p.location(t); !strings.HasSuffix(cb.Path, issuer.ExternalCallbackPath) {
		t.Fatalf("the provider redirected to %s, want ichor-ui's callback", cb.Redacted())
	}
	return p
}

// spaCode checks that the sign-in ended at the console's redirect URI and returns the code.
func spaCode(t *testing.T, p page) string {
	t.Helper()
	if p.status != http.StatusFound {
		t.Fatalf("the sign-in ended with %d at %s: %s", p.status, p.url.Redacted(), p.body)
	}
	loc := p.location(t)
	if loc.Host != spaHost || loc.Query().Get("state") != "st-123" || loc.Query().Get("code") == "" {
		t.Fatalf("the sign-in redirected to %s, want %s with a code and the console's state", loc.Redacted(), oidcRedirect)
	}
	return loc.Query().Get("code")
}

func uiToken(t *testing.T, c *http.Client, ui *rpUI, form url.Values) (int, *oidc.AccessTokenResponse, map[string]any) {
	t.Helper()
	form.Set("client_id", oidcClientID)
	p := visit(t, c, http.MethodPost, ui.url+issuer.TokenPath, form)
	out, e := &oidc.AccessTokenResponse{}, map[string]any{}
	target := any(&e)
	if p.status == http.StatusOK {
		target = out
	}
	if err := json.Unmarshal([]byte(p.body), target); err != nil {
		t.Fatalf("token endpoint: %d %s", p.status, p.body)
	}
	return p.status, out, e
}

// extSignIn runs the whole flow as a browser and returns ichor-ui's tokens.
func extSignIn(t *testing.T, ui *rpUI, prov *idp, user string) *oidc.AccessTokenResponse {
	t.Helper()
	c := extBrowser(t, ui.leaf, prov.leaf)
	verifier, challenge := pkce()
	_, req := extAuthorize(t, c, ui, challenge)
	back := providerLogin(t, c, toProvider(t, c, ui, req), user)
	code := spaCode(t, follow(t, c, back))
	status, tok, e := uiToken(t, c, ui, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {oidcRedirect}, "code_verifier": {verifier}})
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d %v", status, e)
	}
	return tok
}

func uiREST(t *testing.T, ui *rpUI, path, access string) (int, map[string]any) {
	t.Helper()
	c := extBrowser(t, ui.leaf)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, ui.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+access)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]any{}
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &out) != nil {
		out["raw"] = string(b)
	}
	return resp.StatusCode, out
}

// mapGroup lets the backend impersonate mappedGroup and binds it to
// ichor-viewer, as the chart does for a group it names.
func mapGroup(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "ichor-ui-oidc-groups"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"groups"}, Verbs: []string{"impersonate"}, ResourceNames: []string{mappedGroup}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ichor-ui-oidc-groups"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-ui-oidc-groups"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ichor-ui", Namespace: testNS}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "oidc-platform-admins-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: mappedGroup}}},
	}
	for _, o := range objs {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs {
			_ = admin.Delete(context.Background(), o)
		}
	})
}

// TestExternalSignIn signs in users of the external provider end to end and
// checks what they may do, what is refused, and what the log holds.
func TestExternalSignIn(t *testing.T) {
	mapGroup(t)
	uiAddr := reservePort(t)
	prov := startIDP(t, "127.0.0.1:0", "https://"+uiAddr+issuer.ExternalCallbackPath)
	policy := identity.Policy{ExtraGroups: []string{mappedGroup}}
	ui := startRPUI(t, rpOptions{addr: uiAddr, idpURL: prov.url, caFile: prov.caFile, clientID: rpClientID, secret: rpSecret,
		passwords: true, policy: policy})

	t.Run("login page offers the provider and the password form", func(t *testing.T) {
		c := extBrowser(t, ui.leaf)
		_, challenge := pkce()
		p, _ := extAuthorize(t, c, ui, challenge)
		m := providerBt.FindStringSubmatch(p.body)
		if m == nil || m[1] != strings.TrimPrefix(prov.url, "https://") || !strings.Contains(p.body, `type="password"`) {
			t.Fatalf("the login page lacks the provider's button or the password form: %s", p.body)
		}
	})

	var alice *oidc.AccessTokenResponse
	t.Run("mapped group is impersonated, others dropped", func(t *testing.T) {
		alice = extSignIn(t, ui, prov, "alice@idp.test")
		claims, err := ui.tokens.Verify(alice.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		if claims.Username != "oidc:alice" || len(claims.Groups) != 1 || claims.Groups[0] != mappedGroup {
			t.Fatalf("signed in as %q in %v, want oidc:alice in [%s] only", claims.Username, claims.Groups, mappedGroup)
		}
		code, who := uiREST(t, ui, "/api/v1/whoami", alice.AccessToken)
		if code != http.StatusOK || who["username"] != "oidc:alice" || toJSON(who["groups"]) != `["`+mappedGroup+`"]` {
			t.Fatalf("whoami: %d %v", code, who)
		}
		// The API server sees the mapped group: it grants ichor-viewer.
		if code, body := uiREST(t, ui, "/api/v1/machines", alice.AccessToken); code != http.StatusOK {
			t.Fatalf("alice (bound through %s) could not list machines: %d %v", mappedGroup, code, body)
		}
	})

	t.Run("unmapped groups give nothing", func(t *testing.T) {
		bob := extSignIn(t, ui, prov, "bob@idp.test")
		claims, err := ui.tokens.Verify(bob.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		// The provider's "ichor:admin" became oidc:ichor:admin and was dropped.
		if claims.Username != "oidc:bob" || len(claims.Groups) != 0 {
			t.Fatalf("signed in as %q in %v, want oidc:bob in no group", claims.Username, claims.Groups)
		}
		code, body := uiREST(t, ui, "/api/v1/machines", bob.AccessToken)
		if code != http.StatusForbidden || !strings.Contains(toJSON(body), "oidc:bob") {
			t.Fatalf("bob listed machines with groups the provider named but the deployment did not: %d %v", code, body)
		}
	})

	t.Run("refresh rotates and keeps the identity, reuse revokes the family", func(t *testing.T) {
		if alice == nil {
			t.Fatal("the sign-in above failed")
		}
		c := extBrowser(t, ui.leaf)
		first, _ := ui.tokens.Verify(alice.AccessToken)
		status, next, e := uiToken(t, c, ui, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {alice.RefreshToken}})
		if status != http.StatusOK || next.RefreshToken == alice.RefreshToken {
			t.Fatalf("refresh: %d %v", status, e)
		}
		claims, err := ui.tokens.Verify(next.AccessToken)
		if err != nil || claims.Username != "oidc:alice" || claims.Session != first.Session || len(claims.Groups) != 1 || claims.Groups[0] != mappedGroup {
			t.Fatalf("refreshed token: %+v %v", claims, err)
		}
		if code, _ := uiREST(t, ui, "/api/v1/machines", next.AccessToken); code != http.StatusOK {
			t.Fatalf("the API refused a refreshed token: %d", code)
		}
		// Reuse of the first refresh token revokes the family.
		if status, _, _ := uiToken(t, c, ui, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {alice.RefreshToken}}); status != http.StatusBadRequest {
			t.Fatalf("a reused refresh token got %d", status)
		}
		if status, _, _ := uiToken(t, c, ui, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {next.RefreshToken}}); status != http.StatusBadRequest {
			t.Fatalf("the family survived a reuse: %d", status)
		}
	})

	t.Run("tampered state is refused", func(t *testing.T) {
		c := extBrowser(t, ui.leaf, prov.leaf)
		_, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		back := providerLogin(t, c, toProvider(t, c, ui, req), "alice@idp.test")
		cb := back.location(t)
		q := cb.Query()
		q.Set("state", q.Get("state")+"x")
		tampered := *cb
		tampered.RawQuery = q.Encode()
		p := visit(t, c, http.MethodGet, tampered.String(), nil)
		if p.status != http.StatusBadRequest || p.header.Get("Location") != "" || !strings.Contains(p.body, "state") {
			t.Fatalf("a tampered state got %d (Location %q): %s", p.status, p.header.Get("Location"), p.body)
		}
		// The genuine answer still completes the sign-in: the refusal was the state's.
		spaCode(t, follow(t, c, back))
		// A state answers once.
		if p := visit(t, c, http.MethodGet, cb.String(), nil); p.status != http.StatusBadRequest || p.header.Get("Location") != "" {
			t.Fatalf("a used state was accepted again: %d", p.status)
		}
	})

	t.Run("callback in another browser is refused", func(t *testing.T) {
		c := extBrowser(t, ui.leaf, prov.leaf)
		_, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		back := providerLogin(t, c, toProvider(t, c, ui, req), "alice@idp.test")
		other := extBrowser(t, ui.leaf, prov.leaf)
		p := visit(t, other, http.MethodGet, back.location(t).String(), nil)
		if p.status != http.StatusBadRequest || p.header.Get("Location") != "" || !strings.Contains(p.body, "another browser") {
			t.Fatalf("a callback in another browser got %d (Location %q): %s", p.status, p.header.Get("Location"), p.body)
		}
	})

	t.Run("tampered nonce fails verification", func(t *testing.T) {
		c := extBrowser(t, ui.leaf, prov.leaf)
		_, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		toIDP := toProvider(t, c, ui, req)
		authURL := toIDP.location(t)
		q := authURL.Query()
		if q.Get("nonce") == "" || q.Get("state") == "" || q.Get("code_challenge_method") != "S256" {
			t.Fatalf("the provider's authorization URL lacks nonce, state or PKCE: %s", authURL.Redacted())
		}
		q.Set("nonce", "attacker-nonce")
		authURL.RawQuery = q.Encode()
		toIDP.header.Set("Location", authURL.String())
		p := follow(t, c, providerLogin(t, c, toIDP, "alice@idp.test"))
		if p.status != http.StatusUnauthorized || p.header.Get("Location") != "" || !strings.Contains(p.body, "failed verification (nonce does not match)") {
			t.Fatalf("an ID token with another nonce got %d (Location %q): %s", p.status, p.header.Get("Location"), p.body)
		}
		// The page offers the provider again: the sign-in may be retried.
		if providerBt.FindStringSubmatch(p.body) == nil {
			t.Errorf("the refusal page does not offer the provider again: %s", p.body)
		}
	})

	t.Run("tampered PKCE challenge is refused by the provider", func(t *testing.T) {
		c := extBrowser(t, ui.leaf, prov.leaf)
		_, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		toIDP := toProvider(t, c, ui, req)
		authURL := toIDP.location(t)
		q := authURL.Query()
		_, other := pkce()
		q.Set("code_challenge", other)
		authURL.RawQuery = q.Encode()
		toIDP.header.Set("Location", authURL.String())
		p := follow(t, c, providerLogin(t, c, toIDP, "alice@idp.test"))
		if p.status != http.StatusUnauthorized || p.header.Get("Location") != "" || !strings.Contains(p.body, "refused to redeem the authorization code") {
			t.Fatalf("a code bound to another PKCE challenge got %d (Location %q): %s", p.status, p.header.Get("Location"), p.body)
		}
	})

	t.Run("a user name the policy refuses", func(t *testing.T) {
		c := extBrowser(t, ui.leaf, prov.leaf)
		_, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		p := follow(t, c, providerLogin(t, c, toProvider(t, c, ui, req), "eve@idp.test"))
		if p.status != http.StatusUnauthorized || p.header.Get("Location") != "" || !strings.Contains(p.body, "cannot name a Kubernetes user") {
			t.Fatalf("sub %q got %d: %s", "eve:x", p.status, p.body)
		}
	})

	t.Run("the access log holds no code, token or secret", func(t *testing.T) {
		c := extBrowser(t, ui.leaf, prov.leaf)
		verifier, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		toIDP := toProvider(t, c, ui, req)
		authQ := toIDP.location(t).Query()
		back := providerLogin(t, c, toIDP, "alice@idp.test")
		idpCode := back.location(t).Query().Get("code")
		code := spaCode(t, follow(t, c, back))
		_, tok, _ := uiToken(t, c, ui, url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {oidcRedirect}, "code_verifier": {verifier}})
		_, next, _ := uiToken(t, c, ui, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}})
		log := ui.log.String()
		if !strings.Contains(log, issuer.ExternalCallbackPath) || !strings.Contains(log, `"user":"oidc:alice"`) {
			t.Fatal("the log does not have the external sign-in; the check would prove nothing")
		}
		for what, v := range map[string]string{
			"client secret": rpSecret, "provider password": idpPassword, "provider code": idpCode,
			"provider state": authQ.Get("state"), "provider nonce": authQ.Get("nonce"), "PKCE challenge": authQ.Get("code_challenge"),
			"code": code, "verifier": verifier, "access token": tok.AccessToken, "refresh token": tok.RefreshToken,
			"ID token": tok.IDToken, "rotated refresh token": next.RefreshToken, "login request id": req,
		} {
			if v == "" {
				t.Fatalf("%s is empty; the check would prove nothing", what)
			}
			if strings.Contains(log, v) {
				t.Errorf("the access log contains the %s", what)
			}
		}
	})
}

// TestExternalProviderDownAtStart starts ichor-ui while the provider is
// down, as the only way to sign in: the login page says the provider is
// unavailable, and once it is up a public client (PKCE, no secret) signs in.
// A provider whose ID token lacks the username claim gets a clear refusal.
func TestExternalProviderDownAtStart(t *testing.T) {
	uiAddr, idpAddr := reservePort(t), reservePort(t)
	callback := "https://" + uiAddr + issuer.ExternalCallbackPath
	// The provider's certificate is made now (ichor-ui reads --oidc-ca-file
	// at start); the provider itself starts later.
	idpCert, idpLeaf, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ui := startRPUI(t, rpOptions{addr: uiAddr, idpURL: "https://" + idpAddr, caFile: writeCA(t, idpLeaf), clientID: rpPublicID,
		policy: identity.Policy{}, providerRetryInterval: extRetryTimeout})

	c := extBrowser(t, ui.leaf, idpLeaf)
	_, challenge := pkce()
	p := loginPage(t, c, ui, challenge)
	if !strings.Contains(p.body, "Sign-in with "+idpAddr+" is unavailable") || providerBt.MatchString(p.body) || strings.Contains(p.body, `type="password"`) {
		t.Fatalf("with the provider down the login page should say so, with no button and no password form: %s", p.body)
	}
	if r := visit(t, c, http.MethodPost, ui.url+issuer.LoginPath, url.Values{"request": {"any"}, "username": {"x"}, "password": {"y"}}); r.status != http.StatusBadRequest || !strings.Contains(r.body, "password is off") {
		t.Fatalf("a password sign-in with Ichor's users off: %d %s", r.status, r.body)
	}

	startIDPWithCert(t, idpAddr, callback, idpCert, idpLeaf)
	deadline := time.Now().Add(30 * time.Second)
	for {
		p = loginPage(t, c, ui, challenge)
		if providerBt.MatchString(p.body) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the login page did not offer the provider once it was up: %s", p.body)
		}
		time.Sleep(extRetryTimeout)
	}
	verifier, challenge := pkce()
	_, req := extAuthorize(t, c, ui, challenge)
	code := spaCode(t, follow(t, c, providerLogin(t, c, toProvider(t, c, ui, req), "bob@idp.test")))
	status, tok, e := uiToken(t, c, ui, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {oidcRedirect}, "code_verifier": {verifier}})
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d %v", status, e)
	}
	if claims, err := ui.tokens.Verify(tok.AccessToken); err != nil || claims.Username != "oidc:bob" || len(claims.Groups) != 0 {
		t.Fatalf("signed in as %+v (%v), want oidc:bob in no group", claims, err)
	}

	t.Run("missing username claim", func(t *testing.T) {
		addr := reservePort(t)
		prov := startIDP(t, "127.0.0.1:0", "https://"+addr+issuer.ExternalCallbackPath)
		// The provider puts no e-mail in its ID tokens (only in userinfo).
		ui := startRPUI(t, rpOptions{addr: addr, idpURL: prov.url, caFile: prov.caFile, clientID: rpClientID, secret: rpSecret,
			usernameClaim: "email", policy: identity.Policy{}})
		c := extBrowser(t, ui.leaf, prov.leaf)
		_, challenge := pkce()
		_, req := extAuthorize(t, c, ui, challenge)
		p := follow(t, c, providerLogin(t, c, toProvider(t, c, ui, req), "alice@idp.test"))
		if p.status != http.StatusUnauthorized || p.header.Get("Location") != "" || !strings.Contains(p.body, `has no &#34;email&#34; claim`) {
			t.Fatalf("an ID token without the username claim got %d: %s", p.status, p.body)
		}
	})
}
