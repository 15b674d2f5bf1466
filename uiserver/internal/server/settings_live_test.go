package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// lifetimeOf is exp - iat of a JWT, in seconds.
func lifetimeOf(t *testing.T, jwt string) uint64 {
	t.Helper()

	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}

	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}

	var c struct{ Exp, Iat uint64 }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}

	return c.Exp - c.Iat
}

// TestSettingsLive: ichor-ui reads the sign-in lifetimes of Ichor's
// settings at every sign-in, not once at start: an admin changes the ID
// token lifetime through the Settings API and the next sign-in of the same
// running server issues tokens of the new lifetime; clearing it brings the
// default back. (The controller's reading of the default drift policy is
// talosmachine's TestDefaultDriftPolicyIsReadLive.)
func TestSettingsLive(t *testing.T) {
	resetInstallation(t)
	t.Cleanup(func() { resetInstallation(t) })

	newUser(t, "lena", "lena-password-long", "viewer")

	check := func(what string, want uint64) {
		t.Helper()

		tok := signIn(t, "lena", "lena-password-long")
		if tok.ExpiresIn != want || lifetimeOf(t, tok.AccessToken) != want || lifetimeOf(t, tok.IDToken) != want {
			t.Fatalf("%s: expires_in %d, access token %ds, ID token %ds; want %ds", what, tok.ExpiresIn,
				lifetimeOf(t, tok.AccessToken), lifetimeOf(t, tok.IDToken), want)
		}
	}

	check("the default", 300)

	if _, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "2m"}); err != nil {
		t.Fatal(err)
	}

	check("after idTokenLifetime 2m", 120)

	if _, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{Clear: []string{"id_token_lifetime"}}); err != nil {
		t.Fatal(err)
	}

	check("after clearing it", 300)
}
