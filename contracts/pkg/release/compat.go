package release

import (
	"errors"
	"fmt"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
)

// The errors a version check wraps. ErrIncompatiblePair is the only one the
// `override` verb can get past; a downgrade and a refused upgrade path never pass.
var (
	// ErrInvalidVersion means a version does not parse as a semantic version.
	ErrInvalidVersion = errors.New("not a valid version")
	// ErrDowngrade means the target is older than the running version.
	ErrDowngrade = errors.New("downgrade")
	// ErrUpgradePath means Talos refuses the step (minimum host version, denied versions).
	ErrUpgradePath = errors.New("upgrade path refused")
	// ErrKubernetesSkew means a Kubernetes step of more than one minor, or across majors.
	ErrKubernetesSkew = errors.New("kubernetes version skew")
	// ErrIncompatiblePair means the compatibility table refuses the pair.
	ErrIncompatiblePair = errors.New("incompatible pair")
)

// The compatibility table. Talos and Kubernetes pairs come from Talos
// machinery's own compatibility package (one sub-package per Talos minor,
// with its minimum and maximum Kubernetes versions and its upgrade bounds), so
// Ichor never disagrees with Talos about which pairs it supports. The
// Kubernetes and Cilium pairs join this table with the embedded Cilium charts.

// CheckPair reports whether Kubernetes kubernetesVersion can run on Talos
// talosVersion according to the table; a refusal wraps ErrIncompatiblePair.
func CheckPair(talosVersion, kubernetesVersion string) error {
	talos, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talosVersion})
	if err != nil {
		return fmt.Errorf("talos version %q is %w (expected e.g. %s)", talosVersion, ErrInvalidVersion, DefaultTalosVersion)
	}
	kube, err := compatibility.ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return fmt.Errorf("kubernetes version %q is %w (expected e.g. %s)", kubernetesVersion, ErrInvalidVersion, DefaultKubernetesVersion)
	}
	if err := kube.SupportedWith(talos); err != nil {
		return fmt.Errorf("%w: kubernetes %s cannot run on talos %s: %w", ErrIncompatiblePair, kubernetesVersion, talosVersion, err)
	}
	return nil
}

// TalosPath reports whether a cluster running Talos from may move to Talos to:
// never a downgrade, and only a step Talos's compatibility rule accepts (the
// target's minor sets a minimum running version and denies listed versions).
// Equal versions are accepted (nothing moves).
func TalosPath(from, to string) error {
	f, err := parse("talos", from)
	if err != nil {
		return err
	}
	t, err := parse("talos", to)
	if err != nil {
		return err
	}
	if t.LT(f) {
		return fmt.Errorf("%w: talos %s is older than the running %s", ErrDowngrade, to, from)
	}
	if t.EQ(f) {
		return nil
	}
	// Both parsed above, so these cannot fail.
	host, _ := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: from})
	target, _ := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: to})
	if err := target.UpgradeableFrom(host); err != nil {
		return fmt.Errorf("%w: talos %s to %s: %w", ErrUpgradePath, from, to, err)
	}
	return nil
}

// KubernetesSkew reports whether Kubernetes may move between the two versions: never a
// downgrade, same major, at most one minor up (the version skew policy).
func KubernetesSkew(from, to string) error {
	f, err := parse("kubernetes", from)
	if err != nil {
		return err
	}
	t, err := parse("kubernetes", to)
	if err != nil {
		return err
	}
	switch {
	case t.LT(f):
		return fmt.Errorf("%w: kubernetes %s is older than the running %s", ErrDowngrade, to, from)
	case t.Major != f.Major:
		return fmt.Errorf("%w: kubernetes %s to %s changes the major version", ErrKubernetesSkew, from, to)
	case t.Minor > f.Minor+1:
		return fmt.Errorf("%w: kubernetes %s to %s skips a minor; upgrade one minor at a time (next: %d.%d.x)",
			ErrKubernetesSkew, from, to, f.Major, f.Minor+1)
	}
	return nil
}

// CheckContract reports whether a version contract (vMAJOR.MINOR) can be
// rendered for Talos talosVersion: the contract may not be newer than the Talos
// it runs on.
func CheckContract(contract, talosVersion string) error {
	c, err := semver.ParseTolerant(contract)
	if err != nil {
		return fmt.Errorf("version contract %q is %w (expected e.g. v1.14)", contract, ErrInvalidVersion)
	}
	t, err := parse("talos", talosVersion)
	if err != nil {
		return err
	}
	if c.Major > t.Major || (c.Major == t.Major && c.Minor > t.Minor) {
		return fmt.Errorf("version contract %s is newer than talos %s", contract, talosVersion)
	}
	return nil
}

func parse(what, v string) (semver.Version, error) {
	p, err := semver.ParseTolerant(v)
	if err != nil {
		return semver.Version{}, fmt.Errorf("%s version %q is %w", what, v, ErrInvalidVersion)
	}
	return p, nil
}

// ciliumTested is, per Cilium minor, the Kubernetes minors Cilium's own
// documentation lists as e2e-tested ("Kubernetes Version" in
// Documentation/network/kubernetes/requirements.rst of github.com/cilium/cilium
// at v1.19.3 and v1.20.2). Older Kubernetes versions "do not have Cilium
// support"; newer ones depend on Kubernetes' backward compatibility.
var ciliumTested = map[string][2]uint64{
	"1.19": {31, 34},
	"1.20": {33, 36},
}

// CheckCiliumPair reports whether Cilium ciliumVersion can run on Kubernetes
// kubernetesVersion: a Kubernetes minor older than the oldest Cilium tests is
// refused (wrapping ErrIncompatiblePair), one newer than the newest it tests
// is accepted with untested true, so that callers can say so.
func CheckCiliumPair(ciliumVersion, kubernetesVersion string) (untested bool, err error) {
	c, err := parse("cilium", ciliumVersion)
	if err != nil {
		return false, err
	}
	k, err := parse("kubernetes", kubernetesVersion)
	if err != nil {
		return false, err
	}
	tested, ok := ciliumTested[fmt.Sprintf("%d.%d", c.Major, c.Minor)]
	if !ok {
		return false, fmt.Errorf("%w: cilium %s is not a version this Ichor knows", ErrIncompatiblePair, ciliumVersion)
	}
	if k.Major != 1 || k.Minor < tested[0] {
		return false, fmt.Errorf("%w: cilium %s supports kubernetes 1.%d to 1.%d, not %s",
			ErrIncompatiblePair, ciliumVersion, tested[0], tested[1], kubernetesVersion)
	}
	return k.Minor > tested[1], nil
}
