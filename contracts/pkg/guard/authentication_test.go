package guard

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func withExternal(e ichorv1alpha1.ExternalOIDC) func(*ichorv1alpha1.TalosCluster) {
	return func(c *ichorv1alpha1.TalosCluster) { c.Spec.Authentication.External = &e }
}

// TestCheckAuthentication: spec.authentication is refused at admission when
// the render could not carry it (a contract before v1.14) or the
// kube-apiserver would refuse it, with the field and a way out; a valid one,
// and none, pass.
func TestCheckAuthentication(t *testing.T) {
	good := ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}}

	expect(t, ValidateCluster(nil, cluster(withExternal(good)), ClusterFacts{}), nil)
	expect(t, ValidateCluster(nil, cluster(), ClusterFacts{}), nil)

	old := cluster(withExternal(good), func(c *ichorv1alpha1.TalosCluster) { c.Spec.VersionContract = "v1.12" })
	expect(t, ValidateCluster(nil, old, ClusterFacts{}), map[string][]string{"spec.authentication": {"KubeAuthenticationConfig", "v1.14 or later"}})

	bad := good
	bad.CertificateAuthority = "not PEM"
	expect(t, ValidateCluster(cluster(), cluster(withExternal(bad)), ClusterFacts{}),
		map[string][]string{"spec.authentication.external": {"jwt[0].issuer.certificateAuthority", "certificateAuthority is certificateAuthority"}})

	// Only a change is checked: an unrelated edit of a cluster is not held
	// up by a stricter rule of a later release.
	expect(t, ValidateCluster(cluster(withExternal(bad)), cluster(withExternal(bad), func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }), ClusterFacts{}), nil)
}

// TestAuthenticationRequirement: setting or changing spec.authentication
// needs `update` on `talosclusters/authentication` (ichor-admin only);
// leaving it as it is needs nothing.
func TestAuthenticationRequirement(t *testing.T) {
	e := withExternal(ichorv1alpha1.ExternalOIDC{IssuerURL: "https://login.example.com", Audiences: []string{"kubernetes"}})

	for name, tc := range map[string]struct {
		old, c *ichorv1alpha1.TalosCluster
		want   bool
	}{
		"created with it": {nil, cluster(e), true},
		"set":             {cluster(), cluster(e), true},
		"removed":         {cluster(e), cluster(), true},
		"kept":            {cluster(e), cluster(e, func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }), false},
	} {
		got := false

		for _, f := range fields(ClusterRequirements(tc.old, tc.c)) {
			if strings.HasPrefix(f, "spec.authentication=`update` on `talosclusters/authentication`") {
				got = true
			}
		}

		if got != tc.want {
			t.Errorf("%s: requirement %v, want %v: %v", name, got, tc.want, fields(ClusterRequirements(tc.old, tc.c)))
		}
	}
}

// TestIchorUsersNeedIchorsUsersOn: spec.authentication.ichorUsers is
// refused while no ichor-ui URL is recorded (no issuer to trust), and
// allowed once one is.
func TestIchorUsersNeedIchorsUsersOn(t *testing.T) {
	on := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.Authentication.IchorUsers = true })

	expect(t, ValidateCluster(cluster(), on, ClusterFacts{}), map[string][]string{"spec.authentication.ichorUsers": {"Ichor's users are off", "ichor init --ui-url"}})
	expect(t, ValidateCluster(cluster(), on, ClusterFacts{UIURL: "https://ichor.example.com"}), nil)
}
