package issuer

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

type refreshToken struct {
	sid, client string
	used        bool
}

func (i *Issuer) refreshGrant(w http.ResponseWriter, ctx context.Context, c *Client, f url.Values) {
	h := hash(f.Get("refresh_token"))
	i.mu.Lock()
	rt, ok := i.refresh[h]
	var s *session
	if ok {
		s = i.sessions[rt.sid]
	}
	switch {
	case !ok || s == nil:
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token is unknown or expired: sign in again"))
		return
	case rt.client != c.ID:
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token was issued to another client"))
		return
	case rt.used:
		// Reuse: someone else holds a copy. End the whole sign-in session.
		s.revoked = true
		i.mu.Unlock()
		i.opts.Log.Warn("refresh token reused: session revoked", "user", s.id.Username)
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token was already used: the session is revoked, sign in again"))
		return
	case s.revoked || i.now().After(s.expires):
		why := "the session was signed out or expired"
		if s.ended != "" {
			why = s.ended
		}
		i.mu.Unlock()
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s: sign in again", why))
		return
	}
	rt.used = true
	name, ichorUser := strings.CutPrefix(s.id.Username, identity.IchorPrefix)
	fingerprint := s.fingerprint
	i.mu.Unlock()
	if !ichorUser || i.opts.Users == nil {
		// A user of the external provider keeps the identity of its sign-in
		// (Mint checks it against the policy again).
		i.issue(w, rt.sid, "")
		return
	}

	// Roles and the disabled flag are read again at each refresh.
	id, err := i.opts.Users.Lookup(ctx, name)
	if err != nil {
		if errors.Is(err, users.ErrDisabled) {
			i.revokeSession(rt.sid)
			tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s", err.Error()))
			return
		}
		i.mu.Lock()
		rt.used = false // not the client's fault: let it retry with the same token
		i.mu.Unlock()
		tokenError(w, oidc.ErrServerError().WithDescription("the user could not be read now; try again"))
		return
	}
	// A new password ends the session, as WatchSessions does.
	fps, err := i.opts.Users.Fingerprints(ctx, []string{name})
	if err != nil {
		i.mu.Lock()
		rt.used = false
		i.mu.Unlock()
		tokenError(w, oidc.ErrServerError().WithDescription("the user could not be read now; try again"))
		return
	}
	if fps[name] != fingerprint {
		i.revokeSession(rt.sid)
		i.opts.Log.Info("session revoked", "user", s.id.Username, "reason", "password changed")
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the password was changed since this sign-in: sign in again"))
		return
	}
	i.mu.Lock()
	s.id = id
	i.mu.Unlock()
	i.issue(w, rt.sid, "")
}
