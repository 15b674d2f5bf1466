package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/maeshinshin/ichor/uiserver/internal/external"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	oidcissuer "github.com/maeshinshin/ichor/uiserver/internal/issuer"
)

// The external OIDC provider's flags (chart values ichorUI.oidc.*). They are
// registered here, before flag.Parse, to keep run's flag list short.
var (
	oidcIssuerURL     = flag.String("oidc-issuer-url", "", "Issuer URL (https) of an external OIDC provider whose users sign in as oidc:<name> (ichorUI.oidc.issuerURL). Empty turns it off.")
	oidcClientID      = flag.String("oidc-client-id", "", "ichor-ui's client ID at the external provider; its redirect URI is <issuer>"+oidcissuer.ExternalCallbackPath+".")
	oidcSecretFile    = flag.String("oidc-client-secret-file", "", "File holding the client's secret. Empty makes a public client (PKCE only).")
	oidcUsernameClaim = flag.String("oidc-username-claim", external.DefaultUsernameClaim, "ID token claim that names the user (as the kube-apiserver's --oidc-username-claim).")
	oidcGroupsClaim   = flag.String("oidc-groups-claim", external.DefaultGroupsClaim, "ID token claim that holds the user's groups.")
	oidcGroupsPrefix  = flag.String("oidc-groups-prefix", external.DefaultGroupsPrefix, "Prefix put before every provider group; only the prefixed groups named by --impersonate-group are kept.")
	oidcCAFile        = flag.String("oidc-ca-file", "", "PEM CA certificates to trust for the provider beside the system's (a private provider).")
)

// externalProvider returns the external provider the flags configure, or
// nil. It does not wait for the provider: ichor-ui starts while it is down,
// and the login page says so.
func externalProvider(issuerURL string, policy identity.Policy, log *slog.Logger) (*external.Provider, error) {
	if *oidcIssuerURL == "" {
		if *oidcClientID != "" || *oidcSecretFile != "" {
			return nil, errors.New("--oidc-client-id and --oidc-client-secret-file need --oidc-issuer-url")
		}
		return nil, nil
	}
	var secret string
	if *oidcSecretFile != "" {
		b, err := os.ReadFile(*oidcSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		if secret = strings.TrimSpace(string(b)); secret == "" {
			return nil, fmt.Errorf("--oidc-client-secret-file %s is empty: put the client's secret in it, or leave the flag out for a public client", *oidcSecretFile)
		}
	}
	hc, err := external.HTTPClient(*oidcCAFile)
	if err != nil {
		return nil, err
	}
	p, err := external.New(external.Config{
		IssuerURL: *oidcIssuerURL, ClientID: *oidcClientID, ClientSecret: secret,
		RedirectURL:   strings.TrimSuffix(issuerURL, "/") + oidcissuer.ExternalCallbackPath,
		UsernameClaim: *oidcUsernameClaim, GroupsClaim: *oidcGroupsClaim, GroupsPrefix: *oidcGroupsPrefix,
		Policy: policy, HTTPClient: hc, Log: log,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// probeLoop asks the provider once whether it is reachable, which logs the
// answer; nil without a provider.
func probeLoop(p *external.Provider) func(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return func(ctx context.Context) error { _ = p.Ready(ctx); return nil }
}
