package issuer

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

// login checks the form's user name and password and redirects with a code.
func (i *Issuer) login(w http.ResponseWriter, r *http.Request) {
	if i.opts.Users == nil {
		pageError(w, "sign-in with a password is off here; use the provider's button")
		return
	}
	form, p, ok := i.pendingForm(w, r)
	if !ok {
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("username"))
	userKey, addrKey := "user:"+strings.ToLower(name), "addr:"+clientAddress(r)
	now := i.now()
	if wait := max(i.limits.wait(userKey, now), i.limits.wait(addrKey, now)); wait > 0 {
		i.opts.Log.Info("sign-in refused", "reason", "rate limit")
		i.signIn(MethodPassword, OutcomeRateLimited)
		retryAfter(w, wait)
		i.renderLogin(w, r, http.StatusTooManyRequests, form, name,
			fmt.Sprintf("too many failed sign-ins for this user name or from your address; try again in %d seconds", int(wait.Round(time.Second)/time.Second)+1))
		return
	}
	id, fp, err := i.opts.Users.Authenticate(r.Context(), name, r.PostForm.Get("password"))
	switch {
	case errors.Is(err, users.ErrBusy):
		i.opts.Log.Info("sign-in refused", "reason", "password-hash slots busy")
		i.signIn(MethodPassword, OutcomeBusy)
		retryAfter(w, time.Second)
		i.renderLogin(w, r, http.StatusTooManyRequests, form, name, users.ErrBusy.Error())
		return
	case errors.Is(err, users.ErrBadCredentials):
		i.opts.Log.Info("sign-in refused", "reason", "bad credentials")
		i.signIn(MethodPassword, OutcomeBadCredentials)
		i.limits.fail(userKey, i.opts.Limits.FreePerUser, i.opts.Limits, now)
		i.limits.fail(addrKey, i.opts.Limits.FreePerAddress, i.opts.Limits, now)
		next := i.failed(p)
		if next == "" {
			i.renderLogin(w, r, http.StatusUnauthorized, "", "", users.ErrBadCredentials.Error()+"; too many attempts, start the sign-in again from the application")
			return
		}
		i.renderLogin(w, r, http.StatusUnauthorized, next, name, users.ErrBadCredentials.Error())
		return
	case errors.Is(err, users.ErrDisabled):
		i.opts.Log.Info("sign-in refused", "user", identity.IchorPrefix+name, "reason", "disabled")
		i.signIn(MethodPassword, OutcomeDisabled)
		i.renderLogin(w, r, http.StatusForbidden, form, name, users.ErrDisabled.Error())
		return
	case err != nil:
		i.opts.Log.Error("sign-in failed", "error", err.Error())
		i.signIn(MethodPassword, OutcomeError)
		i.renderLogin(w, r, http.StatusServiceUnavailable, form, name, "the sign-in could not be checked now; try again")
		return
	}
	if err := i.opts.Tokens.Policy.Check(id); err != nil {
		i.signIn(MethodPassword, OutcomeRefused)
		i.renderLogin(w, r, http.StatusForbidden, form, name, "this user's groups may not be used by ichor-ui: "+err.Error())
		return
	}
	i.limits.reset(userKey)
	i.signIn(MethodPassword, OutcomeSuccess)
	i.complete(w, r, p, id, fp)
}
