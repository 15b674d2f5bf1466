package guard

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/blang/semver/v4"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

// fieldIchorVersion is the target of an Ichor upgrade.
const fieldIchorVersion = "spec.ichor.version"

// SignatureSkip is spec.ichor.installerSignature's value that runs the
// installer image without checking its signature (recorded as a Warning Event).
const SignatureSkip = "skip"

// fieldInstallerDigest pins the installer image of an Ichor upgrade.
const fieldInstallerDigest = "spec.ichor.installerDigest"

// installerDigest is the form of spec.ichor.installerDigest (the CRD's pattern).
var installerDigest = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// CheckInstallerDigest refuses an installer digest that is not
// sha256:<64 lowercase hex digits>, the form the CRD accepts, before a create
// the API server would refuse; an empty digest (the tag's image) passes.
func CheckInstallerDigest(digest string) []Refusal {
	if digest == "" || installerDigest.MatchString(digest) {
		return nil
	}

	return []Refusal{{
		Field:  fieldInstallerDigest,
		Rule:   fmt.Sprintf("%q is not sha256:<64 lowercase hex digits>; nothing was created", digest),
		WayOut: "copy the digest the release notes give, or leave it out to run the image the version's tag names",
	}}
}

// CheckIchorUpgrade checks an Ichor upgrade to target against the
// IchorInstallation ii (nil when there is none): the installer Job upgrades
// only an Ichor it installed (spec.deployment.manager ichor, not helm), never
// to an older release than the one installed (status.installedVersion: CRDs
// are never downgraded), and one minor at a time (a release's installer
// migrates from the release before it). The webhook, the CLI and the
// operation's first step run it alike.
//
// A version that is a development build (v0.0.0-dev...) on either side, or an
// installation that has not recorded its version yet, is not compared: there
// is no release to be older or newer than.
func CheckIchorUpgrade(ii *ichorv1alpha1.IchorInstallation, target string) []Refusal {
	if ii == nil {
		return []Refusal{{
			Field: fieldSpecType,
			Rule: fmt.Sprintf("there is no IchorInstallation %q: this Ichor was not installed in this cluster by its installer "+
				"(a controller running elsewhere, or an install that never finished), so there is nothing for the installer Job to upgrade; nothing was created",
				ichorv1alpha1.IchorInstallationName),
			WayOut: "upgrade Ichor the way it was installed, or install it in the cluster with `ichor init`",
		}}
	}

	if ii.Spec.Deployment.Manager == ichorv1alpha1.ManagerHelm {
		return []Refusal{{
			Field: fieldSpecType,
			Rule: fmt.Sprintf("Ichor was installed with Helm (IchorInstallation %s has spec.deployment.manager: helm), so Helm owns its upgrades "+
				"and the installer Job would fight Helm's release; nothing was created", ii.Name),
			WayOut: fmt.Sprintf("run `helm upgrade` of Ichor's release with the chart of %s", target),
		}}
	}

	installed := ii.Status.InstalledVersion
	if installed == "" {
		return nil
	}

	to, terr := ichorRelease(target)
	from, ferr := ichorRelease(installed)

	if terr != nil {
		return []Refusal{{Field: fieldIchorVersion, Rule: terr.Error(), WayOut: "name a release such as v0.3.0"}}
	}

	if ferr != nil || development(target) || development(installed) {
		return nil
	}

	if to.LT(from) {
		return []Refusal{{
			Field: fieldIchorVersion,
			Rule: fmt.Sprintf("%s is older than the installed Ichor %s: the installer never downgrades (a release's CRDs are not taken back); nothing was created",
				target, installed),
			WayOut: fmt.Sprintf("choose %s or a newer release (`ichor version` shows the installed one); a failed upgrade rolls itself back", installed),
		}}
	}

	// A new major follows the last minor of the one before; which minor
	// that is no version says, so any minor may step to the next X.0.
	if to.Major == from.Major && to.Minor <= from.Minor+1 || to.Major == from.Major+1 && to.Minor == 0 {
		return nil
	}

	next := fmt.Sprintf("v%d.%d", from.Major, from.Minor+1)

	return []Refusal{{
		Field: fieldIchorVersion,
		Rule: fmt.Sprintf("%s skips a minor release from the installed Ichor %s: Ichor upgrades one minor at a time, because each release's installer "+
			"migrates from the release before it; nothing was created", target, installed),
		WayOut: fmt.Sprintf("upgrade to the newest %s.x first (`ichor upgrade ichor %s.N`), then to %s", next, next, target),
	}}
}

// ichorRelease parses an Ichor version (vMAJOR.MINOR.PATCH[-PRE][+BUILD]).
func ichorRelease(v string) (semver.Version, error) {
	s, err := semver.Parse(strings.TrimPrefix(install.ReleaseVersion(v), "v"))
	if err != nil {
		return semver.Version{}, fmt.Errorf("%q is not an Ichor release version vMAJOR.MINOR.PATCH: %w", v, err)
	}

	return s, nil
}

// development reports whether v is a development build (v0.0.0...), as
// version.Release.Development says.
func development(v string) bool {
	r, err := version.Parse(v)

	return err == nil && r.Development()
}
