package issuer

import "github.com/prometheus/client_golang/prometheus"

// Sign-in methods and outcomes, the labels of ichor_ui_sign_ins_total.
const (
	MethodPassword = "password"
	MethodOIDC     = "oidc"

	// OutcomeSuccess: the user is signed in.
	OutcomeSuccess = "success"
	// OutcomeBadCredentials: a wrong user name or password.
	OutcomeBadCredentials = "bad_credentials"
	// OutcomeRateLimited: too many failures for the user name or the address.
	OutcomeRateLimited = "rate_limited"
	// OutcomeBusy: every password-hash slot was busy.
	OutcomeBusy = "busy"
	// OutcomeDisabled: the user is disabled.
	OutcomeDisabled = "disabled"
	// OutcomeRefused: the provider said no, the answer came to another
	// browser or an expired sign-in, or the user's groups may not be used.
	OutcomeRefused = "refused"
	// OutcomeError: the sign-in could not be checked (the API, the provider).
	OutcomeError = "error"
)

var signInOutcomes = map[string][]string{
	MethodPassword: {OutcomeSuccess, OutcomeBadCredentials, OutcomeRateLimited, OutcomeBusy, OutcomeDisabled, OutcomeRefused, OutcomeError},
	MethodOIDC:     {OutcomeSuccess, OutcomeRefused, OutcomeError},
}

func newSignIns(reg prometheus.Registerer, external, users bool) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ichor_ui_sign_ins_total",
		Help: "Sign-ins at ichor-ui's issuer, by method (password: Ichor's own users; oidc: the external provider) and outcome.",
	}, []string{"method", "outcome"})
	// The series of the methods that are on start at zero.
	for method, outcomes := range signInOutcomes {
		if (method == MethodPassword && !users) || (method == MethodOIDC && !external) {
			continue
		}
		for _, o := range outcomes {
			c.WithLabelValues(method, o)
		}
	}
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

func (i *Issuer) signIn(method, outcome string) {
	i.signIns.WithLabelValues(method, outcome).Inc()
}
