// Package issuer is ichor-ui's small OIDC issuer for Ichor's own users
// (architecture, "CLI and UI"): discovery, keys, an authorization endpoint
// with a plain HTML login form, the authorization code flow with PKCE (S256
// only) where a code presented twice revokes the sign-in made with it,
// refresh tokens rotated on every use where a reused one revokes its whole
// sign-in session, and RFC 7009 revocation at /oidc/revoke.
//
// The files follow the flow: clients.go (the registered clients),
// discovery.go (discovery document, keys), authorize.go (authorization
// requests, PKCE challenge, codes handed out), login.go and page.go (the
// password form), external.go (the external provider's sign-in), token.go
// (code exchange, token minting and signing), refresh.go (refresh-token
// rotation and reuse) and sessions.go (sessions, their checks and
// revocation).
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
// A sign-in in progress is carried by the browser, sealed (seal.go): the
// server keeps nothing for a visitor who has not signed in. Sessions, with
// their authorization code and refresh-token family, are kept by a Store
// (store.go): in ichor-ui the IchorUISession objects every replica shares
// (kubestore.go), with the signing key, so any replica exchanges a code,
// refreshes a session or honours a revocation made on another, and a
// restart signs nobody out.
package issuer

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/maeshinshin/ichor/contracts/pkg/authn"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// Paths of the issuer's endpoints, under the issuer URL.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	KeysPath      = "/oidc/keys"
	AuthorizePath = "/oidc/authorize"
	LoginPath     = "/oidc/login"
	TokenPath     = "/oidc/token"
	RevokePath    = "/oidc/revoke"
	// CodePath shows a sign-in's code to type into a terminal (authn.CLICodePath).
	CodePath = authn.CLICodePath
	// ExternalStartPath starts a sign-in with the external provider (the login page's button).
	ExternalStartPath = "/oidc/external/start"
	// ExternalCallbackPath is the redirect URI registered at the external provider.
	ExternalCallbackPath = "/oidc/external/callback"
)

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
	// Lifetimes, when set, is asked for the access and session lifetimes
	// each time a token is minted or a session starts (Ichor's settings,
	// read live); a zero it returns falls back to AccessTTL or SessionTTL.
	Lifetimes func() (access, session time.Duration)
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
	// Registry receives ichor_ui_sign_ins_total; nil counts without exporting.
	Registry prometheus.Registerer
	// Store keeps the sessions; nil keeps them in this process (NewMemoryStore).
	Store Store
}

// Issuer serves the OIDC endpoints.
type Issuer struct {
	opts    Options
	store   Store
	seal    sealer
	limits  limiter
	signIns *prometheus.CounterVec
}

// New returns the issuer and hooks its session revocation into opts.Tokens.
func New(opts Options) (*Issuer, error) {
	if opts.Tokens == nil || opts.Tokens.Key == nil || (opts.Users == nil && opts.External == nil) {
		return nil, errors.New("issuer: Tokens with a Key, and Users or External, are required")
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
	if opts.Store == nil {
		opts.Store = NewMemoryStore()
	}
	opts.Limits = opts.Limits.withDefaults()
	for _, c := range opts.Clients {
		if c.ID == auth.Audience {
			return nil, fmt.Errorf("issuer: client ID %q is the access tokens' audience; an ID token would pass for an access token", c.ID)
		}
	}
	signIns, err := newSignIns(opts.Registry, opts.External != nil, opts.Users != nil)
	if err != nil {
		return nil, fmt.Errorf("issuer: the sign-in metric: %w", err)
	}
	seal, err := newSealer(opts.Tokens.Key)
	if err != nil {
		return nil, fmt.Errorf("issuer: the sealing key: %w", err)
	}
	i := &Issuer{opts: opts, store: opts.Store, seal: seal, signIns: signIns}
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
	r.Get(CodePath, i.codePage)
	if i.opts.External != nil {
		r.Post(ExternalStartPath, i.externalStart)
		r.Get(ExternalCallbackPath, i.externalCallback)
	}
}

// Sweep deletes the sessions that ended: expired for an access token's
// lifetime (their tokens are refused until then as expired, after as
// unknown), or whose code was never exchanged. Every replica sweeps; a
// session another one deleted first is no error.
func (i *Issuer) Sweep(ctx context.Context) error {
	recs, err := i.store.List(ctx)
	if err != nil {
		return err
	}
	now := i.now()
	accessTTL, _ := i.lifetimes()
	for _, r := range recs {
		if now.After(r.Expires.Add(accessTTL)) {
			if err := i.store.Delete(ctx, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// lifetimes are the access token and session lifetimes in force now.
func (i *Issuer) lifetimes() (access, session time.Duration) {
	access, session = i.opts.AccessTTL, i.opts.SessionTTL
	if i.opts.Lifetimes != nil {
		a, s := i.opts.Lifetimes()
		if a > 0 {
			access = a
		}
		if s > 0 {
			session = s
		}
	}
	return access, session
}

func randomString() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
