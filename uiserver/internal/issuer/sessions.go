package issuer

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// SessionRevoked reports whether the sign-in session sid was revoked,
// ended or deleted (auth.Tokens.Revoked), as this replica's watch of the
// sessions knows it: a revocation made on another replica counts once the
// watch brings it. A session the watched copy shows before its code's
// exchange is read again directly (the exchange may be a moment old, made
// here or on another replica). An unknown session, or one that cannot be
// read, counts as revoked.
func (i *Issuer) SessionRevoked(sid string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := i.store.Peek(ctx, sid)
	if err == nil && !r.Revoked && (!r.Code.Used || r.RefreshHash == "") {
		r, err = i.store.Get(ctx, sid)
	}
	if err != nil {
		if !errors.Is(err, ErrNoSession) {
			i.opts.Log.Warn("reading a sign-in session; its token is refused", "error", err.Error())
		}
		return true
	}
	return !r.live(i.now())
}

// WatchSessions runs CheckSessions and Sweep every SessionCheckInterval until ctx ends.
func (i *Issuer) WatchSessions(ctx context.Context) {
	t := time.NewTicker(i.opts.SessionCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := i.CheckSessions(ctx); err != nil && ctx.Err() == nil {
				i.opts.Log.Error("checking sign-in sessions", "error", err.Error())
			}
			if err := i.Sweep(ctx); err != nil && ctx.Err() == nil {
				i.opts.Log.Error("deleting ended sign-in sessions", "error", err.Error())
			}
		}
	}
}

// CheckSessions revokes every live session of Ichor's users whose user was
// disabled or deleted or whose password changed since the sign-in: its
// access tokens are refused from then on (Tokens.Revoked) and its refresh
// token too. A read error revokes nothing.
func (i *Issuer) CheckSessions(ctx context.Context) error {
	if i.opts.Users == nil {
		return nil
	}
	recs, err := i.store.List(ctx)
	if err != nil {
		return err
	}
	now := i.now()
	var names []string
	for _, r := range recs {
		if name, ok := strings.CutPrefix(r.ID.Username, identity.IchorPrefix); ok && r.live(now) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	fps, err := i.opts.Users.Fingerprints(ctx, slices.Compact(names))
	if err != nil {
		return err
	}
	for _, r := range recs {
		name, ok := strings.CutPrefix(r.ID.Username, identity.IchorPrefix)
		if !ok || !r.live(now) {
			continue
		}
		if fp, checked := fps[name]; checked && fp != r.Fingerprint {
			why := "the password was changed since this sign-in"
			if fp == "" {
				why = "this user may not sign in: the IchorUser is disabled or was deleted"
			}
			if err := i.revokeSession(ctx, r.SID, why); err != nil {
				return err
			}
			i.opts.Log.Info("session revoked", "user", r.ID.Username, "reason", why)
		}
	}
	return nil
}

// revoke is RFC 7009 token revocation. A refresh token or an access token
// ends its whole sign-in session. Unknown tokens are answered 200 (§2.2).
func (i *Issuer) revoke(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		tokenError(w, oidc.ErrInvalidRequest().WithDescription("the request body is not a form"))
		return
	}
	c, ok := i.client(r.PostForm.Get("client_id"))
	if !ok {
		tokenError(w, oidc.ErrInvalidClient().WithDescription("unknown client_id"))
		return
	}
	tok := r.PostForm.Get("token")
	if tok == "" {
		tokenError(w, oidc.ErrInvalidRequest().WithDescription("the token parameter is missing"))
		return
	}
	// A refresh token (current or used) or an access token of a session of this client.
	var sid string
	if id, h, ok := tokenSession(tok); ok {
		if rec, err := i.store.Get(r.Context(), id); err == nil && rec.Client == c.ID && (rec.RefreshHash == h || slices.Contains(rec.UsedRefresh, h)) {
			sid = id
		}
	} else if claims, err := i.opts.Tokens.Verify(tok); err == nil && claims.Session != "" {
		if rec, err := i.store.Get(r.Context(), claims.Session); err == nil && rec.Client == c.ID {
			sid = claims.Session
		}
	}
	if sid != "" {
		if err := i.revokeSession(r.Context(), sid, ""); err != nil {
			i.opts.Log.Error("revoking a session", "error", err.Error())
			tokenError(w, oidc.ErrServerError().WithDescription("the session could not be revoked now; try again"))
			return
		}
		i.opts.Log.Info("session revoked", "reason", "revocation endpoint")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// revokeSession ends session sid on every replica; why, when not empty,
// tells its user why at the next refresh. A session that is gone is no error.
func (i *Issuer) revokeSession(ctx context.Context, sid, why string) error {
	_, err := i.update(ctx, sid, func(r *Record) error {
		if r.Revoked {
			return errNoChange
		}
		r.Revoked, r.Ended = true, why
		return nil
	})
	if errors.Is(err, ErrNoSession) {
		return nil
	}
	return err
}
