package external

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

func TestNewRefusesBadConfig(t *testing.T) {
	ok := Config{IssuerURL: "https://idp.test", ClientID: "ichor-ui", RedirectURL: "https://ui.test/oidc/external/callback"}
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no issuer", func(c *Config) { c.IssuerURL = "" }, "--oidc-issuer-url is empty"},
		{"http issuer", func(c *Config) { c.IssuerURL = "http://idp.test" }, "must be an https URL"},
		{"no client", func(c *Config) { c.ClientID = "" }, "--oidc-client-id is empty"},
		{"system prefix", func(c *Config) { c.GroupsPrefix = "system:" }, "system: groups"},
		{"prefix of system", func(c *Config) { c.GroupsPrefix = "sys" }, "system: groups"},
		{"ichor prefix", func(c *Config) { c.GroupsPrefix = "ichor:" }, "ichor: groups"},
	} {
		cfg := ok
		c.mutate(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	p, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "idp.test" || p.cfg.UsernameClaim != "sub" || p.cfg.GroupsClaim != "groups" || p.cfg.GroupsPrefix != "oidc:" {
		t.Errorf("defaults: name %q, claims %q %q, prefix %q", p.Name(), p.cfg.UsernameClaim, p.cfg.GroupsClaim, p.cfg.GroupsPrefix)
	}
}

func TestIdentityOf(t *testing.T) {
	p, err := New(Config{IssuerURL: "https://idp.test", ClientID: "c", RedirectURL: "https://ui.test/cb", UsernameClaim: "email",
		Policy: identity.Policy{ExtraGroups: []string{"oidc:ops"}}})
	if err != nil {
		t.Fatal(err)
	}
	claims := func(m map[string]any) *oidc.IDTokenClaims { return &oidc.IDTokenClaims{Claims: m} }
	id, err := p.identityOf(claims(map[string]any{"email": "ann@x.test", "email_verified": true,
		"groups": []any{"ops", "ichor:admin", "system:masters", "ops"}}))
	if err != nil || id.Username != "oidc:ann@x.test" || len(id.Groups) != 1 || id.Groups[0] != "oidc:ops" {
		t.Fatalf("identityOf = %+v, %v; want oidc:ann@x.test in [oidc:ops]", id, err)
	}
	if id, err := p.identityOf(claims(map[string]any{"email": "ann@x.test", "groups": "ops"})); err != nil || len(id.Groups) != 1 {
		t.Errorf("a single-string groups claim: %+v, %v", id, err)
	}
	for name, c := range map[string]struct {
		claims map[string]any
		want   string
	}{
		"missing":      {map[string]any{"sub": "ann"}, `has no "email" claim`},
		"not a string": {map[string]any{"email": 42}, "not a non-empty string"},
		"unverified":   {map[string]any{"email": "ann@x.test", "email_verified": false}, "not verified"},
		"bad groups":   {map[string]any{"email": "ann@x.test", "groups": []any{1}}, "other than strings"},
		"colon":        {map[string]any{"email": "a:b@x.test"}, "cannot name a Kubernetes user"},
	} {
		if _, err := p.identityOf(claims(c.claims)); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrRefused saying %q", name, err, c.want)
		}
	}
}

func TestHTTPClientCAFile(t *testing.T) {
	if _, err := HTTPClient(""); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := HTTPClient(f); err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
	if _, err := HTTPClient(filepath.Join(t.TempDir(), "missing.pem")); err == nil || !strings.Contains(err.Error(), "--oidc-ca-file") {
		t.Errorf("a missing CA file: %v", err)
	}
}
