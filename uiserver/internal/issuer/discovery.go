package issuer

import (
	"net/http"
	"strings"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	iss := strings.TrimSuffix(i.opts.Tokens.Issuer, "/")
	writeJSON(w, http.StatusOK, &oidc.DiscoveryConfiguration{
		Issuer:                                 iss,
		AuthorizationEndpoint:                  iss + AuthorizePath,
		TokenEndpoint:                          iss + TokenPath,
		RevocationEndpoint:                     iss + RevokePath,
		JwksURI:                                iss + KeysPath,
		ScopesSupported:                        []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail, oidc.ScopeOfflineAccess, "groups"},
		ResponseTypesSupported:                 []string{string(oidc.ResponseTypeCode)},
		ResponseModesSupported:                 []string{"query"},
		GrantTypesSupported:                    []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken},
		SubjectTypesSupported:                  []string{"public"},
		IDTokenSigningAlgValuesSupported:       []string{string(jose.ES256)},
		TokenEndpointAuthMethodsSupported:      []oidc.AuthMethod{oidc.AuthMethodNone},
		RevocationEndpointAuthMethodsSupported: []oidc.AuthMethod{oidc.AuthMethodNone},
		CodeChallengeMethodsSupported:          []oidc.CodeChallengeMethod{oidc.CodeChallengeMethodS256},
		ClaimsSupported:                        []string{"iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "username", "groups", "sid"},
	})
}

func (i *Issuer) keys(w http.ResponseWriter, _ *http.Request) {
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{i.opts.Tokens.Key.Public()}}
	for _, k := range i.opts.Tokens.Previous {
		set.Keys = append(set.Keys, k.Public())
	}
	w.Header().Set("Cache-Control", "max-age=300")
	writeJSON(w, http.StatusOK, set)
}
