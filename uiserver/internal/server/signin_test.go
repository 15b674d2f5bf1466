package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
)

const (
	oidcClientID  = "ichor-ui"
	oidcRedirect  = "https://ichor-ui.test/auth/callback" //nolint:gosec // a URL, not a credential
	tokenCacheTTL = 300 * time.Millisecond
)

// newUser creates an IchorUser with roles and sets its password as the demo does.
func newUser(t *testing.T, name, password string, roles ...string) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Create(ctx, &ichorv1alpha1.IchorUser{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       ichorv1alpha1.IchorUserSpec{DisplayName: name, Roles: roles},
	}); err != nil {
		t.Fatal(err)
	}
	if err := userpass.Set(ctx, admin, testNS, name, password); err != nil {
		t.Fatal(err)
	}
}

func keyOf(name string) client.ObjectKey { return client.ObjectKey{Namespace: testNS, Name: name} }

// browser is a test client: a cookie jar, redirects not followed.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := httpClient()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

func pkce() (verifier, challenge string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	verifier = base64.RawURLEncoding.EncodeToString(b)
	return verifier, oidc.NewSHACodeChallenge(verifier)
}

// reply is an HTTP answer, its body read and closed.
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
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

var requestField = regexp.MustCompile(`name="request" value="([^"]+)"`)

// authorize opens the login form and returns the form's request (sealed).
func authorize(t *testing.T, c *http.Client, challenge string) string {
	t.Helper()
	return authorizeAt(t, c, baseURL, challenge)
}

// authorizeAt is authorize at the ichor-ui replica serving base.
func authorizeAt(t *testing.T, c *http.Client, base, challenge string) string {
	t.Helper()
	q := url.Values{"response_type": {"code"}, "client_id": {oidcClientID}, "redirect_uri": {oidcRedirect},
		"scope": {"openid profile offline_access"}, "state": {"st-123"}, "nonce": {"n-456"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}}
	resp := do(t, c, http.MethodGet, base+"/oidc/authorize?"+q.Encode(), nil)
	if resp.status != http.StatusOK {
		t.Fatalf("authorize: %d %s", resp.status, resp.body)
	}
	m := requestField.FindStringSubmatch(resp.body)
	if m == nil || !strings.Contains(resp.body, `type="password"`) {
		t.Fatalf("authorize did not show the login form: %s", resp.body)
	}
	return m[1]
}

// login posts the form and returns the response and its body.
func login(t *testing.T, c *http.Client, request, user, password string) reply {
	t.Helper()
	return loginAt(t, c, baseURL, request, user, password)
}

// loginAt is login at the ichor-ui replica serving base.
func loginAt(t *testing.T, c *http.Client, base, request, user, password string) reply {
	t.Helper()
	return do(t, c, http.MethodPost, base+"/oidc/login",
		url.Values{"request": {request}, "username": {user}, "password": {password}})
}

// codeFrom checks the redirect to the client and returns its code.
func codeFrom(t *testing.T, resp reply) string {
	t.Helper()
	if resp.status != http.StatusFound {
		t.Fatalf("login: %d %s", resp.status, resp.body)
	}
	loc, err := url.Parse(resp.header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(loc.String(), oidcRedirect+"?") || loc.Query().Get("state") != "st-123" || loc.Query().Get("code") == "" {
		t.Fatalf("login redirected to %s, want %s with the code and state", loc.Redacted(), oidcRedirect)
	}
	return loc.Query().Get("code")
}

// loginCode posts the form and returns the code of the redirect.
func loginCode(t *testing.T, c *http.Client, request, user, password string) string {
	t.Helper()
	return codeFrom(t, login(t, c, request, user, password))
}

// tokenCall posts to the token endpoint and decodes the answer.
func tokenCall(t *testing.T, c *http.Client, form url.Values) (int, *oidc.AccessTokenResponse, map[string]any) {
	t.Helper()
	return tokenCallAt(t, c, baseURL, form)
}

// tokenCallAt is tokenCall at the ichor-ui replica serving base.
func tokenCallAt(t *testing.T, c *http.Client, base string, form url.Values) (int, *oidc.AccessTokenResponse, map[string]any) {
	t.Helper()
	form.Set("client_id", oidcClientID)
	resp := do(t, c, http.MethodPost, base+"/oidc/token", form)
	out := &oidc.AccessTokenResponse{}
	errBody := map[string]any{}
	if resp.status == http.StatusOK {
		if err := json.Unmarshal([]byte(resp.body), out); err != nil {
			t.Fatal(err)
		}
	} else if err := json.Unmarshal([]byte(resp.body), &errBody); err != nil {
		t.Fatalf("token endpoint answered %d with a body that is not JSON: %s", resp.status, resp.body)
	}
	return resp.status, out, errBody
}

func exchange(t *testing.T, c *http.Client, code, verifier string) (int, *oidc.AccessTokenResponse, map[string]any) {
	t.Helper()
	return tokenCall(t, c, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {oidcRedirect}, "code_verifier": {verifier}})
}

func refreshWith(t *testing.T, c *http.Client, rt string) (int, *oidc.AccessTokenResponse, map[string]any) {
	t.Helper()
	return tokenCall(t, c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// signIn runs the whole code + PKCE flow and returns the tokens.
func signIn(t *testing.T, user, password string) *oidc.AccessTokenResponse {
	t.Helper()
	c := browser(t)
	verifier, challenge := pkce()
	req := authorize(t, c, challenge)
	code := loginCode(t, c, req, user, password)
	status, tok, e := exchange(t, c, code, verifier)
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d %v", status, e)
	}
	return tok
}

// apiStatus lists machines with the access token and returns the status.
func apiStatus(t *testing.T, access string) int {
	t.Helper()
	code, _ := rest(t, httpClient(), http.MethodGet, "/api/v1/machines", access, "")
	return code
}

// eventuallyRefused waits (beyond the verification cache window) until the
// API refuses access.
func eventuallyRefused(t *testing.T, access string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for apiStatus(t, access) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatal("the API still accepts the access token of a revoked session")
		}
		time.Sleep(tokenCacheTTL / 2)
	}
}

func TestSignInDiscoveryAndKeys(t *testing.T) {
	c := httpClient()
	resp := do(t, c, http.MethodGet, baseURL+"/.well-known/openid-configuration", nil)
	if resp.status != http.StatusOK {
		t.Fatalf("discovery: %d %s", resp.status, resp.body)
	}
	d := &oidc.DiscoveryConfiguration{}
	if err := json.Unmarshal([]byte(resp.body), d); err != nil {
		t.Fatal(err)
	}
	if d.Issuer != tokens.Issuer || d.RevocationEndpoint != tokens.Issuer+"/oidc/revoke" ||
		d.TokenEndpoint != tokens.Issuer+"/oidc/token" || d.AuthorizationEndpoint != tokens.Issuer+"/oidc/authorize" {
		t.Errorf("discovery endpoints: %s", resp.body)
	}
	if len(d.CodeChallengeMethodsSupported) != 1 || d.CodeChallengeMethodsSupported[0] != oidc.CodeChallengeMethodS256 {
		t.Errorf("code_challenge_methods_supported = %v, want only S256", d.CodeChallengeMethodsSupported)
	}
	resp = do(t, c, http.MethodGet, baseURL+"/oidc/keys", nil)
	if resp.status != http.StatusOK {
		t.Fatalf("keys: %d %s", resp.status, resp.body)
	}
	set := jose.JSONWebKeySet{}
	if err := json.Unmarshal([]byte(resp.body), &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 || set.Keys[0].KeyID != tokens.Key.ID || !set.Keys[0].IsPublic() {
		t.Fatalf("JWKS: %s", resp.body)
	}
}

func TestSignInCodeFlowWithPKCE(t *testing.T) {
	newUser(t, "flora", "flora-password-1", ichorv1alpha1.UserRoleViewer)
	tok := signIn(t, "flora", "flora-password-1")
	if tok.TokenType != oidc.BearerToken || tok.RefreshToken == "" || tok.IDToken == "" || tok.ExpiresIn == 0 {
		t.Fatalf("token response lacks a part: type %q, refresh %t, id token %t, expires_in %d",
			tok.TokenType, tok.RefreshToken != "", tok.IDToken != "", tok.ExpiresIn)
	}
	claims, err := tokens.Verify(tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Username != "ichor:flora" || len(claims.Groups) != 1 || claims.Groups[0] != "ichor:viewer" || claims.Session == "" {
		t.Fatalf("access token names %q in %v (sid set: %t), want ichor:flora in [ichor:viewer]", claims.Username, claims.Groups, claims.Session != "")
	}
	if code := apiStatus(t, tok.AccessToken); code != http.StatusOK {
		t.Fatalf("the API refused the issued access token: %d", code)
	}
}

func TestSignInWrongPasswordSaysNothingAboutTheUser(t *testing.T) {
	newUser(t, "walt", "walt-password-1", ichorv1alpha1.UserRoleViewer)
	c := browser(t)
	_, challenge := pkce()
	req := authorize(t, c, challenge)
	wrong := login(t, c, req, "walt", "not-the-password")
	unknown := login(t, c, req, "nobody-here", "not-the-password")
	for _, r := range []reply{wrong, unknown} {
		if r.status != http.StatusUnauthorized || r.header.Get("Location") != "" {
			t.Fatalf("a bad sign-in answered %d (Location %q), want 401 and no redirect", r.status, r.header.Get("Location"))
		}
		if !strings.Contains(r.body, "wrong user name or password") {
			t.Errorf("the refusal does not say what was wrong: %s", r.body)
		}
	}
	strip := func(s string) string {
		// The sealed form differs at every page (a fresh nonce); nothing else may.
		s = requestField.ReplaceAllString(s, `name="request" value="F"`)
		return strings.ReplaceAll(strings.ReplaceAll(s, "nobody-here", "U"), "walt", "U")
	}
	if strip(wrong.body) != strip(unknown.body) {
		t.Errorf("an unknown user and a wrong password get different pages:\n%s\n---\n%s", wrong.body, unknown.body)
	}
	// The same form still works with the right password.
	loginCode(t, c, req, "walt", "walt-password-1")

	// Five wrong passwords end the form: the browser posts the form each
	// page shows, and the fifth page shows none; the sign-in starts again.
	first := authorize(t, c, challenge)
	req = first
	var r reply
	for n := range 5 {
		r = login(t, c, req, "walt", "not-the-password")
		if r.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", n+1, r.status)
		}
		if n < 4 {
			m := requestField.FindStringSubmatch(r.body)
			if m == nil {
				t.Fatalf("the page after wrong password %d shows no form", n+1)
			}
			req = m[1]
		}
	}
	if requestField.MatchString(r.body) || !strings.Contains(r.body, "start the sign-in again") {
		t.Fatalf("a form survived five wrong passwords: %s", r.body)
	}
	// A form is sealed, not stored: an older copy posted again is not
	// counted by the form, but by the user name's back-off, which holds it.
	if r := login(t, c, first, "walt", "walt-password-1"); !isRateLimited(t, r) {
		t.Fatalf("an older copy of the form after five wrong passwords: %d, want 429 from the user name's back-off", r.status)
	}
}

func TestSignInPKCE(t *testing.T) {
	newUser(t, "pia", "pia-password-12", ichorv1alpha1.UserRoleViewer)
	t.Run("verifier mismatch", func(t *testing.T) {
		c := browser(t)
		verifier, challenge := pkce()
		code := loginCode(t, c, authorize(t, c, challenge), "pia", "pia-password-12")
		other, _ := pkce()
		status, _, e := exchange(t, c, code, other)
		if status != http.StatusBadRequest || e["error"] != "invalid_grant" || !strings.Contains(e["error_description"].(string), "code_verifier") {
			t.Fatalf("a wrong verifier got %d %v, want 400 invalid_grant naming the code_verifier", status, e)
		}
		// The code was spent by the failed attempt.
		if status, _, _ := exchange(t, c, code, verifier); status != http.StatusBadRequest {
			t.Fatalf("a code was accepted after a failed exchange: %d", status)
		}
	})
	t.Run("plain refused", func(t *testing.T) {
		c := browser(t)
		q := url.Values{"response_type": {"code"}, "client_id": {oidcClientID}, "redirect_uri": {oidcRedirect},
			"scope": {"openid"}, "state": {"s"}, "code_challenge": {"plain-verifier-plain-verifier-plain-verifier"}, "code_challenge_method": {"plain"}}
		resp := do(t, c, http.MethodGet, baseURL+"/oidc/authorize?"+q.Encode(), nil)
		loc, _ := url.Parse(resp.header.Get("Location"))
		if resp.status != http.StatusFound || loc.Query().Get("error") != "invalid_request" || !strings.Contains(loc.Query().Get("error_description"), "S256") {
			t.Fatalf("plain PKCE got %d %s, want a redirect with invalid_request naming S256", resp.status, loc)
		}
		q.Del("code_challenge")
		q.Del("code_challenge_method")
		resp = do(t, c, http.MethodGet, baseURL+"/oidc/authorize?"+q.Encode(), nil)
		loc, _ = url.Parse(resp.header.Get("Location"))
		if resp.status != http.StatusFound || loc.Query().Get("error") != "invalid_request" {
			t.Fatalf("no PKCE got %d %s, want invalid_request", resp.status, loc)
		}
	})
	t.Run("unregistered redirect is not followed", func(t *testing.T) {
		c := browser(t)
		_, challenge := pkce()
		q := url.Values{"response_type": {"code"}, "client_id": {oidcClientID}, "redirect_uri": {"https://evil.test/cb"},
			"scope": {"openid"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}
		resp := do(t, c, http.MethodGet, baseURL+"/oidc/authorize?"+q.Encode(), nil)
		if resp.status != http.StatusBadRequest || resp.header.Get("Location") != "" {
			t.Fatalf("an unregistered redirect_uri got %d Location %q, want 400 and no redirect", resp.status, resp.header.Get("Location"))
		}
	})
}

func TestSignInRefreshRotation(t *testing.T) {
	newUser(t, "rory", "rory-password-1", ichorv1alpha1.UserRoleOperator)
	c := httpClient()
	tok := signIn(t, "rory", "rory-password-1")
	first, _ := tokens.Verify(tok.AccessToken)
	seen := map[string]bool{tok.RefreshToken: true}
	prev := tok.RefreshToken
	for range 3 {
		status, next, e := refreshWith(t, c, prev)
		if status != http.StatusOK {
			t.Fatalf("refresh: %d %v", status, e)
		}
		if seen[next.RefreshToken] || next.RefreshToken == "" {
			t.Fatal("the refresh did not rotate the refresh token")
		}
		seen[next.RefreshToken] = true
		claims, err := tokens.Verify(next.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		if claims.Session != first.Session || claims.Username != "ichor:rory" {
			t.Fatalf("refreshed token is for %q in another session (%t)", claims.Username, claims.Session != first.Session)
		}
		if code := apiStatus(t, next.AccessToken); code != http.StatusOK {
			t.Fatalf("the API refused a refreshed access token: %d", code)
		}
		prev = next.RefreshToken
	}
	// The roles are read again at each refresh.
	u := &ichorv1alpha1.IchorUser{}
	if err := admin.Get(context.Background(), keyOf("rory"), u); err != nil {
		t.Fatal(err)
	}
	u.Spec.Roles = []string{ichorv1alpha1.UserRoleViewer}
	if err := admin.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	status, next, e := refreshWith(t, c, prev)
	if status != http.StatusOK {
		t.Fatalf("refresh: %d %v", status, e)
	}
	if claims, _ := tokens.Verify(next.AccessToken); claims == nil || len(claims.Groups) != 1 || claims.Groups[0] != "ichor:viewer" {
		t.Fatalf("a refresh after a role change kept the old groups")
	}
}

func TestSignInRefreshReuseRevokesTheFamily(t *testing.T) {
	newUser(t, "reza", "reza-password-1", ichorv1alpha1.UserRoleViewer)
	c := httpClient()
	tok := signIn(t, "reza", "reza-password-1")
	other := signIn(t, "reza", "reza-password-1") // another sign-in session of the same user
	status, second, e := refreshWith(t, c, tok.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("refresh: %d %v", status, e)
	}
	if code := apiStatus(t, second.AccessToken); code != http.StatusOK {
		t.Fatalf("the API refused a fresh access token: %d", code)
	}
	// The first refresh token again: reuse.
	status, _, e = refreshWith(t, c, tok.RefreshToken)
	if status != http.StatusBadRequest || e["error"] != "invalid_grant" || !strings.Contains(e["error_description"].(string), "already used") {
		t.Fatalf("a reused refresh token got %d %v, want 400 invalid_grant saying it was already used", status, e)
	}
	// Every token of that session is dead: the rotated refresh token and both access tokens.
	if status, _, _ := refreshWith(t, c, second.RefreshToken); status != http.StatusBadRequest {
		t.Fatalf("the family's newest refresh token still works after reuse: %d", status)
	}
	eventuallyRefused(t, second.AccessToken)
	eventuallyRefused(t, tok.AccessToken)
	// The other session is untouched.
	if code := apiStatus(t, other.AccessToken); code != http.StatusOK {
		t.Fatalf("reuse in one session revoked another: %d", code)
	}
	if status, _, e := refreshWith(t, c, other.RefreshToken); status != http.StatusOK {
		t.Fatalf("reuse in one session revoked another's refresh: %d %v", status, e)
	}
}

func TestSignInRevocation(t *testing.T) {
	newUser(t, "remy", "remy-password-1", ichorv1alpha1.UserRoleViewer)
	c := httpClient()
	revoke := func(tok string) int {
		resp := do(t, c, http.MethodPost, baseURL+"/oidc/revoke", url.Values{"token": {tok}, "client_id": {oidcClientID}, "token_type_hint": {"refresh_token"}})
		if resp.status != http.StatusOK {
			t.Logf("revoke answered %s", resp.body)
		}
		return resp.status
	}
	t.Run("refresh token", func(t *testing.T) {
		tok := signIn(t, "remy", "remy-password-1")
		if code := revoke(tok.RefreshToken); code != http.StatusOK {
			t.Fatalf("revoke: %d", code)
		}
		if status, _, e := refreshWith(t, c, tok.RefreshToken); status != http.StatusBadRequest || e["error"] != "invalid_grant" {
			t.Fatalf("a revoked refresh token got %d %v", status, e)
		}
		eventuallyRefused(t, tok.AccessToken)
	})
	t.Run("access token", func(t *testing.T) {
		tok := signIn(t, "remy", "remy-password-1")
		if code := revoke(tok.AccessToken); code != http.StatusOK {
			t.Fatalf("revoke: %d", code)
		}
		if status, _, _ := refreshWith(t, c, tok.RefreshToken); status != http.StatusBadRequest {
			t.Fatalf("the session's refresh token survived the revocation of its access token: %d", status)
		}
		eventuallyRefused(t, tok.AccessToken)
	})
	t.Run("unknown token", func(t *testing.T) {
		if code := revoke("no-such-token"); code != http.StatusOK {
			t.Fatalf("RFC 7009 §2.2 answers 200 for an unknown token; got %d", code)
		}
	})
}

func TestSignInDisabledUser(t *testing.T) {
	newUser(t, "dora", "dora-password-1", ichorv1alpha1.UserRoleViewer)
	tok := signIn(t, "dora", "dora-password-1")
	u := &ichorv1alpha1.IchorUser{}
	if err := admin.Get(context.Background(), keyOf("dora"), u); err != nil {
		t.Fatal(err)
	}
	u.Spec.Disabled = true
	if err := admin.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if status, _, e := refreshWith(t, httpClient(), tok.RefreshToken); status != http.StatusBadRequest || !strings.Contains(e["error_description"].(string), "disabled") {
		t.Fatalf("a disabled user's refresh got %d %v", status, e)
	}
	eventuallyRefused(t, tok.AccessToken)
	c := browser(t)
	_, challenge := pkce()
	resp := login(t, c, authorize(t, c, challenge), "dora", "dora-password-1")
	if resp.status != http.StatusForbidden {
		t.Fatalf("a disabled user signed in: %d", resp.status)
	}
}

// TestSignInLeavesNoSecretInTheLog runs a sign-in, refreshes and revokes, and
// looks for the password, its hash and every token in the access log.
func TestSignInLeavesNoSecretInTheLog(t *testing.T) {
	const password = "log-password-xyz"
	newUser(t, "logan", password, ichorv1alpha1.UserRoleViewer)
	c := browser(t)
	verifier, challenge := pkce()
	req := authorize(t, c, challenge)
	login(t, c, req, "logan", "wrong-password-abc")
	code := loginCode(t, c, req, "logan", password)
	_, tok, _ := exchange(t, c, code, verifier)
	apiStatus(t, tok.AccessToken)
	_, next, _ := refreshWith(t, c, tok.RefreshToken)
	do(t, c, http.MethodPost, baseURL+"/oidc/revoke", url.Values{"token": {next.RefreshToken}, "client_id": {oidcClientID}})

	secret := &corev1.Secret{}
	if err := admin.Get(context.Background(), keyOf(userpass.CredentialsSecret), secret); err != nil {
		t.Fatal(err)
	}
	hash := string(secret.Data["logan"])
	log := logBuf.String()
	if !strings.Contains(log, `"/oidc/login"`) || !strings.Contains(log, `"/oidc/token"`) {
		t.Fatal("the access log does not have the sign-in requests; the check would prove nothing")
	}
	for what, v := range map[string]string{
		"password": password, "wrong password": "wrong-password-abc", "hash": hash, "code": code, "verifier": verifier,
		"access token": tok.AccessToken, "refresh token": tok.RefreshToken, "ID token": tok.IDToken,
		"rotated refresh token": next.RefreshToken, "login request id": req,
	} {
		if v == "" {
			t.Fatalf("%s is empty; the check would prove nothing", what)
		}
		if strings.Contains(log, v) {
			t.Errorf("the access log contains the %s", what)
		}
	}
}

// TestSignInPasswordHelper is the demo's path: create a user with a generated
// password, then sign in with it; bad input is refused clearly.
func TestSignInPasswordHelper(t *testing.T) {
	ctx := context.Background()
	pw, err := userpass.Create(ctx, admin, testNS, ichorv1alpha1.IchorUserSpec{DisplayName: "Demo admin", Roles: []string{ichorv1alpha1.UserRoleAdmin}}, "demo-admin")
	if err != nil {
		t.Fatal(err)
	}
	if len(pw) < 20 {
		t.Fatalf("generated password has %d characters, want at least 20", len(pw))
	}
	secret := &corev1.Secret{}
	if err := admin.Get(ctx, keyOf(userpass.CredentialsSecret), secret); err != nil {
		t.Fatal(err)
	}
	if h := string(secret.Data["demo-admin"]); !strings.HasPrefix(h, "$argon2id$") || strings.Contains(h, pw) {
		t.Fatal("the Secret does not hold an argon2id hash for the user")
	}
	claims, err := tokens.Verify(signIn(t, "demo-admin", pw).AccessToken)
	if err != nil || claims.Username != "ichor:demo-admin" || len(claims.Groups) != 1 || claims.Groups[0] != "ichor:admin" {
		t.Fatalf("signed in as %v (%v)", claims, err)
	}
	if err := userpass.Set(ctx, admin, testNS, "no-such-user", "long-enough-password"); err == nil || !strings.Contains(err.Error(), "create the user") {
		t.Errorf("setting the password of a missing user: %v", err)
	}
	if err := userpass.Set(ctx, admin, testNS, "demo-admin", "short"); err == nil || strings.Contains(err.Error(), "short\"") || !strings.Contains(err.Error(), "12 characters") {
		t.Errorf("a short password: %v", err)
	}
	// The old password still works: the refused change wrote nothing.
	signIn(t, "demo-admin", pw)
	// Creating the user again is refused and changes nothing.
	if _, err := userpass.Create(ctx, admin, testNS, ichorv1alpha1.IchorUserSpec{DisplayName: "Other", Roles: []string{ichorv1alpha1.UserRoleViewer}}, "demo-admin"); !errors.Is(err, userpass.ErrUserExists) {
		t.Errorf("creating an existing user: %v, want ErrUserExists", err)
	}
	signIn(t, "demo-admin", pw)
	if _, err := userpass.Create(ctx, admin, testNS, ichorv1alpha1.IchorUserSpec{DisplayName: "Bad"}, "Not_A_Name"); err == nil || !strings.Contains(err.Error(), "not a valid IchorUser name") {
		t.Errorf("a bad user name: %v", err)
	}
}
