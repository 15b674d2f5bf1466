// Package settings reads Ichor's runtime settings (the IchorInstallation's
// spec.settings) with their defaults, as the controller, the webhooks and
// ichor-ui apply them. Each reader asks for the settings when it needs them
// (a token minted, a drift found), never once at start, so a change made
// with `ichor settings set` or the console's Settings page takes effect
// without a restart.
package settings

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The settings' names, as Change.Clear and the messages name them.
const (
	NameIDTokenLifetime      = "id_token_lifetime"
	NameRefreshTokenLifetime = "refresh_token_lifetime"
	NameDefaultDriftPolicy   = "default_drift_policy"
)

// Defaults of the settings (the IchorSettings type's documentation).
const (
	DefaultIDTokenLifetime      = 5 * time.Minute
	DefaultRefreshTokenLifetime = 12 * time.Hour
	DefaultDriftPolicy          = ichorv1alpha1.DriftPolicyWarn
)

// Bounds of the settings: what ichor-ui's UpdateSettings, `ichor settings
// set` and the admission webhook accept.
const (
	MinIDTokenLifetime      = time.Minute
	MaxIDTokenLifetime      = time.Hour
	MinRefreshTokenLifetime = 10 * time.Minute
	MaxRefreshTokenLifetime = 7 * 24 * time.Hour
)

// Effective are the settings in force: every field holds a value.
type Effective struct {
	IDTokenLifetime      time.Duration
	RefreshTokenLifetime time.Duration
	DefaultDriftPolicy   string
}

// Of fills the settings' empty fields with the defaults; s may be nil.
func Of(s *ichorv1alpha1.IchorSettings) Effective {
	e := Effective{IDTokenLifetime: DefaultIDTokenLifetime, RefreshTokenLifetime: DefaultRefreshTokenLifetime, DefaultDriftPolicy: DefaultDriftPolicy}
	if s == nil {
		return e
	}

	if s.IDTokenLifetime != nil && s.IDTokenLifetime.Duration > 0 {
		e.IDTokenLifetime = s.IDTokenLifetime.Duration
	}

	if s.RefreshTokenLifetime != nil && s.RefreshTokenLifetime.Duration > 0 {
		e.RefreshTokenLifetime = s.RefreshTokenLifetime.Duration
	}

	if s.DefaultDriftPolicy != "" {
		e.DefaultDriftPolicy = s.DefaultDriftPolicy
	}

	return e
}

// Read returns the settings in force: the installation's, or the defaults
// when there is no IchorInstallation (a test, or Ichor installed without
// one). Any other read error is returned with the defaults.
func Read(ctx context.Context, r client.Reader) (Effective, error) {
	inst := &ichorv1alpha1.IchorInstallation{}

	err := r.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst)
	switch {
	case apierrors.IsNotFound(err):
		return Of(nil), nil
	case err != nil:
		return Of(nil), fmt.Errorf("reading IchorInstallation %s for Ichor's settings: %w", ichorv1alpha1.IchorInstallationName, err)
	}

	return Of(&inst.Spec.Settings), nil
}

// DriftPolicy is a cluster's drift policy: its own, else the installation's default.
func (e Effective) DriftPolicy(c *ichorv1alpha1.TalosCluster) string {
	if c != nil && c.Spec.Drift.Policy != "" {
		return c.Spec.Drift.Policy
	}

	return e.DefaultDriftPolicy
}

// Change is a change of the settings as ichor-ui's UpdateSettings and
// `ichor settings set` take it: a value to set (empty leaves it) and the
// names of the settings to reset to their defaults.
type Change struct {
	IDTokenLifetime, RefreshTokenLifetime, DefaultDriftPolicy string
	// Clear names settings to reset: id_token_lifetime, refresh_token_lifetime, default_drift_policy.
	Clear []string
}

// Check checks the whole change and returns what it does to the settings,
// or an error naming every wrong field (nothing is changed then).
func (c Change) Check() (func(*ichorv1alpha1.IchorSettings), error) {
	var problems []string
	reset := map[string]bool{}
	for _, name := range c.Clear {
		switch name {
		case NameIDTokenLifetime, NameRefreshTokenLifetime, NameDefaultDriftPolicy:
			reset[name] = true
		default:
			problems = append(problems, fmt.Sprintf("clear names %q, which is no setting: use %s, %s or %s",
				name, NameIDTokenLifetime, NameRefreshTokenLifetime, NameDefaultDriftPolicy))
		}
	}
	set := map[string]string{
		NameIDTokenLifetime:      c.IDTokenLifetime,
		NameRefreshTokenLifetime: c.RefreshTokenLifetime,
		NameDefaultDriftPolicy:   c.DefaultDriftPolicy,
	}
	for _, name := range []string{NameIDTokenLifetime, NameRefreshTokenLifetime, NameDefaultDriftPolicy} {
		if set[name] != "" && reset[name] {
			problems = append(problems, fmt.Sprintf("%s is both set and named in clear: do one or the other", name))
		}
	}
	idTTL, msg := lifetime(NameIDTokenLifetime, c.IDTokenLifetime, MinIDTokenLifetime, MaxIDTokenLifetime)
	if msg != "" {
		problems = append(problems, msg)
	}
	refreshTTL, msg := lifetime(NameRefreshTokenLifetime, c.RefreshTokenLifetime, MinRefreshTokenLifetime, MaxRefreshTokenLifetime)
	if msg != "" {
		problems = append(problems, msg)
	}
	policy := c.DefaultDriftPolicy
	switch policy {
	case "", ichorv1alpha1.DriftPolicyWarn, ichorv1alpha1.DriftPolicyAutoCorrect:
	default:
		problems = append(problems, fmt.Sprintf("%s %q: use %s or %s", NameDefaultDriftPolicy, policy,
			ichorv1alpha1.DriftPolicyWarn, ichorv1alpha1.DriftPolicyAutoCorrect))
	}
	if len(problems) == 0 && len(reset) == 0 && idTTL == nil && refreshTTL == nil && policy == "" {
		problems = append(problems, fmt.Sprintf("nothing to change: set %s, %s or %s, or name settings to reset in clear",
			NameIDTokenLifetime, NameRefreshTokenLifetime, NameDefaultDriftPolicy))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("the settings were not changed: %s", strings.Join(problems, "; "))
	}
	return func(st *ichorv1alpha1.IchorSettings) {
		switch {
		case reset[NameIDTokenLifetime]:
			st.IDTokenLifetime = nil
		case idTTL != nil:
			st.IDTokenLifetime = idTTL
		}
		switch {
		case reset[NameRefreshTokenLifetime]:
			st.RefreshTokenLifetime = nil
		case refreshTTL != nil:
			st.RefreshTokenLifetime = refreshTTL
		}
		switch {
		case reset[NameDefaultDriftPolicy]:
			st.DefaultDriftPolicy = ""
		case policy != "":
			st.DefaultDriftPolicy = policy
		}
	}, nil
}

// lifetime parses a Go duration between low and high; msg says what is wrong.
func lifetime(field, value string, low, high time.Duration) (d *metav1.Duration, msg string) {
	if value == "" {
		return nil, ""
	}
	v, err := time.ParseDuration(value)
	if err != nil {
		return nil, fmt.Sprintf("%s %q is not a duration: write it as Go does, for example 15m or 2h30m", field, value)
	}
	if v < low || v > high {
		return nil, fmt.Sprintf("%s %s is out of range: choose between %s and %s", field, Short(v), Short(low), Short(high))
	}
	return &metav1.Duration{Duration: v}, ""
}

// Equal reports whether two settings hold the same values.
func Equal(a, b *ichorv1alpha1.IchorSettings) bool {
	eq := func(x, y *metav1.Duration) bool {
		return (x == nil) == (y == nil) && (x == nil || x.Duration == y.Duration)
	}
	return eq(a.IDTokenLifetime, b.IDTokenLifetime) && eq(a.RefreshTokenLifetime, b.RefreshTokenLifetime) &&
		a.DefaultDriftPolicy == b.DefaultDriftPolicy
}

// Short writes d without trailing zero units: 5m, 12h, 1h30m.
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
