package issuer_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

// These tests drive the issuer through its HTTP endpoints, served by
// httptest over TLS (its cookies are Secure), with real keys and tokens
// (auth.Tokens) and zitadel/oidc's protocol types. The users are an
// in-memory issuer.Users, the interface the issuer reads users through.

const (
	clientID      = "ichor-ui"
	otherClientID = "ichor-cli"
	redirect      = "https://app.test/auth/callback"
)

// memUsers is an in-memory issuer.Users: name -> password, groups, disabled.
type memUsers struct {
	mu    sync.Mutex
	users map[string]*memUser
}

type memUser struct {
	password string
	groups   []string
	disabled bool
}

func (m *memUsers) Authenticate(_ context.Context, name, password string) (identity.Identity, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[name]
	if !ok || u.password != password {
		return identity.Identity{}, "", users.ErrBadCredentials
	}
	if u.disabled {
		return identity.Identity{}, "", users.ErrDisabled
	}
	return identity.Identity{Username: identity.IchorPrefix + name, Groups: u.groups}, "fp:" + u.password, nil
}

func (m *memUsers) Lookup(_ context.Context, name string) (identity.Identity, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[name]
	if !ok || u.disabled {
		return identity.Identity{}, users.ErrDisabled
	}
	return identity.Identity{Username: identity.IchorPrefix + name, Groups: u.groups}, nil
}

func (m *memUsers) Fingerprints(_ context.Context, names []string) (map[string]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for _, n := range names {
		if u, ok := m.users[n]; ok && !u.disabled {
			out[n] = "fp:" + u.password
		} else {
			out[n] = ""
		}
	}
	return out, nil
}

// world is an issuer served over TLS with two users.
type world struct {
	srv    *httptest.Server
	tokens *auth.Tokens
	iss    *issuer.Issuer
	store  *issuer.MemoryStore
	clock  *testClock
}

// testClock is the issuer's clock, moved by the tests.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	clock, store := &testClock{now: time.Now()}, issuer.NewMemoryStore()
	key, err := auth.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tokens := &auth.Tokens{Issuer: "https://issuer.test", Key: key}
	iss, err := issuer.New(issuer.Options{
		Tokens: tokens,
		Users: &memUsers{users: map[string]*memUser{
			"alice": {password: "alice-password", groups: []string{"ichor:admin"}},
			"bob":   {password: "bob-password", groups: []string{"ichor:viewer"}},
		}},
		Clients: []issuer.Client{{ID: clientID, RedirectURIs: []string{redirect}}, {ID: otherClientID, RedirectURIs: []string{redirect}}},
		Store:   store, Now: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	iss.Mount(r)
	srv := httptest.NewTLSServer(r)
	t.Cleanup(srv.Close)
	return &world{srv: srv, tokens: tokens, iss: iss, store: store, clock: clock}
}

// browser is a client of w's server with its own cookies; it does not
// follow redirects.
func (w *world) browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := w.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

type reply struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values) reply {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
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
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func newVerifier() (verifier, challenge string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	verifier = base64.RawURLEncoding.EncodeToString(b)
	return verifier, oidc.NewSHACodeChallenge(verifier)
}

func authorizeQuery(challenge, method string) url.Values {
	q := url.Values{"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {redirect},
		"scope": {"openid offline_access"}, "state": {"st-1"}, "nonce": {"n-1"}}
	if challenge != "" {
		q.Set("code_challenge", challenge)
	}
	if method != "" {
		q.Set("code_challenge_method", method)
	}
	return q
}

var requestField = regexp.MustCompile(`name="request" value="([^"]+)"`)

// code opens the login form with the S256 challenge, signs user in and
// returns the authorization code of the redirect.
func (w *world) code(t *testing.T, c *http.Client, user, password, challenge string) string {
	t.Helper()
	page := do(t, c, http.MethodGet, w.srv.URL+issuer.AuthorizePath+"?"+authorizeQuery(challenge, "S256").Encode(), nil)
	m := requestField.FindStringSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		t.Fatalf("authorize answered %d without a login form: %s", page.status, page.body)
	}
	resp := do(t, c, http.MethodPost, w.srv.URL+issuer.LoginPath, url.Values{"request": {m[1]}, "username": {user}, "password": {password}})
	loc, err := url.Parse(resp.header.Get("Location"))
	if resp.status != http.StatusFound || err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("login answered %d, Location %q: %s", resp.status, resp.header.Get("Location"), resp.body)
	}
	return loc.Query().Get("code")
}

// tokenCall posts form to the token endpoint: the tokens on 200, else the
// OAuth error.
func (w *world) tokenCall(t *testing.T, c *http.Client, form url.Values) (int, *oidc.AccessTokenResponse, *oidc.Error) {
	t.Helper()
	form.Set("client_id", clientID)
	resp := do(t, c, http.MethodPost, w.srv.URL+issuer.TokenPath, form)
	if resp.status == http.StatusOK {
		out := &oidc.AccessTokenResponse{}
		if err := json.Unmarshal([]byte(resp.body), out); err != nil {
			t.Fatal(err)
		}
		return resp.status, out, nil
	}
	e := &oidc.Error{}
	if err := json.Unmarshal([]byte(resp.body), e); err != nil {
		t.Fatalf("the token endpoint answered %d with a body that is not an OAuth error: %s", resp.status, resp.body)
	}
	return resp.status, nil, e
}

func (w *world) exchange(t *testing.T, c *http.Client, code, verifier string) (int, *oidc.AccessTokenResponse, *oidc.Error) {
	t.Helper()
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}}
	if verifier != "" {
		form.Set("code_verifier", verifier)
	}
	return w.tokenCall(t, c, form)
}

func (w *world) refresh(t *testing.T, c *http.Client, rt string) (int, *oidc.AccessTokenResponse, *oidc.Error) {
	t.Helper()
	return w.tokenCall(t, c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// signIn runs the whole flow and returns the tokens.
func (w *world) signIn(t *testing.T, user, password string) *oidc.AccessTokenResponse {
	t.Helper()
	c := w.browser(t)
	verifier, challenge := newVerifier()
	status, tok, e := w.exchange(t, c, w.code(t, c, user, password, challenge), verifier)
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d %v", status, e)
	}
	return tok
}

// wantRefused checks an OAuth refusal of the token endpoint.
// wantRefused checks an invalid_grant refusal (RFC 6749 §5.2) saying says.
func wantRefused(t *testing.T, what string, status int, e *oidc.Error, says string) {
	t.Helper()
	if status != http.StatusBadRequest || e == nil || e.ErrorType != oidc.InvalidGrant || !strings.Contains(e.Description, says) {
		t.Fatalf("%s: got %d %+v, want 400 %s saying %q", what, status, e, oidc.InvalidGrant, says)
	}
}

// wantLive checks that the access token is accepted (its session lives).
func (w *world) wantLive(t *testing.T, what, access string) {
	t.Helper()
	if _, err := w.tokens.Verify(access); err != nil {
		t.Fatalf("%s: the access token is refused: %v", what, err)
	}
}

// wantRevoked checks that the access token is refused because its session ended.
func (w *world) wantRevoked(t *testing.T, what, access string) {
	t.Helper()
	_, err := w.tokens.Verify(access)
	if !errors.Is(err, auth.ErrInvalidToken) || !strings.Contains(err.Error(), "signed out") {
		t.Fatalf("%s: the access token is not refused as signed out: %v", what, err)
	}
}

// TestIssuerPKCEAuthorizeRefusesNoChallengeAndPlain: the authorization
// request must carry an S256 challenge; without one, or with plain, the
// client is sent back with invalid_request and no login form is shown.
func TestIssuerPKCEAuthorizeRefusesNoChallengeAndPlain(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	verifier, challenge := newVerifier()
	for _, tc := range []struct {
		name              string
		challenge, method string
		says              string
	}{
		{"no challenge", "", "", "PKCE is required"},
		{"plain", verifier, "plain", "plain is refused"},
		{"no method", challenge, "", "must be S256"},
	} {
		resp := do(t, c, http.MethodGet, w.srv.URL+issuer.AuthorizePath+"?"+authorizeQuery(tc.challenge, tc.method).Encode(), nil)
		loc, _ := url.Parse(resp.header.Get("Location"))
		if resp.status != http.StatusFound || loc == nil || !strings.HasPrefix(loc.String(), redirect+"?") ||
			loc.Query().Get("error") != string(oidc.InvalidRequest) || !strings.Contains(loc.Query().Get("error_description"), tc.says) {
			t.Errorf("%s: got %d Location %q, want a redirect to the client with invalid_request saying %q", tc.name, resp.status, resp.header.Get("Location"), tc.says)
		}
		if loc != nil && loc.Query().Get("state") != "st-1" {
			t.Errorf("%s: the refusal does not carry the client's state", tc.name)
		}
	}
	// The neighbour: S256 shows the login form.
	resp := do(t, c, http.MethodGet, w.srv.URL+issuer.AuthorizePath+"?"+authorizeQuery(challenge, "S256").Encode(), nil)
	if resp.status != http.StatusOK || !requestField.MatchString(resp.body) {
		t.Fatalf("an S256 challenge: got %d, want the login form: %s", resp.status, resp.body)
	}
}

// TestIssuerPKCEVerifier: the code is exchanged only with the verifier of
// its challenge; a wrong or missing verifier is refused, and the code,
// presented once, is gone even for the right verifier afterwards.
func TestIssuerPKCEVerifier(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	verifier, challenge := newVerifier()
	other, _ := newVerifier()

	status, _, e := w.exchange(t, c, w.code(t, c, "alice", "alice-password", challenge), other)
	wantRefused(t, "a wrong code_verifier", status, e, "code_verifier does not match")

	status, _, e = w.exchange(t, c, w.code(t, c, "alice", "alice-password", challenge), "")
	wantRefused(t, "no code_verifier", status, e, "code_verifier does not match")

	// The challenge itself is not the verifier (what plain would accept).
	status, _, e = w.exchange(t, c, w.code(t, c, "alice", "alice-password", challenge), challenge)
	wantRefused(t, "the challenge sent as the verifier", status, e, "code_verifier does not match")

	// The neighbour: the right verifier gets tokens for the user.
	code := w.code(t, c, "alice", "alice-password", challenge)
	status, tok, e := w.exchange(t, c, code, verifier)
	if status != http.StatusOK {
		t.Fatalf("the right code_verifier: %d %+v", status, e)
	}
	claims, err := w.tokens.Verify(tok.AccessToken)
	if err != nil || claims.Username != "ichor:alice" || tok.RefreshToken == "" || tok.IDToken == "" {
		t.Fatalf("the tokens of the exchange: claims %+v, error %v, refresh token set %v, ID token set %v",
			claims, err, tok.RefreshToken != "", tok.IDToken != "")
	}

	// A code refused for its verifier does not come back for the right one.
	code = w.code(t, c, "alice", "alice-password", challenge)
	status, _, e = w.exchange(t, c, code, other)
	wantRefused(t, "a wrong code_verifier", status, e, "code_verifier does not match")
	status, _, e = w.exchange(t, c, code, verifier)
	wantRefused(t, "the right verifier after a wrong one", status, e, "already used")
}

// TestIssuerCodeReuseRevokesItsTokens: a second exchange of a code is
// refused, and the session issued from the first one is revoked (RFC 6749
// §4.1.2): its access token and refresh token stop working. Another
// sign-in is untouched.
func TestIssuerCodeReuseRevokesItsTokens(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	bystander := w.signIn(t, "bob", "bob-password")

	verifier, challenge := newVerifier()
	code := w.code(t, c, "alice", "alice-password", challenge)
	status, tok, e := w.exchange(t, c, code, verifier)
	if status != http.StatusOK {
		t.Fatalf("the first exchange: %d %+v", status, e)
	}
	w.wantLive(t, "after the first exchange", tok.AccessToken)

	status, _, e = w.exchange(t, c, code, verifier)
	wantRefused(t, "the second exchange", status, e, "already used")

	w.wantRevoked(t, "the first exchange's access token after the code's reuse", tok.AccessToken)
	status, _, e = w.refresh(t, c, tok.RefreshToken)
	wantRefused(t, "the first exchange's refresh token after the code's reuse", status, e, "presented twice")

	// The neighbour: another user's session lives on.
	w.wantLive(t, "another sign-in", bystander.AccessToken)
	if status, _, e := w.refresh(t, c, bystander.RefreshToken); status != http.StatusOK {
		t.Fatalf("another sign-in's refresh: %d %+v", status, e)
	}
}

// TestIssuerCodeReuseByAnotherClient: the second presentation revokes the
// session even when it comes without the verifier (whoever holds a copy of
// the code is not the client that redeemed it).
func TestIssuerCodeReuseByAnotherClient(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	verifier, challenge := newVerifier()
	code := w.code(t, c, "alice", "alice-password", challenge)
	status, tok, e := w.exchange(t, c, code, verifier)
	if status != http.StatusOK {
		t.Fatalf("the first exchange: %d %+v", status, e)
	}
	status, _, e = w.exchange(t, w.browser(t), code, "")
	wantRefused(t, "the copy's exchange", status, e, "already used")
	w.wantRevoked(t, "the access token after the code's reuse", tok.AccessToken)
}

// TestIssuerRefreshReuseRevokesTheFamily: a refresh token is rotated on
// use (a new one each time, the old one spent); presenting a spent one
// again revokes its whole sign-in session, the newest refresh token and
// access token included. Another session is untouched.
func TestIssuerRefreshReuseRevokesTheFamily(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	bystander := w.signIn(t, "bob", "bob-password")
	first := w.signIn(t, "alice", "alice-password")

	status, second, e := w.refresh(t, c, first.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("the first refresh: %d %+v", status, e)
	}
	if second.RefreshToken == "" || second.RefreshToken == first.RefreshToken {
		t.Fatal("the refresh did not rotate the refresh token")
	}
	w.wantLive(t, "the refreshed access token", second.AccessToken)
	// The neighbour of the reuse: the newest token refreshes again.
	status, third, e := w.refresh(t, c, second.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("the rotated refresh token: %d %+v", status, e)
	}

	// Reuse of a spent token.
	status, _, e = w.refresh(t, c, first.RefreshToken)
	wantRefused(t, "a spent refresh token", status, e, "already used")

	// The whole family is gone: the newest refresh token and every access token.
	status, _, e = w.refresh(t, c, third.RefreshToken)
	wantRefused(t, "the newest refresh token after the reuse", status, e, "sign in again")
	for n, access := range []string{first.AccessToken, second.AccessToken, third.AccessToken} {
		w.wantRevoked(t, "access token "+string(rune('1'+n))+" of the family", access)
	}

	w.wantLive(t, "another sign-in", bystander.AccessToken)
	if status, _, e := w.refresh(t, c, bystander.RefreshToken); status != http.StatusOK {
		t.Fatalf("another sign-in's refresh: %d %+v", status, e)
	}
}

// TestIssuerRefreshReuseOfAnotherClientsToken: a refresh token is refused
// to a client it was not issued to, and that spends nothing: the session
// and the token live on for their client.
func TestIssuerRefreshReuseOfAnotherClientsToken(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	tok := w.signIn(t, "alice", "alice-password")
	resp := do(t, c, http.MethodPost, w.srv.URL+issuer.TokenPath,
		url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "client_id": {otherClientID}})
	if resp.status != http.StatusBadRequest || !strings.Contains(resp.body, string(oidc.InvalidGrant)) || !strings.Contains(resp.body, "issued to another client") {
		t.Fatalf("another client: got %d %s, want 400 invalid_grant", resp.status, resp.body)
	}
	w.wantLive(t, "after another client's attempt", tok.AccessToken)
	if status, _, e := w.refresh(t, c, tok.RefreshToken); status != http.StatusOK {
		t.Fatalf("the refresh token after another client's attempt: %d %+v", status, e)
	}
}

// The headless sign-in's page shows the code, escaped, and nothing else;
// an error or a missing code is said plainly.
func TestCodePage(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)

	r := do(t, c, http.MethodGet, w.srv.URL+issuer.CodePath+"?code="+url.QueryEscape(`abc"<x>`)+"&state=s", nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="sign-in-code" readonly value="abc&#34;&lt;x&gt;"`) ||
		r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the code page: %d %s", r.status, r.body)
	}

	if r := do(t, c, http.MethodGet, w.srv.URL+issuer.CodePath+"?error=access_denied", nil); r.status != http.StatusBadRequest || !strings.Contains(r.body, "the sign-in failed: access_denied") {
		t.Fatalf("an error: %d %s", r.status, r.body)
	}

	if r := do(t, c, http.MethodGet, w.srv.URL+issuer.CodePath, nil); r.status != http.StatusBadRequest || !strings.Contains(r.body, "ichor auth token --headless") {
		t.Fatalf("no code: %d %s", r.status, r.body)
	}
}

// TestSweepDeletesEndedSessions: a session is deleted once it has been over
// for an access token's lifetime, and a code never exchanged once it has
// expired for as long; a live session stays.
func TestSweepDeletesEndedSessions(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	_, challenge := newVerifier()
	w.code(t, c, "bob", "bob-password", challenge) // never exchanged
	w.signIn(t, "alice", "alice-password")
	count := func() int {
		l, err := w.store.List(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d sessions after a sign-in and a code, want 2", n)
	}
	w.clock.Add(time.Minute + 5*time.Minute + time.Second) // the code's minute, then an access token's five
	if err := w.iss.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d sessions after the code expired, want the live one only", n)
	}
	w.clock.Add(12 * time.Hour)
	if err := w.iss.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d sessions after the sign-in ended, want none", n)
	}
}
