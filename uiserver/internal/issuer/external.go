package issuer

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// externalStart is the login page's "Sign in with <provider>" button: it
// seals the pending authorization with a new nonce, PKCE verifier and
// browser binding into the provider's state and sends the browser to the
// provider.
func (i *Issuer) externalStart(w http.ResponseWriter, r *http.Request) {
	form, p, ok := i.pendingForm(w, r)
	if !ok {
		return
	}
	ext := i.opts.External
	nonce, verifier, binding := randomString(), randomString(), randomString()
	state, err := i.seal.seal(purposeExternal, &externalFlow{Pending: *p, Binding: tokenHash(binding), Nonce: nonce,
		Verifier: verifier, Expires: i.now().Add(formLifetime)})
	if err != nil {
		i.renderLogin(w, r, http.StatusServiceUnavailable, form, "", "the sign-in could not be started; try again")
		return
	}
	authURL, err := ext.AuthURL(r.Context(), state, nonce, oidc.NewSHACodeChallenge(verifier))
	if err != nil {
		i.renderLogin(w, r, http.StatusServiceUnavailable, form, "", "")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: externalCookie, Value: binding, Path: ExternalCallbackPath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: int(formLifetime / time.Second)})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// externalCallback is the provider's answer: it opens the sealed state,
// checks that this browser started the sign-in (its binding cookie, which
// the answer clears, so a state answers once in a browser), redeems the code
// (PKCE verifier, ID token with the nonce) and completes the authorization
// as a password login does.
func (i *Issuer) externalCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flow := &externalFlow{}
	if err := i.seal.open(purposeExternal, q.Get("state"), flow); err != nil || i.now().After(flow.Expires) {
		i.opts.Log.Info("external sign-in refused", "reason", "unknown or expired state")
		i.signIn(MethodOIDC, OutcomeRefused)
		pageError(w, "this answer from the provider does not belong to a sign-in in progress (its state is unknown, used or expired); start the sign-in again from the application")
		return
	}
	p := &flow.Pending
	form, err := i.seal.seal(purposeForm, p)
	if err != nil || i.now().After(p.Expires) {
		form = ""
	}
	c, _ := r.Cookie(externalCookie)
	http.SetCookie(w, &http.Cookie{Name: externalCookie, Value: "", Path: ExternalCallbackPath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: -1})
	if c == nil || subtle.ConstantTimeCompare([]byte(tokenHash(c.Value)), []byte(flow.Binding)) != 1 {
		i.opts.Log.Info("external sign-in refused", "reason", "callback in another browser, or answered already")
		i.signIn(MethodOIDC, OutcomeRefused)
		i.renderLogin(w, r, http.StatusBadRequest, form, "", "the provider's answer came to another browser than the one that started this sign-in, or was used already; sign in again")
		return
	}
	name := i.opts.External.Name()
	if e := q.Get("error"); e != "" {
		msg := name + " refused the sign-in: " + truncate(e, 64)
		if d := q.Get("error_description"); d != "" {
			msg += ": " + truncate(d, 200)
		}
		i.opts.Log.Info("external sign-in refused", "reason", "provider error", "error", truncate(e, 64))
		i.signIn(MethodOIDC, OutcomeRefused)
		i.renderLogin(w, r, http.StatusUnauthorized, form, "", msg)
		return
	}
	code := q.Get("code")
	if code == "" {
		i.signIn(MethodOIDC, OutcomeError)
		i.renderLogin(w, r, http.StatusBadRequest, form, "", "the answer from "+name+" holds no authorization code; sign in again")
		return
	}
	id, err := i.opts.External.Exchange(r.Context(), code, flow.Verifier, flow.Nonce)
	if err != nil {
		i.signIn(MethodOIDC, OutcomeError)
		next := i.failed(p)
		if next == "" {
			i.renderLogin(w, r, http.StatusUnauthorized, "", "", err.Error()+"; too many attempts, start the sign-in again from the application")
			return
		}
		i.renderLogin(w, r, http.StatusUnauthorized, next, "", err.Error())
		return
	}
	if err := i.opts.Tokens.Policy.Check(id); err != nil {
		i.signIn(MethodOIDC, OutcomeRefused)
		i.renderLogin(w, r, http.StatusForbidden, form, "", "this user may not be used by ichor-ui: "+err.Error())
		return
	}
	i.signIn(MethodOIDC, OutcomeSuccess)
	i.complete(w, r, p, id, "")
}

// truncate bounds a text the provider sent before it is shown or logged.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
