// Package issuer is ichor-ui's small OIDC issuer for Ichor's own users
// (architecture, "CLI and UI"): discovery, keys, an authorization endpoint
// with a plain HTML login form, the authorization code flow with PKCE (S256
// only), refresh tokens rotated on every use where a reused one revokes its
// whole sign-in session, and RFC 7009 revocation at /oidc/revoke.
//
// With an External provider (ichorUI.oidc.*) the login page also offers
// "Sign in with <provider>": a server-side authorization code flow with PKCE,
// state and nonce against that provider, whose callback completes the
// console's pending authorization exactly as a password does. From there the
// session is the issuer's own (codes, refresh rotation, revocation). Such a
// session keeps the oidc: user and groups of its sign-in until it ends; the
// provider is not asked again at refresh.
//
// The endpoints are written directly on zitadel/oidc's protocol types
// (pkg/oidc: discovery document, token response, errors, PKCE check) rather
// than through its op.Storage provider, because the access tokens must be the
// ones auth.Tokens mints and the API verifies (ES256, username, groups, sid),
// and because refresh-token reuse must revoke a session, which op's storage
// contract leaves to the storage anyway.
//
// Sessions live in memory: one replica, or replicas sharing a signing key
// with sticky sessions. A restart signs everyone out (access tokens of the
// old sessions stay valid until they expire, five minutes by default).
package issuer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

// Paths of the issuer's endpoints, under the issuer URL.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	KeysPath      = "/oidc/keys"
	AuthorizePath = "/oidc/authorize"
	LoginPath     = "/oidc/login"
	TokenPath     = "/oidc/token"
	RevokePath    = "/oidc/revoke"
	// ExternalStartPath starts a sign-in with the external provider (the login page's button).
	ExternalStartPath = "/oidc/external/start"
	// ExternalCallbackPath is the redirect URI registered at the external provider.
	ExternalCallbackPath = "/oidc/external/callback"
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

// Client is a registered public client (no secret; PKCE instead).
type Client struct {
	// ID is the client_id.
	ID string
	// RedirectURIs are compared exactly.
	RedirectURIs []string
}

// Users checks sign-ins and re-reads users at refresh (users.Store).
type Users interface {
	// Authenticate returns the user and the fingerprint of the password's
	// stored hash; users.ErrBusy when no hash slot is free.
	Authenticate(ctx context.Context, name, password string) (identity.Identity, string, error)
	Lookup(ctx context.Context, name string) (identity.Identity, error)
	// Fingerprints returns each name's current fingerprint, "" for a user
	// that may no longer sign in (disabled, deleted, no password).
	Fingerprints(ctx context.Context, names []string) (map[string]string, error)
}

// External is an external OIDC provider whose users may sign in (package external).
type External interface {
	// Name names the provider on the login page.
	Name() string
	// Ready reports whether the provider can be used now; the error is shown to the user.
	Ready(ctx context.Context) error
	// AuthURL is the provider's authorization URL for a sign-in with state,
	// nonce and the PKCE S256 challenge.
	AuthURL(ctx context.Context, state, nonce, challenge string) (string, error)
	// Exchange redeems code with the PKCE verifier, verifies the ID token
	// (its nonce too) and returns the user; the error is shown to the user.
	Exchange(ctx context.Context, code, verifier, nonce string) (identity.Identity, error)
}

// Options configure New.
type Options struct {
	// Tokens mints the access tokens; New sets its Revoked to the issuer's sessions.
	Tokens *auth.Tokens
	// Users are Ichor's own users; nil turns the password form off (External must be set).
	Users Users
	// External, when set, is offered on the login page.
	External External
	// Clients are the registered clients.
	Clients []Client
	// AccessTTL is the access and ID token lifetime; zero means 5 minutes.
	AccessTTL time.Duration
	// SessionTTL bounds a sign-in session and its refresh tokens; zero means 12 hours.
	SessionTTL time.Duration
	// Limits bound password sign-ins per client address and user name.
	Limits Limits
	// SessionCheckInterval is how often WatchSessions compares the sessions
	// of Ichor's users with their stored password and disabled flag; zero
	// means 10 s.
	SessionCheckInterval time.Duration
	// Log receives sign-in events: user names and outcomes, never a secret.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Issuer serves the OIDC endpoints.
type Issuer struct {
	opts Options

	mu       sync.Mutex
	pending  map[string]*pendingAuth    // login form id -> authorization request
	codes    map[[32]byte]*codeGrant    // hash of code -> grant
	refresh  map[[32]byte]*refreshToken // hash of refresh token -> token
	sessions map[string]*session        // sid -> session
	external map[[32]byte]string        // hash of the provider state -> login form id
	byAddr   map[string]int             // client address -> pending login forms
	swept    time.Time
	limits   limiter
}

type pendingAuth struct {
	client, redirect, state, nonce, challenge, csrf string
	addr                                            string
	scopes                                          []string
	expires                                         time.Time
	failures                                        int
	ext                                             *externalFlow
}

// externalFlow is the sign-in with the external provider that a pending
// authorization is waiting for: all of it stays on the server.
type externalFlow struct {
	state, binding  [32]byte // hashes of the state and of the browser's binding cookie
	nonce, verifier string
}

// Bounds on unauthenticated state: pending login forms, and failed
// passwords per form before the sign-in must start again.
const (
	maxPending       = 10000
	maxLoginFailures = 5
)

type codeGrant struct {
	client, redirect, nonce, challenge string
	fingerprint                        string
	scopes                             []string
	id                                 identity.Identity
	authTime, expires                  time.Time
}

type refreshToken struct {
	sid, client string
	used        bool
}

type session struct {
	id identity.Identity
	// fingerprint is the user's password hash fingerprint at sign-in (Ichor's
	// users only): another one ends the session.
	fingerprint string
	// ended says why CheckSessions revoked the session.
	ended    string
	client   string
	scopes   []string
	authTime time.Time
	expires  time.Time
	revoked  bool
	refresh  [][32]byte
}

// New returns the issuer and hooks its session revocation into opts.Tokens.
func New(opts Options) (*Issuer, error) {
	if opts.Tokens == nil || (opts.Users == nil && opts.External == nil) {
		return nil, errors.New("issuer: Tokens and Users or External are required")
	}
	if opts.AccessTTL == 0 {
		opts.AccessTTL = 5 * time.Minute
	}
	if opts.SessionTTL == 0 {
		opts.SessionTTL = 12 * time.Hour
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.SessionCheckInterval == 0 {
		opts.SessionCheckInterval = 10 * time.Second
	}
	opts.Limits = opts.Limits.withDefaults()
	for _, c := range opts.Clients {
		if c.ID == auth.Audience {
			return nil, fmt.Errorf("issuer: client ID %q is the access tokens' audience; an ID token would pass for an access token", c.ID)
		}
	}
	i := &Issuer{opts: opts, pending: map[string]*pendingAuth{}, codes: map[[32]byte]*codeGrant{},
		refresh: map[[32]byte]*refreshToken{}, sessions: map[string]*session{}, external: map[[32]byte]string{},
		byAddr: map[string]int{}}
	opts.Tokens.Revoked = i.SessionRevoked
	return i, nil
}

func (i *Issuer) now() time.Time {
	if i.opts.Now != nil {
		return i.opts.Now()
	}
	return time.Now()
}

// Mount adds the endpoints to r (server.Options.Mount).
func (i *Issuer) Mount(r chi.Router) {
	r.Get(DiscoveryPath, i.discovery)
	r.Get(KeysPath, i.keys)
	r.Get(AuthorizePath, i.authorize)
	r.Post(LoginPath, i.login)
	r.Post(TokenPath, i.token)
	r.Post(RevokePath, i.revoke)
	if i.opts.External != nil {
		r.Post(ExternalStartPath, i.externalStart)
		r.Get(ExternalCallbackPath, i.externalCallback)
	}
}

// SessionRevoked reports whether the sign-in session sid was revoked or
// ended (auth.Tokens.Revoked). An unknown session counts as revoked.
func (i *Issuer) SessionRevoked(sid string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	s, ok := i.sessions[sid]
	return !ok || s.revoked || i.now().After(s.expires)
}

func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	iss := strings.TrimSuffix(i.opts.Tokens.Issuer, "/")
	writeJSON(w, http.StatusOK, &oidc.DiscoveryConfiguration{
		Issuer:                                 iss,
		AuthorizationEndpoint:                  iss + AuthorizePath,
		TokenEndpoint:                          iss + TokenPath,
		RevocationEndpoint:                     iss + RevokePath,
		JwksURI:                                iss + KeysPath,
		ScopesSupported:                        []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess, "groups"},
		ResponseTypesSupported:                 []string{string(oidc.ResponseTypeCode)},
		ResponseModesSupported:                 []string{"query"},
		GrantTypesSupported:                    []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken},
		SubjectTypesSupported:                  []string{"public"},
		IDTokenSigningAlgValuesSupported:       []string{string(jose.ES256)},
		TokenEndpointAuthMethodsSupported:      []oidc.AuthMethod{oidc.AuthMethodNone},
		RevocationEndpointAuthMethodsSupported: []oidc.AuthMethod{oidc.AuthMethodNone},
		CodeChallengeMethodsSupported:          []oidc.CodeChallengeMethod{oidc.CodeChallengeMethodS256},
		ClaimsSupported:                        []string{"iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "username", "groups", "sid"},
	})
}

func (i *Issuer) keys(w http.ResponseWriter, _ *http.Request) {
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{i.opts.Tokens.Key.Public()}}
	for _, k := range i.opts.Tokens.Previous {
		set.Keys = append(set.Keys, k.Public())
	}
	w.Header().Set("Cache-Control", "max-age=300")
	writeJSON(w, http.StatusOK, set)
}

func (i *Issuer) client(id string) (*Client, bool) {
	for n := range i.opts.Clients {
		if i.opts.Clients[n].ID == id {
			return &i.opts.Clients[n], true
		}
	}
	return nil, false
}

// authorize starts a sign-in: it checks the request and shows the login form.
func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c, ok := i.client(q.Get("client_id"))
	if !ok {
		pageError(w, "unknown client_id: the application is not registered with this issuer")
		return
	}
	redirect := q.Get("redirect_uri")
	if !slices.Contains(c.RedirectURIs, redirect) {
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

// login checks the form's user name and password and redirects with a code.
func (i *Issuer) login(w http.ResponseWriter, r *http.Request) {
	if i.opts.Users == nil {
		pageError(w, "sign-in with a password is off here; use the provider's button")
		return
	}
	reqID, p, ok := i.pendingForm(w, r)
	if !ok {
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("username"))
	userKey, addrKey := "user:"+strings.ToLower(name), "addr:"+clientAddress(r)
	now := i.now()
	if wait := max(i.limits.wait(userKey, now), i.limits.wait(addrKey, now)); wait > 0 {
		i.opts.Log.Info("sign-in refused", "reason", "rate limit")
		retryAfter(w, wait)
		i.renderLogin(w, r, http.StatusTooManyRequests, reqID, name,
			fmt.Sprintf("too many failed sign-ins for this user name or from your address; try again in %d seconds", int(wait.Round(time.Second)/time.Second)+1))
		return
	}
	id, fp, err := i.opts.Users.Authenticate(r.Context(), name, r.PostForm.Get("password"))
	switch {
	case errors.Is(err, users.ErrBusy):
		i.opts.Log.Info("sign-in refused", "reason", "password-hash slots busy")
		retryAfter(w, time.Second)
		i.renderLogin(w, r, http.StatusTooManyRequests, reqID, name, users.ErrBusy.Error())
		return
	case errors.Is(err, users.ErrBadCredentials):
		i.opts.Log.Info("sign-in refused", "reason", "bad credentials")
		i.limits.fail(userKey, i.opts.Limits.FreePerUser, i.opts.Limits, now)
		i.limits.fail(addrKey, i.opts.Limits.FreePerAddress, i.opts.Limits, now)
		i.mu.Lock()
		p.failures++
		tooMany := p.failures >= maxLoginFailures
		if tooMany {
			i.dropPendingLocked(reqID)
		}
		i.mu.Unlock()
		if tooMany {
			i.renderLogin(w, r, http.StatusUnauthorized, "", "", users.ErrBadCredentials.Error()+"; too many attempts, start the sign-in again from the application")
			return
		}
		i.renderLogin(w, r, http.StatusUnauthorized, reqID, name, users.ErrBadCredentials.Error())
		return
	case errors.Is(err, users.ErrDisabled):
		i.opts.Log.Info("sign-in refused", "user", identity.IchorPrefix+name, "reason", "disabled")
		i.renderLogin(w, r, http.StatusForbidden, reqID, name, users.ErrDisabled.Error())
		return
	case err != nil:
		i.opts.Log.Error("sign-in failed", "error", err.Error())
		i.renderLogin(w, r, http.StatusServiceUnavailable, reqID, name, "the sign-in could not be checked now; try again")
		return
	}
	if err := i.opts.Tokens.Policy.Check(id); err != nil {
		i.renderLogin(w, r, http.StatusForbidden, reqID, name, "this user's groups may not be used by ichor-ui: "+err.Error())
		return
	}
	i.limits.reset(userKey)
	i.complete(w, r, reqID, p, id, fp)
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
		pageError(w, "this answer from the provider does not belong to a sign-in in progress (its state is unknown, used or expired); start the sign-in again from the application")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: externalCookie, Value: "", Path: ExternalCallbackPath, Secure: true, HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: -1})
	if c, _ := r.Cookie(externalCookie); c == nil || subtle.ConstantTimeCompare(hashSlice(c.Value), flow.binding[:]) != 1 {
		i.opts.Log.Info("external sign-in refused", "reason", "callback in another browser")
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
		i.renderLogin(w, r, http.StatusUnauthorized, reqID, "", msg)
		return
	}
	code := q.Get("code")
	if code == "" {
		i.renderLogin(w, r, http.StatusBadRequest, reqID, "", "the answer from "+name+" holds no authorization code; sign in again")
		return
	}
	id, err := i.opts.External.Exchange(r.Context(), code, flow.verifier, flow.nonce)
	if err != nil {
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
		i.renderLogin(w, r, http.StatusForbidden, reqID, "", "this user may not be used by ichor-ui: "+err.Error())
		return
	}
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

// token is the token endpoint: authorization_code and refresh_token grants.
func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		tokenError(w, oidc.ErrInvalidRequest().WithDescription("the request body is not a form"))
		return
	}
	f := r.PostForm
	c, ok := i.client(f.Get("client_id"))
	if !ok {
		tokenError(w, oidc.ErrInvalidClient().WithDescription("unknown client_id"))
		return
	}
	switch oidc.GrantType(f.Get("grant_type")) {
	case oidc.GrantTypeCode:
		i.codeGrant(w, r.Context(), c, f)
	case oidc.GrantTypeRefreshToken:
		i.refreshGrant(w, r.Context(), c, f)
	default:
		tokenError(w, oidc.ErrUnsupportedGrantType().WithDescription("grant_type must be authorization_code or refresh_token"))
	}
}

func (i *Issuer) codeGrant(w http.ResponseWriter, _ context.Context, c *Client, f url.Values) {
	h := hash(f.Get("code"))
	i.mu.Lock()
	g, ok := i.codes[h]
	delete(i.codes, h) // a code is used once, whatever the outcome
	i.mu.Unlock()
	switch {
	case !ok || i.now().After(g.expires):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code is unknown, used or expired"))
		return
	case g.client != c.ID || g.redirect != f.Get("redirect_uri"):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code was issued to another client or redirect_uri"))
		return
	case !oidc.VerifyCodeChallenge(&oidc.CodeChallenge{Challenge: g.challenge, Method: oidc.CodeChallengeMethodS256}, f.Get("code_verifier")):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("code_verifier does not match the code_challenge (PKCE)"))
		return
	}
	sid := randomString()
	now := i.now()
	i.mu.Lock()
	i.sessions[sid] = &session{id: g.id, fingerprint: g.fingerprint, client: c.ID, scopes: g.scopes, authTime: g.authTime, expires: now.Add(i.opts.SessionTTL)}
	i.mu.Unlock()
	i.issue(w, sid, g.nonce)
}

func (i *Issuer) refreshGrant(w http.ResponseWriter, ctx context.Context, c *Client, f url.Values) {
	h := hash(f.Get("refresh_token"))
	i.mu.Lock()
	rt, ok := i.refresh[h]
	var s *session
	if ok {
		s = i.sessions[rt.sid]
	}
	switch {
	case !ok || s == nil:
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token is unknown or expired: sign in again"))
		return
	case rt.client != c.ID:
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token was issued to another client"))
		return
	case rt.used:
		// Reuse: someone else holds a copy. End the whole sign-in session.
		s.revoked = true
		i.mu.Unlock()
		i.opts.Log.Warn("refresh token reused: session revoked", "user", s.id.Username)
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token was already used: the session is revoked, sign in again"))
		return
	case s.revoked || i.now().After(s.expires):
		why := "the session was signed out or expired"
		if s.ended != "" {
			why = s.ended
		}
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s: sign in again", why))
		return
	}
	rt.used = true
	name, ichorUser := strings.CutPrefix(s.id.Username, identity.IchorPrefix)
	fingerprint := s.fingerprint
	i.mu.Unlock()
	if !ichorUser || i.opts.Users == nil {
		// A user of the external provider keeps the identity of its sign-in
		// (Mint checks it against the policy again).
		i.issue(w, rt.sid, "")
		return
	}

	// Roles and the disabled flag are read again at each refresh.
	id, err := i.opts.Users.Lookup(ctx, name)
	if err != nil {
		if errors.Is(err, users.ErrDisabled) {
			i.revokeSession(rt.sid)
			tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s", err.Error()))
			return
		}
		i.mu.Lock()
		rt.used = false // not the client's fault: let it retry with the same token
		i.mu.Unlock()
		tokenError(w, oidc.ErrServerError().WithDescription("the user could not be read now; try again"))
		return
	}
	// A new password ends the session, as WatchSessions does.
	fps, err := i.opts.Users.Fingerprints(ctx, []string{name})
	if err != nil {
		i.mu.Lock()
		rt.used = false
		i.mu.Unlock()
		tokenError(w, oidc.ErrServerError().WithDescription("the user could not be read now; try again"))
		return
	}
	if fps[name] != fingerprint {
		i.revokeSession(rt.sid)
		i.opts.Log.Info("session revoked", "user", s.id.Username, "reason", "password changed")
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the password was changed since this sign-in: sign in again"))
		return
	}
	i.mu.Lock()
	s.id = id
	i.mu.Unlock()
	i.issue(w, rt.sid, "")
}

// WatchSessions runs CheckSessions every SessionCheckInterval until ctx ends.
func (i *Issuer) WatchSessions(ctx context.Context) {
	t := time.NewTicker(i.opts.SessionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := i.CheckSessions(ctx); err != nil && ctx.Err() == nil {
				i.opts.Log.Error("checking sign-in sessions", "error", err.Error())
			}
		}
	}
}

// CheckSessions revokes every live session of Ichor's users whose user was
// disabled or deleted or whose password changed since the sign-in: its
// access tokens are refused from then on (Tokens.Revoked) and its refresh
// token too. A read error revokes nothing.
func (i *Issuer) CheckSessions(ctx context.Context) error {
	if i.opts.Users == nil {
		return nil
	}
	now := i.now()
	i.mu.Lock()
	var names []string
	for _, s := range i.sessions {
		if name, ok := strings.CutPrefix(s.id.Username, identity.IchorPrefix); ok && !s.revoked && !now.After(s.expires) {
			names = append(names, name)
		}
	}
	i.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	fps, err := i.opts.Users.Fingerprints(ctx, slices.Compact(names))
	if err != nil {
		return err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, s := range i.sessions {
		name, ok := strings.CutPrefix(s.id.Username, identity.IchorPrefix)
		if !ok || s.revoked {
			continue
		}
		if fp, checked := fps[name]; checked && fp != s.fingerprint {
			s.revoked = true
			s.ended = "the password was changed since this sign-in"
			if fp == "" {
				s.ended = "this user may not sign in: the IchorUser is disabled or was deleted"
			}
			i.opts.Log.Info("session revoked", "user", s.id.Username, "reason", s.ended)
		}
	}
	return nil
}

// issue answers with a new access token, ID token and refresh token of session sid.
func (i *Issuer) issue(w http.ResponseWriter, sid, nonce string) {
	i.mu.Lock()
	s := i.sessions[sid]
	id, client, scopes, authTime := s.id, s.client, s.scopes, s.authTime
	i.mu.Unlock()
	access, exp, err := i.opts.Tokens.Mint(id, sid, i.opts.AccessTTL)
	if err != nil {
		i.revokeSession(sid)
		tokenError(w, oidc.ErrServerError().WithDescription("the access token could not be made: %s", err.Error()))
		return
	}
	idToken, err := i.idToken(id, client, sid, nonce, authTime, exp)
	if err != nil {
		i.revokeSession(sid)
		tokenError(w, oidc.ErrServerError().WithDescription("the ID token could not be signed"))
		return
	}
	refresh := randomString()
	i.mu.Lock()
	i.refresh[hash(refresh)] = &refreshToken{sid: sid, client: client}
	s.refresh = append(s.refresh, hash(refresh))
	i.mu.Unlock()
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, &oidc.AccessTokenResponse{
		AccessToken: access, TokenType: oidc.BearerToken, RefreshToken: refresh,
		ExpiresIn: uint64(time.Until(exp).Round(time.Second).Seconds()), IDToken: idToken, Scope: scopes,
	})
}

// idClaims are the ID token's claims: OIDC's plus the Kubernetes user and groups.
type idClaims struct {
	jwt.Claims
	AuthTime *jwt.NumericDate `json:"auth_time,omitempty"`
	Nonce    string           `json:"nonce,omitempty"`
	AZP      string           `json:"azp,omitempty"`
	SID      string           `json:"sid,omitempty"`
	Username string           `json:"username"`
	Groups   []string         `json:"groups,omitempty"`
}

func (i *Issuer) idToken(id identity.Identity, client, sid, nonce string, authTime, exp time.Time) (string, error) {
	k := i.opts.Tokens.Key
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k.Private},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.ID))
	if err != nil {
		return "", err
	}
	now := i.now()
	return jwt.Signed(sig).Claims(idClaims{
		Claims: jwt.Claims{Issuer: i.opts.Tokens.Issuer, Subject: id.Username, Audience: jwt.Audience{client},
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(exp)},
		AuthTime: jwt.NewNumericDate(authTime), Nonce: nonce, AZP: client, SID: sid,
		Username: id.Username, Groups: id.Groups,
	}).Serialize()
}

// revoke is RFC 7009 token revocation. A refresh token or an access token
// ends its whole sign-in session. Unknown tokens are answered 200 (§2.2).
func (i *Issuer) revoke(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		tokenError(w, oidc.ErrInvalidRequest().WithDescription("the request body is not a form"))
		return
	}
	c, ok := i.client(r.PostForm.Get("client_id"))
	if !ok {
		tokenError(w, oidc.ErrInvalidClient().WithDescription("unknown client_id"))
		return
	}
	tok := r.PostForm.Get("token")
	if tok == "" {
		tokenError(w, oidc.ErrInvalidRequest().WithDescription("the token parameter is missing"))
		return
	}
	var sid string
	i.mu.Lock()
	if rt, ok := i.refresh[hash(tok)]; ok && rt.client == c.ID {
		sid = rt.sid
	}
	i.mu.Unlock()
	if sid == "" {
		if claims, err := i.opts.Tokens.Verify(tok); err == nil && claims.Session != "" {
			i.mu.Lock()
			if s, ok := i.sessions[claims.Session]; ok && s.client == c.ID {
				sid = claims.Session
			}
			i.mu.Unlock()
		}
	}
	if sid != "" {
		i.revokeSession(sid)
		i.opts.Log.Info("session revoked", "reason", "revocation endpoint")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

func (i *Issuer) revokeSession(sid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if s, ok := i.sessions[sid]; ok {
		s.revoked = true
	}
}

// sweepLocked drops what expired, at most once a minute. Revoked sessions
// are kept until they would have expired so that their tokens stay refused.
func (i *Issuer) sweepLocked() {
	now := i.now()
	if now.Sub(i.swept) < time.Minute {
		return
	}
	i.swept = now
	for k, p := range i.pending {
		if now.After(p.expires) {
			i.dropPendingLocked(k)
		}
	}
	for k, g := range i.codes {
		if now.After(g.expires) {
			delete(i.codes, k)
		}
	}
	for sid, s := range i.sessions {
		if now.After(s.expires.Add(i.opts.AccessTTL)) {
			for _, h := range s.refresh {
				delete(i.refresh, h)
			}
			delete(i.sessions, sid)
		}
	}
}

func hash(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func randomString() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"server_error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func tokenError(w http.ResponseWriter, e *oidc.Error) {
	code := http.StatusBadRequest
	switch e.ErrorType {
	case oidc.InvalidClient:
		code = http.StatusUnauthorized
	case oidc.ServerError:
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, e)
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

var page = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in to Ichor</title>
<style>body{font-family:system-ui,sans-serif;max-width:22rem;margin:4rem auto;padding:0 1rem}
label{display:block;margin-top:1rem}input{width:100%;padding:.4rem;box-sizing:border-box}
button{margin-top:1.5rem;padding:.5rem 1rem}.error{color:#b00020}hr{margin-top:2rem}</style></head>
<body><h1>Sign in to Ichor</h1>
{{if .Error}}<p class="error" role="alert">{{.Error}}</p>{{end}}
{{if .Request}}{{if .Provider}}{{if .ProviderDown}}<p class="error" role="status">Sign-in with {{.Provider}} is unavailable: {{.ProviderDown}}</p>
{{else}}<form method="post" action="{{.ExternalAction}}">
<input type="hidden" name="request" value="{{.Request}}">
<button type="submit">Sign in with {{.Provider}}</button>
</form>{{end}}{{if .Password}}<hr>{{end}}{{end}}
{{if .Password}}<form method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<label for="username">User name</label><input id="username" name="username" autocomplete="username" required value="{{.Username}}" autofocus>
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>{{end}}{{end}}
</body></html>
`))

type loginPage struct {
	Action, ExternalAction, Request, Username, Error string
	Password                                         bool
	Provider, ProviderDown                           string
}

// renderLogin shows the login page: the provider's button (or why it is
// unavailable) and the password form, as configured, for the form id
// request; without one it shows only msg.
func (i *Issuer) renderLogin(w http.ResponseWriter, r *http.Request, code int, request, username, msg string) {
	pg := loginPage{Action: LoginPath, ExternalAction: ExternalStartPath, Request: request, Username: username, Error: msg,
		Password: i.opts.Users != nil}
	if request != "" && i.opts.External != nil {
		pg.Provider = i.opts.External.Name()
		if err := i.opts.External.Ready(r.Context()); err != nil {
			pg.ProviderDown = err.Error()
		}
	}
	writePage(w, code, pg)
}

func writePage(w http.ResponseWriter, code int, pg loginPage) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	w.WriteHeader(code)
	_ = page.Execute(w, pg)
}

// pageError shows an error without a form: the request cannot go on.
func pageError(w http.ResponseWriter, msg string) {
	writePage(w, http.StatusBadRequest, loginPage{Error: msg})
}
