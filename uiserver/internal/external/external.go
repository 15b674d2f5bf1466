// Package external signs in the users of an external OIDC provider
// (ichorUI.oidc.*; architecture, "Trust"): ichor-ui is the provider's relying
// party, with zitadel/oidc's pkg/client/rp. The issuer (package issuer) runs
// the browser's side of the flow and keeps its state, nonce and PKCE verifier
// server-side with the pending authorization of the console; this package
// builds the provider's authorization URL, redeems the code, verifies the ID
// token and maps its claims onto the Kubernetes user oidc:<name> and the
// groups ichor-ui may impersonate.
//
// Claim mapping follows the kube-apiserver's JWT authenticator, which sees the
// same users through `ichor auth token`: the user name is a claim (sub by
// default, as --oidc-username-claim defaults to), an "email" claim counts only
// when email_verified is absent or true, and groups get a prefix (oidc: by
// default). Of the prefixed groups only those the identity.Policy allows are
// kept: the built-in ichor: groups cannot come from the provider (the prefix
// makes them oidc:ichor:...), so a provider group reaches a role only when the
// deployment names it with --impersonate-group (e.g. oidc:platform-admins) and
// binds it; every other provider group is dropped, and never a system: group.
package external

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client"
	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// Defaults of the claim mapping, as the chart's ichorUI.oidc.* values default.
const (
	// DefaultUsernameClaim is the kube-apiserver's default (--oidc-username-claim).
	DefaultUsernameClaim = "sub"
	// DefaultGroupsClaim names the groups claim.
	DefaultGroupsClaim = "groups"
	// DefaultGroupsPrefix is put before every provider group.
	DefaultGroupsPrefix = identity.OIDCPrefix
)

// ErrUnavailable is returned while the provider cannot be reached or its
// discovery document is unusable; the details go to the log only.
var ErrUnavailable = errors.New("the provider cannot be reached now; try again in a minute")

// ErrRefused is wrapped by the errors of a sign-in the provider's answer does
// not allow: a failed ID token verification, missing or unusable claims, an
// authorization code the provider refused. No session is made.
var ErrRefused = errors.New("sign-in refused")

// Config configures New.
type Config struct {
	// IssuerURL is the provider's issuer (https), as its discovery document names it.
	IssuerURL string
	// ClientID is ichor-ui's client at the provider.
	ClientID string
	// ClientSecret is the client's secret; empty makes a public client (PKCE only).
	ClientSecret string
	// RedirectURL is ichor-ui's callback, registered at the provider
	// (<issuer>/oidc/external/callback).
	RedirectURL string
	// UsernameClaim names the user; empty means DefaultUsernameClaim.
	UsernameClaim string
	// GroupsClaim holds the groups; empty means DefaultGroupsClaim.
	GroupsClaim string
	// GroupsPrefix goes before every provider group; empty means DefaultGroupsPrefix.
	GroupsPrefix string
	// Policy keeps only the groups ichor-ui may impersonate.
	Policy identity.Policy
	// HTTPClient reaches the provider (it trusts --oidc-ca-file); nil means
	// one that trusts the system's roots.
	HTTPClient *http.Client
	// RetryInterval is how long an unreachable provider is not asked again;
	// zero means 15 s.
	RetryInterval time.Duration
	// Timeout bounds the discovery; zero means 10 s.
	Timeout time.Duration
	// Log receives the provider's state and refusals, never a token or code.
	Log *slog.Logger
}

// Provider is the external OIDC provider.
type Provider struct {
	cfg  Config
	name string

	mu      sync.Mutex
	party   rp.RelyingParty
	lastTry time.Time
	lastErr error
}

// New checks cfg; it does not contact the provider (Ready does, so that
// ichor-ui starts while the provider is down).
func New(cfg Config) (*Provider, error) {
	u, err := url.Parse(cfg.IssuerURL)
	switch {
	case cfg.IssuerURL == "":
		return nil, errors.New("--oidc-issuer-url is empty: give the provider's issuer URL")
	case err != nil || u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("--oidc-issuer-url %q must be an https URL, as the kube-apiserver requires", cfg.IssuerURL)
	case cfg.ClientID == "":
		return nil, errors.New("--oidc-client-id is empty: give ichor-ui's client ID at the provider")
	case cfg.RedirectURL == "":
		return nil, errors.New("the callback URL is empty: set --issuer to ichor-ui's external URL")
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = DefaultUsernameClaim
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = DefaultGroupsClaim
	}
	if cfg.GroupsPrefix == "" {
		cfg.GroupsPrefix = DefaultGroupsPrefix
	}
	// A prefix that makes provider groups look like Kubernetes' or Ichor's
	// own would let the provider grant them.
	for _, reserved := range []string{"system:", identity.IchorPrefix} {
		if strings.HasPrefix(cfg.GroupsPrefix, reserved) || strings.HasPrefix(reserved, cfg.GroupsPrefix) {
			return nil, fmt.Errorf("--oidc-groups-prefix %q would let the provider name %s groups; use a prefix of its own such as %q", cfg.GroupsPrefix, reserved, DefaultGroupsPrefix)
		}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = 15 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Provider{cfg: cfg, name: u.Host}, nil
}

// Name is the provider's host, shown on the login page's button.
func (p *Provider) Name() string { return p.name }

// Ready reads the provider's discovery document the first time, and again
// after a failure once RetryInterval has passed; meanwhile it returns the
// failure (ErrUnavailable). The reason is logged, not returned: the login
// page is public.
func (p *Provider) Ready(ctx context.Context) error {
	_, err := p.relyingParty(ctx)
	return err
}

func (p *Provider) relyingParty(ctx context.Context) (rp.RelyingParty, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.party != nil {
		return p.party, nil
	}
	if !p.lastTry.IsZero() && time.Since(p.lastTry) < p.cfg.RetryInterval {
		return nil, p.lastErr
	}
	p.lastTry = time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	party, err := p.discover(ctx)
	if err != nil {
		p.cfg.Log.Warn("the external OIDC provider is unavailable", "issuer", p.cfg.IssuerURL, "error", err.Error())
		p.lastErr = ErrUnavailable
		return nil, p.lastErr
	}
	p.cfg.Log.Info("the external OIDC provider is ready", "issuer", p.cfg.IssuerURL)
	p.party, p.lastErr = party, nil
	return party, nil
}

func (p *Provider) discover(ctx context.Context) (rp.RelyingParty, error) {
	conf, err := client.Discover(ctx, p.cfg.IssuerURL, p.cfg.HTTPClient)
	if err != nil {
		if errors.Is(err, oidc.ErrIssuerInvalid) {
			return nil, fmt.Errorf("the discovery document names another issuer than %s: set --oidc-issuer-url to the provider's issuer exactly", p.cfg.IssuerURL)
		}
		return nil, err
	}
	// Ask for the scopes that carry the claims, among those the provider
	// lists (some refuse a scope they do not know).
	scopes := []string{oidc.ScopeOpenID}
	for _, s := range []string{oidc.ScopeProfile, oidc.ScopeEmail, "groups"} {
		if (len(conf.ScopesSupported) == 0 && s != "groups") || slices.Contains(conf.ScopesSupported, s) {
			scopes = append(scopes, s)
		}
	}
	return rp.NewRelyingPartyOIDC(ctx, p.cfg.IssuerURL, p.cfg.ClientID, p.cfg.ClientSecret, p.cfg.RedirectURL, scopes,
		rp.WithHTTPClient(p.cfg.HTTPClient),
		rp.WithSigningAlgsFromDiscovery(),
		rp.WithVerifierOpts(rp.WithNonce(nonceFrom), rp.WithIssuedAtOffset(10*time.Second)),
	)
}

type nonceKey struct{}

// nonceFrom is the nonce the ID token must carry: the one of the sign-in
// being completed (never empty, so a token without a nonce fails).
func nonceFrom(ctx context.Context) string {
	n, _ := ctx.Value(nonceKey{}).(string)
	if n == "" {
		return "\x00no nonce"
	}
	return n
}

// AuthURL is the provider's authorization URL for a sign-in with state,
// nonce and the PKCE S256 challenge (RFC 7636), all kept by the caller.
func (p *Provider) AuthURL(ctx context.Context, state, nonce, challenge string) (string, error) {
	party, err := p.relyingParty(ctx)
	if err != nil {
		return "", err
	}
	return rp.AuthURL(state, party, rp.WithCodeChallenge(challenge), rp.AuthURLOpt(rp.WithURLParam("nonce", nonce))), nil
}

// Exchange redeems code with the PKCE verifier at the provider's token
// endpoint, verifies the ID token (signature by the provider's keys, issuer,
// audience, expiry, nonce) and returns the user it names.
func (p *Provider) Exchange(ctx context.Context, code, verifier, nonce string) (identity.Identity, error) {
	party, err := p.relyingParty(ctx)
	if err != nil {
		return identity.Identity{}, err
	}
	tokens, err := rp.CodeExchange[*oidc.IDTokenClaims](context.WithValue(ctx, nonceKey{}, nonce), code, party, rp.WithCodeVerifier(verifier))
	if err != nil {
		return identity.Identity{}, p.exchangeError(err)
	}
	return p.identityOf(tokens.IDTokenClaims)
}

// verificationErrors are the ID token checks of zitadel's verifier; their
// texts name what failed and carry no token.
var verificationErrors = []error{
	oidc.ErrNonceInvalid, oidc.ErrIssuerInvalid, oidc.ErrAudience, oidc.ErrAzpMissing, oidc.ErrAzpInvalid,
	oidc.ErrSignatureMissing, oidc.ErrSignatureMultiple, oidc.ErrSignatureUnsupportedAlg, oidc.ErrSignatureInvalidPayload,
	oidc.ErrSignatureInvalid, oidc.ErrExpired, oidc.ErrIatMissing, oidc.ErrIatInFuture, oidc.ErrIatToOld,
	oidc.ErrSubjectMissing, oidc.ErrAtHash, oidc.ErrAuthTimeNotPresent, oidc.ErrAuthTimeToOld,
}

// exchangeError turns a failed code exchange into a message for the login
// page, and logs it. The library's texts of some checks quote claims (the
// nonce), so a check's own text is shown and logged, not the library's.
func (p *Provider) exchangeError(err error) error {
	out := p.classify(err)
	detail := out.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		detail = err.Error() // where the provider could not be reached
	}
	p.cfg.Log.Info("external sign-in refused", "issuer", p.cfg.IssuerURL, "error", detail)
	return out
}

func (p *Provider) classify(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := re.ErrorCode
		if msg == "" && re.Response != nil {
			msg = fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		}
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		}
		return fmt.Errorf("%w: the provider refused to redeem the authorization code (%s); start the sign-in again", ErrRefused, msg)
	}
	for _, v := range verificationErrors {
		if errors.Is(err, v) {
			return fmt.Errorf("%w: the provider's ID token failed verification (%s); no session was made", ErrRefused, v.Error())
		}
	}
	if errors.Is(err, rp.ErrMissingIDToken) {
		return fmt.Errorf("%w: the provider sent no ID token; allow the openid scope for client %s", ErrRefused, p.cfg.ClientID)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("the provider could not be reached to complete the sign-in: %w", ErrUnavailable)
	}
	return fmt.Errorf("%w: the provider's ID token could not be verified; no session was made", ErrRefused)
}

// identityOf maps the ID token's claims onto the Kubernetes user and groups.
func (p *Provider) identityOf(c *oidc.IDTokenClaims) (identity.Identity, error) {
	claim := p.cfg.UsernameClaim
	v, ok := c.Claims[claim]
	if !ok {
		return identity.Identity{}, fmt.Errorf("%w: the provider's ID token has no %q claim, which names the user (--oidc-username-claim); "+
			"have the provider add it to the ID token or choose another claim", ErrRefused, claim)
	}
	name, ok := v.(string)
	if !ok || name == "" {
		return identity.Identity{}, fmt.Errorf("%w: the %q claim of the provider's ID token is not a non-empty string", ErrRefused, claim)
	}
	// The kube-apiserver's JWT authenticator takes an e-mail as a user name
	// only when the provider verified it (email_verified absent or true).
	if claim == "email" {
		if ev, ok := c.Claims["email_verified"]; ok {
			if verified, isBool := ev.(bool); !isBool || !verified {
				return identity.Identity{}, fmt.Errorf("%w: the provider has not verified this user's e-mail (email_verified is not true), so it cannot name the user", ErrRefused)
			}
		}
	}
	groups, err := stringList(c.Claims[p.cfg.GroupsClaim])
	if err != nil {
		return identity.Identity{}, fmt.Errorf("%w: the %q claim of the provider's ID token %w", ErrRefused, p.cfg.GroupsClaim, err)
	}
	prefixed := make([]string, 0, len(groups))
	for _, g := range groups {
		prefixed = append(prefixed, p.cfg.GroupsPrefix+g)
	}
	kept := p.cfg.Policy.Allowed(prefixed)
	slices.Sort(kept)
	kept = slices.Compact(kept)
	id := identity.Identity{Username: identity.OIDCPrefix + name, Groups: kept}
	if err := p.cfg.Policy.Check(id); err != nil {
		return identity.Identity{}, fmt.Errorf("%w: the %q claim %q cannot name a Kubernetes user here (it may not hold a colon or a line break); choose another claim with --oidc-username-claim",
			ErrRefused, claim, name)
	}
	if dropped := len(prefixed) - len(kept); dropped > 0 {
		p.cfg.Log.Info("provider groups dropped: not named by --impersonate-group", "user", id.Username, "dropped", dropped, "kept", kept)
	}
	return id, nil
}

// HTTPClient returns the client that reaches the provider: it trusts the
// system's roots and, when caFile is set (--oidc-ca-file), the PEM
// certificates of that file, for a provider with a private CA.
func HTTPClient(caFile string) (*http.Client, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("--oidc-ca-file %s holds no PEM certificate: give the CA that signed the provider's certificate", caFile)
		}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
	}}, nil
}

// stringList reads a groups claim: a list of strings, one string, or absent.
func stringList(v any) ([]string, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{t}, nil
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, errors.New("holds something other than strings")
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, errors.New("is neither a string nor a list of strings")
	}
}
