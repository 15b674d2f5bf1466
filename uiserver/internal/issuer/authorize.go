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

// maxLoginFailures bounds the wrong passwords (or failed provider answers)
// one login form takes before the sign-in must start again; the limiter's
// per-name and per-address back-off bounds guessing across forms.
const maxLoginFailures = 5

// formLifetime bounds a login form and a sign-in at the external provider.
const formLifetime = 10 * time.Minute

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
	if len(state) > 512 || len(q.Get("nonce")) > 512 {
		fail(oidc.ErrInvalidRequest().WithDescription("state and nonce may be 512 characters at most"))
		return
	}
	csrf := randomString()
	form, err := i.seal.seal(purposeForm, &pendingAuth{Client: c.ID, Redirect: redirect, State: state, Nonce: q.Get("nonce"),
		Challenge: challenge, Scopes: scopes, Expires: i.now().Add(formLifetime), CSRF: tokenHash(csrf)})
	if err != nil {
		i.opts.Log.Error("sealing a login form", "error", err.Error())
		pageError(w, "the sign-in could not be started; try again")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: csrf, Path: loginCookiePath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(formLifetime / time.Second)})
	i.renderLogin(w, r, http.StatusOK, form, "", "")
}

// pendingForm reads a login page form and returns it and its pending
// authorization, after checking that this browser's sign-in sent it. It
// answers the request itself when it returns false.
func (i *Issuer) pendingForm(w http.ResponseWriter, r *http.Request) (string, *pendingAuth, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		pageError(w, "the login form could not be read; start the sign-in again")
		return "", nil, false
	}
	form := r.PostForm.Get("request")
	p := &pendingAuth{}
	if err := i.seal.open(purposeForm, form, p); err != nil || i.now().After(p.Expires) {
		pageError(w, "this sign-in expired or is unknown; start it again from the application")
		return "", nil, false
	}
	cookie, _ := r.Cookie(loginCookie)
	if cookie == nil || subtle.ConstantTimeCompare([]byte(tokenHash(cookie.Value)), []byte(p.CSRF)) != 1 {
		pageError(w, "the login form was not sent by this browser's sign-in; start it again from the application")
		return "", nil, false
	}
	return form, p, true
}

// failed counts a failure of form p and returns the form to show again, or
// "" when the form took maxLoginFailures (the sign-in must start again).
func (i *Issuer) failed(p *pendingAuth) string {
	p.Failures++
	if p.Failures >= maxLoginFailures {
		return ""
	}
	form, err := i.seal.seal(purposeForm, p)
	if err != nil {
		return ""
	}
	return form
}

// complete ends a pending authorization with a signed-in user: a session
// waiting for its code's exchange, and the code sent to the client's
// redirect URI.
func (i *Issuer) complete(w http.ResponseWriter, r *http.Request, p *pendingAuth, id identity.Identity, fingerprint string) {
	now := i.now()
	sid := newSID()
	code := sessionToken(sid)
	rec := &Record{SID: sid, ID: id, Fingerprint: fingerprint, Client: p.Client, Scopes: p.Scopes, AuthTime: now,
		Expires: now.Add(codeLifetime), Code: CodeRecord{Hash: tokenHash(code), Expires: now.Add(codeLifetime),
			Redirect: p.Redirect, Nonce: p.Nonce, Challenge: p.Challenge}}
	if err := i.store.Create(r.Context(), rec); err != nil {
		i.opts.Log.Error("storing a sign-in session", "user", id.Username, "error", err.Error())
		writePage(w, http.StatusServiceUnavailable, loginPage{Error: "the sign-in could not be recorded now; start it again from the application"})
		return
	}
	i.opts.Log.Info("signed in", "user", id.Username)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: loginCookiePath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	u, _ := url.Parse(p.Redirect)
	v := u.Query()
	v.Set("code", code)
	if p.State != "" {
		v.Set("state", p.State)
	}
	v.Set("iss", i.opts.Tokens.Issuer)
	u.RawQuery = v.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.String(), http.StatusFound) //nolint:gosec // p.Redirect was matched against the client's registered URIs at authorize, and the form is sealed
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
