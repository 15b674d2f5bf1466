package issuer

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/auth"
)

// A sign-in in progress keeps nothing on the server: the login form and the
// external provider's state carry it sealed (AES-256-GCM under a key derived
// from the token signing key every replica shares), so the form opened on
// one replica may be posted to another, and an unauthenticated visitor
// makes no server-side state at all. The seal both hides (the provider's
// PKCE verifier travels in its state) and authenticates (a form cannot be
// edited); the purpose is bound as additional data, so a form cannot pass
// for a provider state.

// Seal purposes.
const (
	purposeForm     = "ichor-ui login form v1"
	purposeExternal = "ichor-ui external sign-in v1"
)

// pendingAuth is an authorization request waiting for its user: the login
// form's sealed content.
type pendingAuth struct {
	Client    string    `json:"c"`
	Redirect  string    `json:"r"`
	State     string    `json:"s,omitempty"`
	Nonce     string    `json:"n,omitempty"`
	Challenge string    `json:"p"`
	Scopes    []string  `json:"o"`
	Expires   time.Time `json:"e"`
	// CSRF is the hash of the login cookie of the browser that opened the form.
	CSRF string `json:"x"`
	// Failures are the wrong passwords sent with this form so far.
	Failures int `json:"f,omitempty"`
}

// externalFlow is a sign-in with the external provider: the provider's
// state, sealed.
type externalFlow struct {
	Pending pendingAuth `json:"a"`
	// Binding is the hash of the browser's binding cookie.
	Binding  string    `json:"b"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Expires  time.Time `json:"e"`
}

type sealer struct{ aead cipher.AEAD }

func newSealer(k *auth.Key) (sealer, error) {
	secret, err := k.Private.Bytes()
	if err != nil {
		return sealer{}, err
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "ichor-ui issuer: sealed sign-ins", 32)
	if err != nil {
		return sealer{}, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return sealer{}, err
	}
	aead, err := cipher.NewGCM(block)
	return sealer{aead: aead}, err
}

func (s sealer) seal(purpose string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, b, []byte(purpose))), nil
}

var errSeal = errors.New("not a sealed sign-in of this issuer")

func (s sealer) open(purpose, text string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(b) < s.aead.NonceSize() {
		return errSeal
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], []byte(purpose))
	if err != nil {
		return errSeal
	}
	if json.Unmarshal(plain, v) != nil {
		return errSeal
	}
	return nil
}
