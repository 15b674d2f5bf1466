// Package oidclogin is the CLI's side of signing in to ichor-ui's issuer
// (architecture, "Trust": `ichor auth token` as a client-go exec plugin).
// It is a native OAuth client (RFC 8252): the authorization code flow with
// PKCE S256, state and nonce, the browser sent to the issuer and back to a
// listener on 127.0.0.1 at a port picked for this sign-in; then refresh
// tokens, rotated by the issuer at every use; and RFC 7009 revocation at
// sign-out.
//
// The tokens of one issuer are kept in one file, 0600 in a 0700 directory,
// written whole through a rename; a lock beside it keeps two kubectl
// processes from refreshing at once (the issuer would take the second use of
// a rotated refresh token for a stolen one and end the sign-in). Nothing
// here prints or logs a token except Token's return value, which the exec
// plugin hands to client-go on standard output.
package oidclogin

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	"github.com/maeshinshin/ichor/contracts/pkg/authn"
)

// Options say which issuer to sign in to and how.
type Options struct {
	// Issuer is ichor-ui's issuer URL (the IchorInstallation's recorded URL).
	Issuer string
	// HTTP reaches the issuer (its TLS configuration trusts the issuer's CA).
	HTTP *http.Client
	// CacheDir holds the token files (~/.ichor/tokens).
	CacheDir string
	// Prompt receives what the user must do (the URL to open); standard error.
	Prompt io.Writer
	// Open opens a URL in the user's browser; nil, or an error, leaves it to
	// the user, who opens the printed URL.
	Open func(string) error
	// Code, when set, signs in on another device (a terminal with no
	// browser): the issuer's own page shows the code after the sign-in and
	// the person types it here; read one line. The PKCE verifier stays here,
	// so the code alone is worth nothing.
	Code io.Reader
	// LoginTimeout bounds a sign-in in the browser; zero means 5 minutes.
	LoginTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ErrNotSignedIn is returned by Logout when there is nothing to sign out of.
var ErrNotSignedIn = errors.New("not signed in")

// refreshGrant is the refresh_token grant type and parameter (RFC 6749 §6).
const refreshGrant = "refresh_token"

// minValidity is how long an ID token must still be valid to be handed out.
const minValidity = 30 * time.Second

// cached is the token file.
type cached struct {
	Issuer       string    `json:"issuer"`
	IDToken      string    `json:"idToken"`
	Expiry       time.Time `json:"expiry"`
	RefreshToken string    `json:"refreshToken,omitempty"`
}

// Token returns a valid ID token of the issuer's client ichor-cli and its
// expiry: the cached one, else one from the refresh token, else one from a
// sign-in in the browser.
func (o *Options) Token(ctx context.Context) (string, time.Time, error) {
	unlock, err := o.lock()
	if err != nil {
		return "", time.Time{}, err
	}
	defer unlock()

	c, err := o.read()
	if err != nil {
		return "", time.Time{}, err
	}
	if c != nil && c.IDToken != "" && c.Expiry.After(o.now().Add(minValidity)) {
		return c.IDToken, c.Expiry, nil
	}
	meta, err := o.discover(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	if c != nil && c.RefreshToken != "" {
		next, err := o.grant(ctx, meta.TokenEndpoint, url.Values{"grant_type": {refreshGrant}, refreshGrant: {c.RefreshToken}}, "")
		var oe *oauthError
		switch {
		case err == nil:
			return next.IDToken, next.Expiry, o.write(next)
		case errors.As(err, &oe) && oe.Code == "invalid_grant":
			// Ended (expired, revoked, the user disabled): sign in again.
			_, _ = fmt.Fprintf(o.Prompt, "The sign-in to %s has ended (%s); sign in again.\n", o.Issuer, oe.Description)
		default:
			return "", time.Time{}, err
		}
	}
	next, err := o.login(ctx, meta)
	if err != nil {
		return "", time.Time{}, err
	}
	return next.IDToken, next.Expiry, o.write(next)
}

// Logout revokes the refresh token at the issuer (ending the sign-in) and
// deletes the token file. The file goes even when the issuer cannot be
// reached; the error then says the sign-in may still be live.
func (o *Options) Logout(ctx context.Context) error {
	unlock, err := o.lock()
	if err != nil {
		return err
	}
	defer unlock()
	c, err := o.read()
	if err != nil {
		return err
	}
	if c == nil {
		return ErrNotSignedIn
	}
	var revokeErr error
	if c.RefreshToken != "" {
		revokeErr = o.revoke(ctx, c.RefreshToken)
	}
	if err := os.Remove(o.path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if revokeErr != nil {
		return fmt.Errorf("the tokens on this machine are deleted, but the issuer did not confirm the sign-out, so the sign-in may live until it expires: %w", revokeErr)
	}
	return nil
}

func (o *Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// path is the issuer's token file: one per issuer URL.
func (o *Options) path() string {
	sum := sha256.Sum256([]byte(strings.TrimSuffix(o.Issuer, "/")))
	return filepath.Join(o.CacheDir, hex.EncodeToString(sum[:8])+".json")
}

func (o *Options) read() (*cached, error) {
	b, err := os.ReadFile(o.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the token file: %w", err)
	}
	c := &cached{}
	if err := json.Unmarshal(b, c); err != nil || c.Issuer != strings.TrimSuffix(o.Issuer, "/") {
		// A damaged or foreign file is not used: sign in again.
		return nil, nil //nolint:nilerr // see above
	}
	return c, nil
}

func (o *Options) write(c *cached) error {
	c.Issuer = strings.TrimSuffix(o.Issuer, "/")
	b, err := json.Marshal(c) //nolint:gosec // G117: the token file is where the tokens are meant to be, 0600
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.CacheDir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", o.CacheDir, err)
	}
	return secretstore.WriteFileAtomic(o.path(), b)
}

// metadata is the part of the issuer's discovery document used here.
type metadata struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorization_endpoint"`
	TokenEndpoint         string `json:"token_endpoint"`
	RevocationEndpoint    string `json:"revocation_endpoint"`
}

func (o *Options) discover(ctx context.Context) (*metadata, error) {
	u := strings.TrimSuffix(o.Issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("the issuer %q is not a URL: %w", o.Issuer, err)
	}
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching ichor-ui's issuer at %s: %w", o.Issuer, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("ichor-ui's issuer at %s answered %s to its discovery document: is Ichor's sign-in on (`ichor init --ui-url`)?", o.Issuer, resp.Status)
	}
	m := &metadata{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(m); err != nil {
		return nil, fmt.Errorf("ichor-ui's discovery document: %w", err)
	}
	if strings.TrimSuffix(m.Issuer, "/") != strings.TrimSuffix(o.Issuer, "/") || m.AuthorizationEndpoint == "" || m.TokenEndpoint == "" {
		return nil, fmt.Errorf("the discovery document at %s names issuer %q and not itself: give the issuer's own URL", u, m.Issuer)
	}
	return m, nil
}

// oauthError is an OAuth error answer (RFC 6749 §5.2).
type oauthError struct {
	Code        string `json:"error"`
	Description string `json:"error_description"`
}

func (e *oauthError) Error() string {
	if e.Description == "" {
		return "the issuer refused: " + e.Code
	}
	return "the issuer refused: " + e.Code + ": " + e.Description
}

// grant posts a token request; nonce, when set, must be the ID token's.
func (o *Options) grant(ctx context.Context, endpoint string, form url.Values, nonce string) (*cached, error) {
	form.Set("client_id", authn.CLIClientID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the issuer's token endpoint: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		oe := &oauthError{}
		if json.Unmarshal(body, oe) == nil && oe.Code != "" {
			return nil, oe
		}
		return nil, fmt.Errorf("the issuer's token endpoint answered %s", resp.Status)
	}
	var tr struct {
		IDToken      string `json:"id_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &tr); err != nil || tr.IDToken == "" {
		return nil, errors.New("the issuer's token answer carries no ID token")
	}
	claims, err := idClaims(tr.IDToken)
	if err != nil {
		return nil, err
	}
	// The token came straight from the issuer's token endpoint over TLS
	// (OIDC Core §3.1.3.7, item 6), so its claims are read, not its
	// signature verified: the kube-apiserver verifies it.
	switch {
	case strings.TrimSuffix(claims.Issuer, "/") != strings.TrimSuffix(o.Issuer, "/"):
		return nil, fmt.Errorf("the ID token is from %q, not %s", claims.Issuer, o.Issuer)
	case !claims.hasAudience(authn.CLIClientID):
		return nil, fmt.Errorf("the ID token is not for %s", authn.CLIClientID)
	case nonce != "" && claims.Nonce != nonce:
		return nil, errors.New("the ID token's nonce is not this sign-in's: sign in again")
	}
	return &cached{IDToken: tr.IDToken, Expiry: time.Unix(claims.Expiry, 0), RefreshToken: tr.RefreshToken}, nil
}

type claims struct {
	Issuer   string          `json:"iss"`
	Audience json.RawMessage `json:"aud"`
	Expiry   int64           `json:"exp"`
	Nonce    string          `json:"nonce"`
}

func (c *claims) hasAudience(aud string) bool {
	var one string
	if json.Unmarshal(c.Audience, &one) == nil {
		return one == aud
	}
	var many []string
	if json.Unmarshal(c.Audience, &many) == nil {
		for _, a := range many {
			if a == aud {
				return true
			}
		}
	}
	return false
}

func idClaims(tok string) (*claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, errors.New("the issuer's ID token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("the issuer's ID token is not a JWT")
	}
	c := &claims{}
	if err := json.Unmarshal(b, c); err != nil || c.Expiry == 0 {
		return nil, errors.New("the issuer's ID token has no expiry")
	}
	return c, nil
}

func (o *Options) revoke(ctx context.Context, refresh string) error {
	meta, err := o.discover(ctx)
	if err != nil {
		return err
	}
	endpoint := meta.RevocationEndpoint
	if endpoint == "" {
		endpoint = strings.TrimSuffix(o.Issuer, "/") + "/oidc/revoke"
	}
	form := url.Values{"token": {refresh}, "token_type_hint": {refreshGrant}, "client_id": {authn.CLIClientID}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := o.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("reaching the issuer's revocation endpoint: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the issuer's revocation endpoint answered %s", resp.Status)
	}
	return nil
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// login signs in through the browser: it listens on 127.0.0.1, sends the
// user to the issuer and takes the code the issuer redirects back with.
func (o *Options) login(ctx context.Context, meta *metadata) (*cached, error) {
	if o.Code != nil {
		return o.loginElsewhere(ctx, meta)
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1 for the sign-in's redirect: %w", err)
	}
	redirect := fmt.Sprintf("http://%s%s", lis.Addr().String(), authn.CLICallbackPath)
	verifier, state, nonce := random(), random(), random()
	authURL := authorizeURL(meta, redirect, verifier, state, nonce)

	type result struct {
		code string
		err  error
	}
	done := make(chan result, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != authn.CLICallbackPath {
			http.NotFound(w, r)
			return
		}
		p := r.URL.Query()
		var res result
		switch {
		case p.Get("state") != state:
			// Not this sign-in's answer (a stale tab, or a forged request): ignored.
			http.Error(w, "This answer is not for the sign-in that is waiting; start again with `ichor auth token`.", http.StatusBadRequest)
			return
		case p.Get("error") != "":
			res.err = &oauthError{Code: p.Get("error"), Description: p.Get("error_description")}
		default:
			res.code = p.Get("code")
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		msg := "You are signed in to Ichor; you can close this tab."
		if res.err != nil {
			msg = "The sign-in failed: " + res.err.Error()
		}
		_, _ = fmt.Fprintf(w, "<!doctype html><title>Ichor</title><p>%s</p>\n", html.EscapeString(msg))
		select {
		case done <- res:
		default:
		}
	})}
	go func() { _ = srv.Serve(lis) }()
	defer func() { _ = srv.Close() }()

	_, _ = fmt.Fprintf(o.Prompt, "Sign in to Ichor at:\n\n    %s\n\n", authURL)
	if o.Open != nil {
		if err := o.Open(authURL); err != nil {
			_, _ = fmt.Fprintf(o.Prompt, "(no browser could be opened: %v; open the address above on this machine)\n", err)
		}
	}
	timeout := o.LoginTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var res result
	select {
	case res = <-done:
	case <-wait.Done():
		return nil, fmt.Errorf("no sign-in within %s: run the command again and open the address it prints", timeout)
	}
	if res.err != nil {
		return nil, res.err
	}
	return o.grant(ctx, meta.TokenEndpoint, codeForm(res.code, redirect, verifier), nonce)
}

// authorizeURL is the authorization request of a sign-in: PKCE (S256), the
// CLI's client ID and redirect, and offline_access for the refresh token.
func authorizeURL(meta *metadata, redirect, verifier, state, nonce string) string {
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {authn.CLIClientID}, "redirect_uri": {redirect},
		"scope": {"openid offline_access"}, "state": {state}, "nonce": {nonce},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	return meta.AuthorizationEndpoint + "?" + q.Encode()
}

// loginElsewhere signs in on another device: the person opens the address,
// signs in, and types the code the issuer's page shows (redirect URI
// <issuer>/oidc/code); it is exchanged with this process's PKCE verifier.
func (o *Options) loginElsewhere(ctx context.Context, meta *metadata) (*cached, error) {
	redirect := strings.TrimSuffix(o.Issuer, "/") + authn.CLICodePath
	verifier, state, nonce := random(), random(), random()
	_, _ = fmt.Fprintf(o.Prompt, "Open this address in a browser on any device and sign in:\n\n    %s\n\nThen type the code the page shows, within a minute: ",
		authorizeURL(meta, redirect, verifier, state, nonce))
	timeout := o.LoginTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(o.Code).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	var code string
	select {
	case code = <-lines:
	case <-time.After(timeout):
		return nil, fmt.Errorf("no code typed within %s: run the command again", timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if code == "" {
		return nil, errors.New("no code was typed: run the command again and type the code the sign-in page shows")
	}
	return o.grant(ctx, meta.TokenEndpoint, codeForm(code, redirect, verifier), nonce)
}

// codeForm is the authorization_code grant of a code, with its redirect and PKCE verifier.
func codeForm(code, redirect, verifier string) url.Values {
	return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "code_verifier": {verifier}}
}
