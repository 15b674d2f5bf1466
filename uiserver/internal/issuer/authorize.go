package issuer

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

const (
	// loginCookie binds the login page's forms to the browser that opened it.
	loginCookie     = "ichor_login"
	loginCookiePath = "/oidc/"
	// externalCookie binds the provider's callback to the browser that left
	// for the provider. SameSite=Lax: the callback is a top-level navigation
	// from the provider's site.
	externalCookie = "ichor_external"
)

type pendingAuth struct {
	client, redirect, state, nonce, challenge, csrf string
	addr                                            string
	scopes                                          []string
	expires                                         time.Time
	failures                                        int
	ext                                             *externalFlow
}

// Bounds on unauthenticated state: pending login forms, and failed
// passwords per form before the sign-in must start again.
const (
	maxPending       = 10000
	maxLoginFailures = 5
)

// authorize starts a sign-in: it checks the request and shows the login form.
func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c, ok := i.client(q.Get("client_id"))
	if !ok {
		pageError(w, "unknown client_id: the application is not registered with this issuer")
		return
	}
	redirect := q.Get("redirect_uri")
	if !c.allows(redirect) {
		// Never redirect to an unregistered address.
		pageError(w, "redirect_uri is not registered for this client")
		return
	}
	state := q.Get("state")
	fail := func(e *oidc.Error) { redirectError(w, r, redirect, state, e) }
	if q.Get("response_type") != string(oidc.ResponseTypeCode) {
		fail(oidc.ErrInvalidRequest().WithDescription("only response_type=code is supported"))
		return
	}
	scopes := strings.Fields(q.Get("scope"))
	if !slices.Contains(scopes, oidc.ScopeOpenID) {
		fail(oidc.ErrInvalidScope().WithDescription("the scope must include openid"))
		return
	}
	challenge, method := q.Get("code_challenge"), oidc.CodeChallengeMethod(q.Get("code_challenge_method"))
	if challenge == "" {
		fail(oidc.ErrInvalidRequest().WithDescription("PKCE is required: send code_challenge with code_challenge_method=S256"))
		return
	}
	if method != oidc.CodeChallengeMethodS256 {
		fail(oidc.ErrInvalidRequest().WithDescription("code_challenge_method must be S256; plain is refused"))
		return
	}
	if len(challenge) != 43 {
		fail(oidc.ErrInvalidRequest().WithDescription("code_challenge must be the base64url SHA-256 of the verifier (43 characters)"))
		return
	}
	id, csrf := randomString(), randomString()
	addr := clientAddress(r)
	i.mu.Lock()
	i.sweepLocked()
	if len(i.pending) >= maxPending {
		i.mu.Unlock()
		w.Header().Set("Retry-After", "60")
		i.renderLogin(w, r, http.StatusServiceUnavailable, "", "", "too many sign-ins are in progress; try again in a minute")
		return
	}
	if i.byAddr[addr] >= i.opts.Limits.MaxPendingPerAddress {
		i.mu.Unlock()
		w.Header().Set("Retry-After", "60")
		i.opts.Log.Info("sign-in refused", "reason", "too many open login forms from one address")
		i.renderLogin(w, r, http.StatusTooManyRequests, "", "",
			"too many sign-ins are open from your address; finish or close one, or try again in a few minutes")
		return
	}
	i.pending[id] = &pendingAuth{client: c.ID, redirect: redirect, state: state, nonce: q.Get("nonce"),
		challenge: challenge, csrf: csrf, scopes: scopes, addr: addr, expires: i.now().Add(10 * time.Minute)}
	i.byAddr[addr]++
	i.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: csrf, Path: loginCookiePath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: 600})
	i.renderLogin(w, r, http.StatusOK, id, "", "")
}

// pendingForm reads a login page form and returns its pending authorization,
// after checking that this browser's sign-in sent it. It answers the
// request itself when it returns false.
func (i *Issuer) pendingForm(w http.ResponseWriter, r *http.Request) (string, *pendingAuth, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		pageError(w, "the login form could not be read; start the sign-in again")
		return "", nil, false
	}
	reqID := r.PostForm.Get("request")
	cookie, _ := r.Cookie(loginCookie)
	i.mu.Lock()
	p, ok := i.pending[reqID]
	if ok && i.now().After(p.expires) {
		i.dropPendingLocked(reqID)
		ok = false
	}
	i.mu.Unlock()
	if !ok {
		pageError(w, "this sign-in expired or is unknown; start it again from the application")
		return "", nil, false
	}
	if cookie == nil || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(p.csrf)) != 1 {
		pageError(w, "the login form was not sent by this browser's sign-in; start it again from the application")
		return "", nil, false
	}
	return reqID, p, true
}

// dropPendingLocked forgets a pending authorization and its provider sign-in.
func (i *Issuer) dropPendingLocked(reqID string) {
	p, ok := i.pending[reqID]
	if !ok {
		return
	}
	if p.ext != nil {
		delete(i.external, p.ext.state)
	}
	if i.byAddr[p.addr]--; i.byAddr[p.addr] <= 0 {
		delete(i.byAddr, p.addr)
	}
	delete(i.pending, reqID)
}

// complete ends a pending authorization with a signed-in user: a code for
// the client, sent to its redirect URI.
func (i *Issuer) complete(w http.ResponseWriter, r *http.Request, reqID string, p *pendingAuth, id identity.Identity, fingerprint string) {
	code := randomString()
	now := i.now()
	i.mu.Lock()
	i.dropPendingLocked(reqID)
	i.codes[hash(code)] = &codeGrant{client: p.client, redirect: p.redirect, nonce: p.nonce, challenge: p.challenge,
		fingerprint: fingerprint, scopes: p.scopes, id: id, authTime: now, expires: now.Add(time.Minute)}
	i.mu.Unlock()
	i.opts.Log.Info("signed in", "user", id.Username)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: loginCookiePath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	u, _ := url.Parse(p.redirect)
	v := u.Query()
	v.Set("code", code)
	if p.state != "" {
		v.Set("state", p.state)
	}
	v.Set("iss", i.opts.Tokens.Issuer)
	u.RawQuery = v.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), http.StatusFound) //nolint:gosec // p.redirect was matched against the client's registered URIs at authorize
}

func redirectError(w http.ResponseWriter, r *http.Request, redirect, state string, e *oidc.Error) {
	u, _ := url.Parse(redirect)
	v := u.Query()
	v.Set("error", string(e.ErrorType))
	if e.Description != "" {
		v.Set("error_description", e.Description)
	}
	if state != "" {
		v.Set("state", state)
	}
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound) //nolint:gosec // callers pass a redirect matched against the client's registered URIs
}
