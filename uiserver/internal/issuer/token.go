package issuer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// codeLifetime is how long an authorization code may be exchanged.
const codeLifetime = time.Minute

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

// errUnknownToken: the code or refresh token is not its session's.
var errUnknownToken = errors.New("unknown token")

func (i *Issuer) codeGrant(w http.ResponseWriter, ctx context.Context, c *Client, f url.Values) {
	sid, h, ok := tokenSession(f.Get("code"))
	if !ok {
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code is unknown, used or expired"))
		return
	}
	now := i.now()
	_, sessionTTL := i.lifetimes()
	refresh := sessionToken(sid)
	var reused bool
	var refused *oidc.Error
	rec, err := i.update(ctx, sid, func(r *Record) error {
		reused, refused = false, nil
		switch {
		case r.Code.Hash != h:
			return errUnknownToken
		case r.Code.Used:
			// Reuse: end the sign-in made with this code, or being made with it.
			reused = true
			if r.Revoked {
				return errNoChange
			}
			r.Revoked, r.Ended = true, "the authorization code of this sign-in was presented twice"
			return nil
		}
		r.Code.Used = true // a code is used once, whatever the outcome
		switch {
		case now.After(r.Code.Expires):
			refused = oidc.ErrInvalidGrant().WithDescription("the authorization code is unknown, used or expired")
		case r.Client != c.ID || r.Code.Redirect != f.Get("redirect_uri"):
			refused = oidc.ErrInvalidGrant().WithDescription("the authorization code was issued to another client or redirect_uri")
		case !oidc.VerifyCodeChallenge(&oidc.CodeChallenge{Challenge: r.Code.Challenge, Method: oidc.CodeChallengeMethodS256}, f.Get("code_verifier")):
			refused = oidc.ErrInvalidGrant().WithDescription("code_verifier does not match the code_challenge (PKCE)")
		default:
			r.RefreshHash, r.Expires = tokenHash(refresh), now.Add(sessionTTL)
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNoSession) || errors.Is(err, errUnknownToken):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code is unknown, used or expired"))
		return
	case err != nil:
		i.opts.Log.Error("exchanging an authorization code", "error", err.Error())
		tokenError(w, oidc.ErrServerError().WithDescription("the sign-in session could not be read or written now; sign in again"))
		return
	case reused:
		i.opts.Log.Warn("authorization code reused: session revoked", "user", rec.ID.Username)
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the authorization code was already used: the sign-in made with it is revoked, sign in again"))
		return
	case refused != nil:
		tokenError(w, refused)
		return
	}
	i.issue(w, ctx, rec, refresh, rec.Code.Nonce)
}

// issue answers with a new access token and ID token of session rec and
// its refresh token, already stored as the session's next one.
func (i *Issuer) issue(w http.ResponseWriter, ctx context.Context, rec *Record, refresh, nonce string) {
	accessTTL, _ := i.lifetimes()
	access, exp, err := i.opts.Tokens.Mint(rec.ID, rec.SID, accessTTL)
	if err != nil {
		_ = i.revokeSession(ctx, rec.SID, "its tokens could not be made")
		tokenError(w, oidc.ErrServerError().WithDescription("the access token could not be made: %s", err.Error()))
		return
	}
	idToken, err := i.idToken(rec.ID, rec.Client, rec.SID, nonce, rec.AuthTime, exp)
	if err != nil {
		_ = i.revokeSession(ctx, rec.SID, "its tokens could not be made")
		tokenError(w, oidc.ErrServerError().WithDescription("the ID token could not be signed"))
		return
	}
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, &oidc.AccessTokenResponse{
		AccessToken: access, TokenType: oidc.BearerToken, RefreshToken: refresh,
		ExpiresIn: uint64(time.Until(exp).Round(time.Second).Seconds()), IDToken: idToken, Scope: rec.Scopes,
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
