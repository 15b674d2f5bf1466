package issuer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// codeGrant is an authorization code waiting for its exchange. A code is
// exchanged once: the first presentation marks it used, whatever the
// outcome, and a used code is kept (until its session would have ended) so
// that a second presentation revokes the session issued from it (RFC 6749
// §4.1.2: someone else holds a copy of the code).
type codeGrant struct {
	client, redirect, nonce, challenge string
	fingerprint                        string
	scopes                             []string
	id                                 identity.Identity
	authTime, expires                  time.Time
	// used is set by the first presentation; sid is the session made from
	// it, once there is one; reused is set by a later presentation, so that
	// a first exchange still under way makes no session.
	used, reused bool
	sid          string
	// keep is how long a used code is remembered after it expired.
	keep time.Time
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
	if ok && g.used {
		// Reuse: end the sign-in made with this code, and the one being made.
		g.reused = true
		var user string
		if s := i.sessions[g.sid]; s != nil && !s.revoked {
			s.revoked = true
			s.ended = "the authorization code of this sign-in was presented twice"
			user = s.id.Username
		}
		i.mu.Unlock()
		if user != "" {
			i.opts.Log.Warn("authorization code reused: session revoked", "user", user)
		}
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code was already used: the sign-in made with it is revoked, sign in again"))
		return
	}
	if ok {
		g.used = true // a code is used once, whatever the outcome
	}
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
	accessTTL, sessionTTL := i.lifetimes()
	i.mu.Lock()
	if g.reused {
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code was presented twice: sign in again"))
		return
	}
	i.sessions[sid] = &session{id: g.id, fingerprint: g.fingerprint, client: c.ID, scopes: g.scopes, authTime: g.authTime, expires: now.Add(sessionTTL)}
	g.sid, g.keep = sid, now.Add(sessionTTL+accessTTL)
	i.mu.Unlock()
	i.issue(w, sid, g.nonce)
}

// issue answers with a new access token, ID token and refresh token of session sid.
func (i *Issuer) issue(w http.ResponseWriter, sid, nonce string) {
	i.mu.Lock()
	s := i.sessions[sid]
	id, client, scopes, authTime := s.id, s.client, s.scopes, s.authTime
	i.mu.Unlock()
	accessTTL, _ := i.lifetimes()
	access, exp, err := i.opts.Tokens.Mint(id, sid, accessTTL)
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
