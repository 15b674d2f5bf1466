package issuer

import (
	"context"
	"log/slog"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/settings"
)

// SettingsLifetimes is Options.Lifetimes from Ichor's settings (the
// IchorInstallation's idTokenLifetime and refreshTokenLifetime), read
// through r at every token and session; a failed read keeps the defaults
// and is logged.
func SettingsLifetimes(r client.Reader, log *slog.Logger) func() (access, session time.Duration) {
	return func() (time.Duration, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		eff, err := settings.Read(ctx, r)
		if err != nil && log != nil {
			log.Warn("reading Ichor's settings; the default sign-in lifetimes apply", "error", err.Error())
		}

		return eff.IDTokenLifetime, eff.RefreshTokenLifetime
	}
}
