package issuer

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

type session struct {
	id identity.Identity
	// fingerprint is the user's password hash fingerprint at sign-in (Ichor's
	// users only): another one ends the session.
	fingerprint string
	// ended says why the session was revoked, when not by its user
	// (CheckSessions, a reused authorization code).
	ended    string
	client   string
	scopes   []string
	authTime time.Time
	expires  time.Time
	revoked  bool
	refresh  [][32]byte
}

// SessionRevoked reports whether the sign-in session sid was revoked or
// ended (auth.Tokens.Revoked). An unknown session counts as revoked.
func (i *Issuer) SessionRevoked(sid string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	s, ok := i.sessions[sid]
	return !ok || s.revoked || i.now().After(s.expires)
}

// WatchSessions runs CheckSessions every SessionCheckInterval until ctx ends.
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
	now := i.now()
	i.mu.Lock()
	var names []string
	for _, s := range i.sessions {
		if name, ok := strings.CutPrefix(s.id.Username, identity.IchorPrefix); ok && !s.revoked && !now.After(s.expires) {
			names = append(names, name)
		}
	}
	i.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	fps, err := i.opts.Users.Fingerprints(ctx, slices.Compact(names))
	if err != nil {
		return err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, s := range i.sessions {
		name, ok := strings.CutPrefix(s.id.Username, identity.IchorPrefix)
		if !ok || s.revoked {
			continue
		}
		if fp, checked := fps[name]; checked && fp != s.fingerprint {
			s.revoked = true
			s.ended = "the password was changed since this sign-in"
			if fp == "" {
				s.ended = "this user may not sign in: the IchorUser is disabled or was deleted"
			}
			i.opts.Log.Info("session revoked", "user", s.id.Username, "reason", s.ended)
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
	var sid string
	i.mu.Lock()
	if rt, ok := i.refresh[hash(tok)]; ok && rt.client == c.ID {
		sid = rt.sid
	}
	i.mu.Unlock()
	if sid == "" {
		if claims, err := i.opts.Tokens.Verify(tok); err == nil && claims.Session != "" {
			i.mu.Lock()
			if s, ok := i.sessions[claims.Session]; ok && s.client == c.ID {
				sid = claims.Session
			}
			i.mu.Unlock()
		}
	}
	if sid != "" {
		i.revokeSession(sid)
		i.opts.Log.Info("session revoked", "reason", "revocation endpoint")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

func (i *Issuer) revokeSession(sid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if s, ok := i.sessions[sid]; ok {
		s.revoked = true
	}
}
