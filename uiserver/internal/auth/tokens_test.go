package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

func TestTokenLifecycle(t *testing.T) {
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	revoked := map[string]bool{}
	tk := &Tokens{Issuer: "https://ui.test", Key: k, Now: func() time.Time { return now }, Revoked: func(s string) bool { return revoked[s] }}
	tok, _, err := tk.Mint(identity.Identity{Username: "ichor:ada", Groups: []string{"ichor:admin"}}, "s1", 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id, err := tk.Authenticate(context.Background(), tok)
	if err != nil || id.Username != "ichor:ada" || len(id.Groups) != 1 {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}
	// Another issuer's key, a tampered token, an expired one and a signed-out session are refused.
	k2, _ := NewKey()
	other := &Tokens{Issuer: "https://ui.test", Key: k2, Now: tk.Now}
	if _, err := other.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("foreign key: %v", err)
	}
	parts := strings.Split(tok, ".")
	if _, err := tk.Verify(parts[0] + "." + parts[1] + "x." + parts[2]); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("tampered: %v", err)
	}
	now = now.Add(6 * time.Minute)
	if _, err := tk.Verify(tok); !errors.Is(err, ErrInvalidToken) || strings.Contains(err.Error(), tok) {
		t.Errorf("expired: %v", err)
	}
	now = now.Add(-6 * time.Minute)
	revoked["s1"] = true
	if _, err := tk.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("revoked session: %v", err)
	}
	// No token is minted for a user ichor-ui may not impersonate.
	if _, _, err := tk.Mint(identity.Identity{Username: "ichor:x", Groups: []string{"system:masters"}}, "", time.Minute); err == nil {
		t.Error("minted a token with a system: group")
	}
}
