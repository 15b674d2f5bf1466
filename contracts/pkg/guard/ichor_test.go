package guard

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func installation(manager, installed string) *ichorv1alpha1.IchorInstallation {
	ii := &ichorv1alpha1.IchorInstallation{}
	ii.Name = ichorv1alpha1.IchorInstallationName
	ii.Spec.Deployment.Manager = manager
	ii.Status.InstalledVersion = installed

	return ii
}

// Rule: the installer Job upgrades only an Ichor it installed, never down,
// one minor at a time; each refusal names what to do instead.
func TestCheckIchorUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ii     *ichorv1alpha1.IchorInstallation
		target string
		want   map[string][]string
	}{
		{"the next patch", installation(ichorv1alpha1.ManagerIchor, "v0.2.0"), "v0.2.3", nil},
		{"the next minor", installation("", "v0.2.5"), "v0.3.0", nil},
		{"a release candidate of the next minor", installation("", "v0.2.5"), "v0.3.0-rc.1", nil},
		{"the same release again", installation("", "v0.2.0"), "v0.2.0", nil},
		{"the next major", installation("", "v0.9.1"), "v1.0.0", nil},
		{"from a development build", installation("", "v0.0.0-dev"), "v0.5.0", nil},
		{"to a development build", installation("", "v0.4.0"), "v0.0.0-dev", nil},
		{"before the installer recorded a version", installation("", ""), "v0.5.0", nil},
		{"Helm manages Ichor", installation(ichorv1alpha1.ManagerHelm, "v0.2.0"), "v0.3.0",
			map[string][]string{fieldSpecType: {"installed with Helm", "spec.deployment.manager: helm", "`helm upgrade`", "v0.3.0"}}},
		{"no installation", nil, "v0.3.0", map[string][]string{fieldSpecType: {"no IchorInstallation", "`ichor init`"}}},
		{"a downgrade", installation("", "v0.3.1"), "v0.3.0",
			map[string][]string{fieldIchorVersion: {"v0.3.0 is older than the installed Ichor v0.3.1", "never downgrades", "choose v0.3.1 or a newer release"}}},
		{"a downgrade to a release candidate", installation("", "v0.3.0"), "v0.3.0-rc.2",
			map[string][]string{fieldIchorVersion: {"older than the installed Ichor v0.3.0"}}},
		{"two minors up", installation("", "v0.2.4"), "v0.4.0",
			map[string][]string{fieldIchorVersion: {"v0.4.0 skips a minor release from the installed Ichor v0.2.4", "one minor at a time", "v0.3.x first", "then to v0.4.0"}}},
		{"a major and a minor up", installation("", "v0.9.0"), "v1.1.0",
			map[string][]string{fieldIchorVersion: {"skips a minor release"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, CheckIchorUpgrade(tc.ii, tc.target), tc.want)
		})
	}
}

// Rule: a pinned installer digest is sha256:<64 lowercase hex digits> or
// absent, as the CRD says.
func TestCheckInstallerDigest(t *testing.T) {
	for _, tc := range []struct {
		digest string
		want   map[string][]string
	}{
		{"", nil},
		{"sha256:" + strings.Repeat("0a", 32), nil},
		{"sha256:abc", map[string][]string{fieldInstallerDigest: {`"sha256:abc" is not sha256:<64 lowercase hex digits>`, "release notes"}}},
		{"sha256:" + strings.Repeat("0A", 32), map[string][]string{fieldInstallerDigest: {"64 lowercase hex digits"}}},
		{strings.Repeat("0a", 32), map[string][]string{fieldInstallerDigest: {"64 lowercase hex digits"}}},
	} {
		t.Run(tc.digest, func(t *testing.T) {
			expect(t, CheckInstallerDigest(tc.digest), tc.want)
		})
	}
}
