package issuer

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

// maxUsedRefresh bounds the used refresh tokens a session remembers (the
// IchorUISession's list); an older one presented again is refused as
// unknown rather than revoking the session.
const maxUsedRefresh = 1000

// errSessionEnded: the session was signed out, revoked or expired.
var errSessionEnded = errors.New("session ended")

// refreshGrant rotates a refresh token: the one presented becomes used and a
// new one is issued. A used one presented again means someone else holds a
// copy: the whole session is revoked. The session is read as stored now and
// written with a compare-and-swap, so the same token presented at two
// replicas at once is one use and one reuse.
func (i *Issuer) refreshGrant(w http.ResponseWriter, ctx context.Context, c *Client, f url.Values) {
	sid, h, ok := tokenSession(f.Get("refresh_token"))
	if !ok {
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token is unknown or expired: sign in again"))
		return
	}
	rec, err := i.store.Get(ctx, sid)
	switch {
	case errors.Is(err, ErrNoSession):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token is unknown or expired: sign in again"))
		return
	case err != nil:
		i.opts.Log.Error("reading a sign-in session", "error", err.Error())
		tokenError(w, oidc.ErrServerError().WithDescription("the sign-in session could not be read now; try again"))
		return
	case rec.RefreshHash != h && !slices.Contains(rec.UsedRefresh, h):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token is unknown or expired: sign in again"))
		return
	case rec.Client != c.ID:
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token was issued to another client"))
		return
	case rec.RefreshHash != h:
		i.refreshReused(w, ctx, rec)
		return
	case !rec.live(i.now()):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s: sign in again", endedWhy(rec)))
		return
	}

	id := rec.ID
	if name, ichorUser := strings.CutPrefix(rec.ID.Username, identity.IchorPrefix); ichorUser && i.opts.Users != nil {
		// Roles and the disabled flag are read again at each refresh; a user
		// the issuer cannot read now keeps the token (not the client's fault).
		if id, err = i.opts.Users.Lookup(ctx, name); err != nil {
			if errors.Is(err, users.ErrDisabled) {
				_ = i.revokeSession(ctx, sid, err.Error())
				tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s", err.Error()))
				return
			}
			tokenError(w, oidc.ErrServerError().WithDescription("the user could not be read now; try again"))
			return
		}
		// A new password ends the session, as WatchSessions does.
		fps, err := i.opts.Users.Fingerprints(ctx, []string{name})
		if err != nil {
			tokenError(w, oidc.ErrServerError().WithDescription("the user could not be read now; try again"))
			return
		}
		if fps[name] != rec.Fingerprint {
			_ = i.revokeSession(ctx, sid, "the password was changed since this sign-in")
			i.opts.Log.Info("session revoked", "user", rec.ID.Username, "reason", "password changed")
			tokenError(w, oidc.ErrInvalidGrant().WithDescription("the password was changed since this sign-in: sign in again"))
			return
		}
	}
	// A user of the external provider keeps the identity of its sign-in
	// (Mint checks it against the policy again).

	refresh := sessionToken(sid)
	now := i.now()
	var reused bool
	rec, err = i.update(ctx, sid, func(r *Record) error {
		reused = false
		switch {
		case r.RefreshHash != h && slices.Contains(r.UsedRefresh, h):
			reused = true // used meanwhile, here or on another replica
			if r.Revoked {
				return errNoChange
			}
			r.Revoked, r.Ended = true, "a refresh token of this sign-in was used twice"
			return nil
		case r.RefreshHash != h:
			return errUnknownToken
		case !r.live(now):
			return errSessionEnded
		}
		r.UsedRefresh = append(r.UsedRefresh, h)
		if n := len(r.UsedRefresh); n > maxUsedRefresh {
			r.UsedRefresh = r.UsedRefresh[n-maxUsedRefresh:]
		}
		r.RefreshHash, r.ID = tokenHash(refresh), id
		return nil
	})
	switch {
	case errors.Is(err, ErrNoSession) || errors.Is(err, errUnknownToken):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token is unknown or expired: sign in again"))
	case errors.Is(err, errSessionEnded):
		tokenError(w, oidc.ErrInvalidGrant().WithDescription("%s: sign in again", endedWhy(rec)))
	case err != nil:
		i.opts.Log.Error("rotating a refresh token", "error", err.Error())
		tokenError(w, oidc.ErrServerError().WithDescription("the sign-in session could not be written now; try again"))
	case reused:
		i.refreshReused(w, ctx, rec)
	default:
		i.issue(w, ctx, rec, refresh, "")
	}
}

// refreshReused ends the session of a refresh token presented twice.
func (i *Issuer) refreshReused(w http.ResponseWriter, ctx context.Context, rec *Record) {
	_ = i.revokeSession(ctx, rec.SID, "a refresh token of this sign-in was used twice")
	i.opts.Log.Warn("refresh token reused: session revoked", "user", rec.ID.Username)
	tokenError(w, oidc.ErrInvalidGrant().WithDescription("the refresh token was already used: the session is revoked, sign in again"))
}

// endedWhy says why a session's tokens no longer count.
func endedWhy(r *Record) string {
	if r.Revoked && r.Ended != "" {
		return r.Ended
	}
	return "the session was signed out or expired"
}
