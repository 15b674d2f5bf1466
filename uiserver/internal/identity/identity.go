// Package identity is the signed-in user as ichor-ui impersonates them, and
// the rule for whom it may impersonate: only Ichor's own users (ichor:<name>)
// and users of the external provider (oidc:<name>), with the groups it is
// given by name, never a system: group (architecture, "Trust").
//
// The external provider's groups arrive prefixed (oidc:<group> by default,
// package external), so it can never name a built-in ichor: group itself.
// Allowed keeps only the built-in groups and those the deployment names
// (--impersonate-group, e.g. oidc:platform-admins, which the chart binds to
// a role); every other group of the provider is dropped, not impersonated.
package identity

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// User name prefixes ichor-ui may impersonate.
const (
	// IchorPrefix names Ichor's own users.
	IchorPrefix = "ichor:"
	// OIDCPrefix names the users of the external OIDC provider.
	OIDCPrefix = "oidc:"
)

// BuiltinGroups are the groups of Ichor's built-in roles.
var BuiltinGroups = []string{"ichor:viewer", "ichor:operator", "ichor:admin"}

// Identity is a signed-in user.
type Identity struct {
	// Username is the Kubernetes user name, ichor:<name> or oidc:<name>.
	Username string
	// Groups are the Kubernetes groups impersonated with the user.
	Groups []string
}

// Policy says which users and groups may be impersonated.
type Policy struct {
	// ExtraGroups are groups beyond BuiltinGroups that may be impersonated
	// (the chart's values name them).
	ExtraGroups []string
}

// ErrNotAllowed is wrapped by the errors of Check.
var ErrNotAllowed = errors.New("identity not allowed")

// Check returns an error when id may not be impersonated.
func (p Policy) Check(id Identity) error {
	name, ok := strings.CutPrefix(id.Username, IchorPrefix)
	if !ok {
		name, ok = strings.CutPrefix(id.Username, OIDCPrefix)
	}
	if !ok || name == "" || strings.ContainsAny(name, ":\n\r") {
		return fmt.Errorf("%w: user %q: ichor-ui impersonates only ichor:<name> and oidc:<name> users", ErrNotAllowed, id.Username)
	}
	for _, g := range id.Groups {
		if strings.HasPrefix(g, "system:") {
			return fmt.Errorf("%w: group %q: ichor-ui never impersonates a system: group", ErrNotAllowed, g)
		}
		if !slices.Contains(BuiltinGroups, g) && !slices.Contains(p.ExtraGroups, g) {
			return fmt.Errorf("%w: group %q is neither a built-in ichor: group nor one the deployment names", ErrNotAllowed, g)
		}
	}
	return nil
}

// Allowed filters groups to those p allows, dropping the rest; a token from
// the external provider may carry groups Kubernetes does not need from us.
func (p Policy) Allowed(groups []string) []string {
	out := make([]string, 0, len(groups))
	for _, g := range groups {
		if strings.HasPrefix(g, "system:") {
			continue
		}
		if slices.Contains(BuiltinGroups, g) || slices.Contains(p.ExtraGroups, g) {
			out = append(out, g)
		}
	}
	return out
}

type ctxKey struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the identity ctx carries.
func From(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}
