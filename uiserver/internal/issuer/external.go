package issuer

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// externalFlow is the sign-in with the external provider that a pending
// authorization is waiting for: all of it stays on the server.
type externalFlow struct {
	state, binding  [32]byte // hashes of the state and of the browser's binding cookie
	nonce, verifier string
}

// externalStart is the login page's "Sign in with <provider>" button: it
// keeps a new state, nonce and PKCE verifier with the pending authorization
// and sends the browser to the provider.
func (i *Issuer) externalStart(w http.ResponseWriter, r *http.Request) {
	reqID, p, ok := i.pendingForm(w, r)
	if !ok {
		return
	}
	ext := i.opts.External
	state, nonce, verifier, binding := randomString(), randomString(), randomString(), randomString()
	authURL, err := ext.AuthURL(r.Context(), state, nonce, oidc.NewSHACodeChallenge(verifier))
	if err != nil {
		i.renderLogin(w, r, http.StatusServiceUnavailable, reqID, "", "")
		return
	}
	i.mu.Lock()
	if p.ext != nil {
		// One sign-in with the provider per pending authorization: the newest.
		delete(i.external, p.ext.state)
	}
	p.ext = &externalFlow{state: hash(state), binding: hash(binding), nonce: nonce, verifier: verifier}
	i.external[p.ext.state] = reqID
	i.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: externalCookie, Value: binding, Path: ExternalCallbackPath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: 600})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// externalCallback is the provider's answer: it finds the pending
// authorization by state, checks that this browser started it, redeems the
// code (PKCE verifier, ID token with the nonce) and completes the
// authorization as a password login does.
func (i *Issuer) externalCallback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := hash(q.Get("state"))
	now := i.now()
	i.mu.Lock()
	reqID, known := i.external[st]
	var p *pendingAuth
	var flow *externalFlow
	if known {
		delete(i.external, st) // a state answers once, whatever the outcome
		p = i.pending[reqID]
		if p != nil && p.ext != nil && p.ext.state == st && !now.After(p.expires) {
			flow, p.ext = p.ext, nil
		}
	}
	i.mu.Unlock()
	if flow == nil {
		i.opts.Log.Info("external sign-in refused", "reason", "unknown, used or expired state")
		i.signIn(MethodOIDC, OutcomeRefused)
		pageError(w, "this answer from the provider does not belong to a sign-in in progress (its state is unknown, used or expired); start the sign-in again from the application")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: externalCookie, Value: "", Path: ExternalCallbackPath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: -1})
	if c, _ := r.Cookie(externalCookie); c == nil || subtle.ConstantTimeCompare(hashSlice(c.Value), flow.binding[:]) != 1 {
		i.opts.Log.Info("external sign-in refused", "reason", "callback in another browser")
		i.signIn(MethodOIDC, OutcomeRefused)
		i.renderLogin(w, r, http.StatusBadRequest, reqID, "", "the provider's answer came to another browser than the one that started this sign-in; sign in again")
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
		i.renderLogin(w, r, http.StatusUnauthorized, reqID, "", msg)
		return
	}
	code := q.Get("code")
	if code == "" {
		i.signIn(MethodOIDC, OutcomeError)
		i.renderLogin(w, r, http.StatusBadRequest, reqID, "", "the answer from "+name+" holds no authorization code; sign in again")
		return
	}
	id, err := i.opts.External.Exchange(r.Context(), code, flow.verifier, flow.nonce)
	if err != nil {
		i.signIn(MethodOIDC, OutcomeError)
		i.mu.Lock()
		p.failures++
		tooMany := p.failures >= maxLoginFailures
		if tooMany {
			i.dropPendingLocked(reqID)
		}
		i.mu.Unlock()
		if tooMany {
			i.renderLogin(w, r, http.StatusUnauthorized, "", "", err.Error()+"; too many attempts, start the sign-in again from the application")
			return
		}
		i.renderLogin(w, r, http.StatusUnauthorized, reqID, "", err.Error())
		return
	}
	if err := i.opts.Tokens.Policy.Check(id); err != nil {
		i.signIn(MethodOIDC, OutcomeRefused)
		i.renderLogin(w, r, http.StatusForbidden, reqID, "", "this user may not be used by ichor-ui: "+err.Error())
		return
	}
	i.signIn(MethodOIDC, OutcomeSuccess)
	i.complete(w, r, reqID, p, id, "")
}

func hashSlice(s string) []byte { h := hash(s); return h[:] }

// truncate bounds a text the provider sent before it is shown or logged.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
