// Package auth signs and verifies the tokens of ichor-ui's sign-in: access
// tokens (JWTs, ES256) that name a Kubernetes user and groups. The issuer
// (Ichor's own users) mints them; the API checks them on every call.
package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/maeshinshin/ichor/contracts/pkg/authn"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// Audience is the audience of the access tokens the API accepts. It is
// neither client's ID (ConsoleClientID, CLIClientID), the audience of their
// ID tokens, so an ID token is never taken for an access token; access
// tokens also carry the JWT type AccessTokenType (RFC 9068), ID tokens "JWT".
const Audience = "ichor-ui-api"

// Client IDs of the issuer's clients: each is the audience of its ID tokens.
const (
	// ConsoleClientID is the web console.
	ConsoleClientID = "ichor-ui"
	// CLIClientID is the CLI (`ichor auth token`).
	CLIClientID = authn.CLIClientID
)

// AccessTokenType is the typ header of an access token (RFC 9068).
const AccessTokenType = "at+jwt"

// ErrInvalidToken is wrapped by every verification failure; its text never
// contains the token.
var ErrInvalidToken = errors.New("invalid token")

// Authenticator turns a bearer token into the signed-in user.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (identity.Identity, error)
}

// Key is a signing key with its key ID.
type Key struct {
	// ID is the key ID (kid), derived from the public key.
	ID string
	// Private is the ECDSA P-256 key.
	Private *ecdsa.PrivateKey
}

// NewKey makes a new P-256 signing key.
func NewKey() (*Key, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return KeyFrom(k)
}

// KeyFrom wraps an existing P-256 key.
func KeyFrom(k *ecdsa.PrivateKey) (*Key, error) {
	if k.Curve != elliptic.P256() {
		return nil, errors.New("the signing key must be ECDSA P-256 (ES256)")
	}
	pub, err := k.PublicKey.Bytes()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pub)
	return &Key{ID: hex.EncodeToString(sum[:8]), Private: k}, nil
}

// Public returns the JWK of the public key.
func (k *Key) Public() jose.JSONWebKey {
	return jose.JSONWebKey{Key: &k.Private.PublicKey, KeyID: k.ID, Algorithm: string(jose.ES256), Use: "sig"}
}

// Claims are the claims of an access token.
type Claims struct {
	jwt.Claims
	// Groups are the user's Kubernetes groups.
	Groups []string `json:"groups,omitempty"`
	// Username is the Kubernetes user name.
	Username string `json:"username"`
	// Session is the sign-in session (refresh token family) the token belongs to.
	Session string `json:"sid,omitempty"`
}

// Tokens mints and verifies access tokens.
type Tokens struct {
	// Issuer is the iss claim, the issuer's external URL.
	Issuer string
	// Key signs; Verify accepts it and Previous.
	Key *Key
	// Previous are keys still accepted (rotation).
	Previous []*Key
	// Policy drops groups that may not be impersonated.
	Policy identity.Policy
	// Revoked, when set, reports sessions whose tokens no longer count.
	Revoked func(session string) bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (t *Tokens) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// Mint signs an access token for id, valid for ttl.
func (t *Tokens) Mint(id identity.Identity, session string, ttl time.Duration) (string, time.Time, error) {
	if err := t.Policy.Check(id); err != nil {
		return "", time.Time{}, err
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: t.Key.Private},
		(&jose.SignerOptions{}).WithType(AccessTokenType).WithHeader("kid", t.Key.ID))
	if err != nil {
		return "", time.Time{}, err
	}
	now := t.now()
	exp := now.Add(ttl)
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", time.Time{}, err
	}
	c := Claims{
		Claims: jwt.Claims{
			Issuer:   t.Issuer,
			Subject:  id.Username,
			Audience: jwt.Audience{Audience},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
			Expiry: jwt.NewNumericDate(exp),
			ID:     hex.EncodeToString(jti),
		},
		Groups:   id.Groups,
		Username: id.Username,
		Session:  session,
	}
	s, err := jwt.Signed(sig).Claims(c).Serialize()
	return s, exp, err
}

// Authenticate verifies an access token and returns its user.
func (t *Tokens) Authenticate(_ context.Context, token string) (identity.Identity, error) {
	c, err := t.Verify(token)
	if err != nil {
		return identity.Identity{}, err
	}
	return identity.Identity{Username: c.Username, Groups: t.Policy.Allowed(c.Groups)}, nil
}

// Verify checks an access token's signature, issuer, audience and lifetime.
func (t *Tokens) Verify(token string) (*Claims, error) {
	if token == "" || strings.Count(token, ".") != 2 {
		return nil, fmt.Errorf("%w: not a JWT", ErrInvalidToken)
	}
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidToken, "malformed")
	}
	if len(parsed.Headers) != 1 || parsed.Headers[0].ExtraHeaders[jose.HeaderType] != AccessTokenType {
		return nil, fmt.Errorf("%w: not an access token (an ID token is not accepted here)", ErrInvalidToken)
	}
	var c Claims
	verified := false
	for _, k := range append([]*Key{t.Key}, t.Previous...) {
		if len(parsed.Headers) == 1 && parsed.Headers[0].KeyID != "" && parsed.Headers[0].KeyID != k.ID {
			continue
		}
		if err := parsed.Claims(&k.Private.PublicKey, &c); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, fmt.Errorf("%w: bad signature or unknown key", ErrInvalidToken)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: t.Issuer, AnyAudience: jwt.Audience{Audience}, Time: t.now()}, 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidToken, strings.TrimPrefix(err.Error(), "go-jose/go-jose/jwt: "))
	}
	if c.Username != c.Subject {
		return nil, fmt.Errorf("%w: username and subject differ", ErrInvalidToken)
	}
	if t.Revoked != nil && c.Session != "" && t.Revoked(c.Session) {
		return nil, fmt.Errorf("%w: the session was signed out", ErrInvalidToken)
	}
	return &c, nil
}
