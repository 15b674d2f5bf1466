package settings

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func TestOfFillsTheDefaults(t *testing.T) {
	if e := Of(nil); e.IDTokenLifetime != 5*time.Minute || e.RefreshTokenLifetime != 12*time.Hour || e.DefaultDriftPolicy != ichorv1alpha1.DriftPolicyWarn {
		t.Fatalf("defaults: %+v", e)
	}

	e := Of(&ichorv1alpha1.IchorSettings{IDTokenLifetime: &metav1.Duration{Duration: 2 * time.Minute}, DefaultDriftPolicy: ichorv1alpha1.DriftPolicyAutoCorrect})
	if e.IDTokenLifetime != 2*time.Minute || e.RefreshTokenLifetime != 12*time.Hour || e.DefaultDriftPolicy != ichorv1alpha1.DriftPolicyAutoCorrect {
		t.Fatalf("set: %+v", e)
	}

	withPolicy := &ichorv1alpha1.TalosCluster{}
	withPolicy.Spec.Drift.Policy = ichorv1alpha1.DriftPolicyWarn

	if e.DriftPolicy(withPolicy) != ichorv1alpha1.DriftPolicyWarn || e.DriftPolicy(&ichorv1alpha1.TalosCluster{}) != ichorv1alpha1.DriftPolicyAutoCorrect {
		t.Fatal("a cluster's own policy must win over the default, and the default apply to the others")
	}
}

func TestChangeCheck(t *testing.T) {
	change, err := Change{IDTokenLifetime: "10m", Clear: []string{NameDefaultDriftPolicy}}.Check()
	if err != nil {
		t.Fatal(err)
	}

	st := ichorv1alpha1.IchorSettings{DefaultDriftPolicy: ichorv1alpha1.DriftPolicyAutoCorrect, RefreshTokenLifetime: &metav1.Duration{Duration: time.Hour}}
	change(&st)

	if st.IDTokenLifetime == nil || st.IDTokenLifetime.Duration != 10*time.Minute || st.DefaultDriftPolicy != "" || st.RefreshTokenLifetime.Duration != time.Hour {
		t.Fatalf("after the change: %+v", st)
	}

	for _, tc := range []struct {
		c    Change
		want []string
	}{
		{Change{}, []string{"nothing to change"}},
		{Change{IDTokenLifetime: "2h", RefreshTokenLifetime: "soon"}, []string{"id_token_lifetime 2h is out of range: choose between 1m and 1h", `refresh_token_lifetime "soon" is not a duration`}},
		{Change{DefaultDriftPolicy: "Fix"}, []string{`default_drift_policy "Fix": use Warn or AutoCorrect`}},
		{Change{IDTokenLifetime: "5m", Clear: []string{NameIDTokenLifetime, "colour"}}, []string{"both set and named in clear", `clear names "colour", which is no setting`}},
	} {
		_, err := tc.c.Check()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) || !strings.HasPrefix(err.Error(), "the settings were not changed") {
				t.Errorf("%+v: %v, want %q", tc.c, err, w)
			}
		}
	}
}
