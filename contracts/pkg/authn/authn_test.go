package authn_test

import (
	"errors"
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/authn"
)

func external(mut func(*ichorv1alpha1.ExternalOIDC)) ichorv1alpha1.AuthenticationSpec {
	e := &ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com/realms/main", Audiences: []string{"kubernetes"}, GroupsClaim: "groups"}
	if mut != nil {
		mut(e)
	}

	return ichorv1alpha1.AuthenticationSpec{External: e}
}

// TestConfiguration: an external provider becomes one JWT authenticator
// whose users and groups carry the oidc: prefix, beside Talos's anonymous
// health paths; nothing asked renders nothing.
func TestConfiguration(t *testing.T) {
	if cfg, err := authn.Configuration(ichorv1alpha1.AuthenticationSpec{}, nil); err != nil || cfg != nil {
		t.Fatalf("an empty spec.authentication renders %v, %v; want nothing", cfg, err)
	}

	cfg, err := authn.Configuration(external(nil), nil)
	if err != nil {
		t.Fatal(err)
	}

	if _, ok := cfg["apiVersion"]; ok {
		t.Fatalf("the document's configuration carries apiVersion (Talos adds it): %v", cfg)
	}

	anon, _ := cfg["anonymous"].(map[string]any)
	if conds, _ := anon["conditions"].([]any); anon["enabled"] != true || len(conds) != 3 {
		t.Fatalf("anonymous %v, want Talos's health paths kept", anon)
	}

	jwts, _ := cfg["jwt"].([]any)
	if len(jwts) != 1 {
		t.Fatalf("jwt %v, want one authenticator", cfg["jwt"])
	}

	jwt, _ := jwts[0].(map[string]any)
	issuer, _ := jwt["issuer"].(map[string]any)
	mappings, _ := jwt["claimMappings"].(map[string]any)
	user, _ := mappings["username"].(map[string]any)
	groups, _ := mappings["groups"].(map[string]any)

	if issuer["url"] != "https://login.example.com/realms/main" || user["claim"] != authn.DefaultUsernameClaim || user["prefix"] != "oidc:" ||
		groups["claim"] != "groups" || groups["prefix"] != "oidc:" {
		t.Fatalf("the authenticator: issuer %v, username %v, groups %v", issuer, user, groups)
	}
}

// TestConfigurationValidated: what the kube-apiserver would refuse is
// refused before anything is rendered, with the field named.
func TestConfigurationValidated(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*ichorv1alpha1.ExternalOIDC)
		want string
	}{
		"http issuer":          {func(e *ichorv1alpha1.ExternalOIDC) { e.IssuerURL = "http://login.example.com" }, "jwt[0].issuer.url"},
		"issuer with a query":  {func(e *ichorv1alpha1.ExternalOIDC) { e.IssuerURL = "https://login.example.com/?a=b" }, "jwt[0].issuer.url"},
		"CA that is not PEM":   {func(e *ichorv1alpha1.ExternalOIDC) { e.CertificateAuthority = "not a certificate" }, "jwt[0].issuer.certificateAuthority"},
		"no audience":          {func(e *ichorv1alpha1.ExternalOIDC) { e.Audiences = nil }, "jwt[0].issuer.audiences"},
		"a duplicate audience": {func(e *ichorv1alpha1.ExternalOIDC) { e.Audiences = []string{"a", "a"} }, "jwt[0].issuer.audiences"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := authn.Configuration(external(tc.mut), nil)
			if err == nil || cfg != nil {
				t.Fatalf("rendered %v, %v; want a refusal", cfg, err)
			}

			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "spec.authentication: ") {
				t.Fatalf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

// TestIchorUsers: spec.authentication.ichorUsers trusts ichor-ui's issuer as
// the IchorInstallation publishes it: its URL, the discovery document on the
// ClusterIP, its CA, the CLI's client as the audience, the token's own
// username and groups (already ichor:/oidc: names), and CEL rules (compiled
// by the validation) that refuse any other name and a system: group. Before
// the issuer is published nothing is rendered, with the reason.
func TestIchorUsers(t *testing.T) {
	s := ichorv1alpha1.AuthenticationSpec{IchorUsers: true}

	if _, err := authn.Configuration(s, nil); !errors.Is(err, authn.ErrIssuerNotPublished) {
		t.Fatalf("ichorUsers without a published issuer: %v", err)
	}

	iss := &ichorv1alpha1.IssuerStatus{URL: "https://ichor.example.com", DiscoveryURL: "https://10.96.0.20:8444/.well-known/openid-configuration"}

	cfg, err := authn.Configuration(s, iss)
	if err != nil {
		t.Fatal(err)
	}

	jwts, _ := cfg["jwt"].([]any)
	if len(jwts) != 1 {
		t.Fatalf("jwt %v", cfg["jwt"])
	}

	jwt, _ := jwts[0].(map[string]any)
	issuer, _ := jwt["issuer"].(map[string]any)
	auds, _ := issuer["audiences"].([]any)
	rules, _ := jwt["userValidationRules"].([]any)

	if issuer["url"] != iss.URL || issuer["discoveryURL"] != iss.DiscoveryURL || len(auds) != 1 || auds[0] != authn.CLIClientID || len(rules) != 2 {
		t.Fatalf("the authenticator of Ichor's users: %v", jwt)
	}

	// Both: two authenticators; the same issuer twice is refused.
	s.External = &ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}}
	if cfg, err := authn.Configuration(s, iss); err != nil || len(cfg["jwt"].([]any)) != 2 {
		t.Fatalf("both issuers: %v, %v", cfg, err)
	}

	s.External.IssuerURL = iss.URL
	if _, err := authn.Configuration(s, iss); err == nil || !strings.Contains(err.Error(), "Duplicate") {
		t.Fatalf("the external provider at ichor-ui's URL: %v", err)
	}
}
