// Package authn renders the kube-apiserver's structured authentication
// configuration from a TalosCluster's spec.authentication (architecture,
// "Trust": the kube-apiserver accepts the users who sign in to Ichor, so
// RBAC and audit apply per user), and validates it as the kube-apiserver
// would before anything is rendered.
//
// Talos carries the configuration in the KubeAuthenticationConfig document
// (v1.14 contract and later) and does not validate it (machinery
// config/types/k8s/authentication.go: the configuration is a free-form
// object written as the kube-apiserver's --authentication-config file), so a
// mistake there would stop every kube-apiserver it reaches. Configuration
// runs Kubernetes's own validation (k8s.io/apiserver's
// ValidateAuthenticationConfiguration, CEL expressions compiled) on the
// object it returns.
package authn

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// ExternalPrefix prefixes the names and groups of an external provider's
// users, as ichor-ui names them (`oidc:<name>`).
const ExternalPrefix = "oidc:"

// DefaultUsernameClaim is the claim that names an external provider's user
// when spec.authentication.external.usernameClaim is empty.
const DefaultUsernameClaim = "sub"

// anonymousPaths are the paths an unauthenticated caller may read, as in
// Talos's default configuration (machinery config/types/k8s/authentication.go,
// DefaultAuthenticationConfig): a configuration Ichor renders replaces
// Talos's whole document, so it keeps them.
var anonymousPaths = []string{"/livez", "/readyz", "/healthz"}

var scheme = runtime.NewScheme()

func init() {
	apiserverinstall.Install(scheme)
}

// Enabled reports whether spec.authentication asks for anything, that is
// whether the render carries a KubeAuthenticationConfig of Ichor's.
func Enabled(s ichorv1alpha1.AuthenticationSpec) bool {
	return s.External != nil || s.IchorUsers
}

// ErrIssuerNotPublished means spec.authentication.ichorUsers is set while the
// IchorInstallation has no status.issuer yet.
var ErrIssuerNotPublished = errors.New("spec.authentication.ichorUsers: ichor-ui's issuer is not published yet (the IchorInstallation's status.issuer is empty): " +
	"Ichor's users need ichor-ui's URL recorded (`ichor init --ui-url`) and the controller running; the render follows once it is")

// Ichor's users' names and groups (ichor-ui's identity package): only
// these come through its issuer, and never a system: group.
const (
	ichorUserRule  = "user.username.startsWith('ichor:') || user.username.startsWith('oidc:')"
	ichorGroupRule = "!user.groups.exists(g, g.startsWith('system:'))"
)

// Build is the kube-apiserver's AuthenticationConfiguration for s; iss is
// ichor-ui's issuer, used when s.IchorUsers is set.
func Build(s ichorv1alpha1.AuthenticationSpec, iss *ichorv1alpha1.IssuerStatus) *apiserverv1.AuthenticationConfiguration {
	cfg := &apiserverv1.AuthenticationConfiguration{
		TypeMeta:  metav1.TypeMeta{APIVersion: apiserverv1.SchemeGroupVersion.String(), Kind: "AuthenticationConfiguration"},
		Anonymous: &apiserverv1.AnonymousAuthConfig{Enabled: true},
	}

	for _, p := range anonymousPaths {
		cfg.Anonymous.Conditions = append(cfg.Anonymous.Conditions, apiserverv1.AnonymousAuthCondition{Path: p})
	}

	if s.IchorUsers && iss != nil {
		discovery := iss.DiscoveryURL
		cfg.JWT = append(cfg.JWT, apiserverv1.JWTAuthenticator{
			Issuer: apiserverv1.Issuer{URL: iss.URL, DiscoveryURL: &discovery, CertificateAuthority: iss.CertificateAuthority, Audiences: []string{CLIClientID}},
			ClaimMappings: apiserverv1.ClaimMappings{
				// The issuer's username and groups claims are already the
				// Kubernetes names (ichor:<name>, ichor:<role>).
				Username: apiserverv1.PrefixedClaimOrExpression{Claim: "username", Prefix: new("")},
				Groups:   apiserverv1.PrefixedClaimOrExpression{Claim: "groups", Prefix: new("")},
			},
			UserValidationRules: []apiserverv1.UserValidationRule{
				{Expression: ichorUserRule, Message: "ichor-ui's issuer names only ichor: and oidc: users"},
				{Expression: ichorGroupRule, Message: "ichor-ui's issuer may not name a system: group"},
			},
		})
	}

	if e := s.External; e != nil {
		claim := e.UsernameClaim
		if claim == "" {
			claim = DefaultUsernameClaim
		}

		jwt := apiserverv1.JWTAuthenticator{
			Issuer: apiserverv1.Issuer{URL: e.IssuerURL, Audiences: e.Audiences, CertificateAuthority: e.CertificateAuthority},
			ClaimMappings: apiserverv1.ClaimMappings{
				Username: apiserverv1.PrefixedClaimOrExpression{Claim: claim, Prefix: new(ExternalPrefix)},
			},
		}

		if len(e.Audiences) > 1 {
			jwt.Issuer.AudienceMatchPolicy = apiserverv1.AudienceMatchPolicyMatchAny
		}

		if e.GroupsClaim != "" {
			jwt.ClaimMappings.Groups = apiserverv1.PrefixedClaimOrExpression{Claim: e.GroupsClaim, Prefix: new(ExternalPrefix)}
		}

		cfg.JWT = append(cfg.JWT, jwt)
	}

	return cfg
}

// Validate says what the kube-apiserver would refuse in cfg, nil when
// nothing. The fields are named as in the configuration (jwt[0].issuer.url).
func Validate(cfg *apiserverv1.AuthenticationConfiguration) error {
	internal := &apiserver.AuthenticationConfiguration{}
	if err := scheme.Convert(cfg, internal, nil); err != nil {
		return fmt.Errorf("converting the authentication configuration: %w", err)
	}

	errs := validation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(), internal, nil)
	if len(errs) == 0 {
		return nil
	}

	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}

	return fmt.Errorf("the kube-apiserver would refuse the authentication configuration: %s", strings.Join(msgs, "; "))
}

// Configuration is the validated configuration of s (with ichor-ui's
// issuer iss when s.IchorUsers is set) as the free-form object
// Talos's KubeAuthenticationConfig document carries (without apiVersion and
// kind, which Talos adds when it writes the file); nil when s asks for
// nothing.
func Configuration(s ichorv1alpha1.AuthenticationSpec, iss *ichorv1alpha1.IssuerStatus) (map[string]any, error) {
	if !Enabled(s) {
		return nil, nil
	}

	if s.IchorUsers && (iss == nil || iss.URL == "" || iss.DiscoveryURL == "") {
		return nil, ErrIssuerNotPublished
	}

	cfg := Build(s, iss)
	if err := Validate(cfg); err != nil {
		return nil, fmt.Errorf("spec.authentication: %w", err)
	}

	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}

	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}

	delete(out, "apiVersion")
	delete(out, "kind")

	return out, nil
}

// The CLI as a client of ichor-ui's issuer (`ichor auth token`, a client-go
// exec plugin): a native application with PKCE and a loopback redirect on
// any port (RFC 8252 §7.3). Its client ID is the audience of the ID tokens
// it hands the kube-apiserver.
const (
	CLIClientID     = "ichor-cli"
	CLICallbackPath = "/callback"
	// CLICodePath is the issuer's page that shows the code of a sign-in made
	// on another device (`ichor auth token --headless`): the CLI names
	// <issuer>/oidc/code as its redirect URI and the person types the code.
	CLICodePath = "/oidc/code"
)
