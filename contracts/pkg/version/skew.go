package version

import (
	"fmt"
	"strconv"
	"strings"
)

// Release is a parsed Ichor version vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD].
type Release struct {
	Major, Minor, Patch int
	// Prerelease is what follows the first "-" of the version, without the build metadata.
	Prerelease string
}

// Parse reads an Ichor version; the leading v is optional and build
// metadata (+...) is ignored.
func Parse(s string) (Release, error) {
	rest, _, _ := strings.Cut(strings.TrimPrefix(s, "v"), "+")
	core, pre, _ := strings.Cut(rest, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Release{}, fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Release{}, fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", s)
		}
		n[i] = v
	}
	return Release{Major: n[0], Minor: n[1], Patch: n[2], Prerelease: pre}, nil
}

// Development reports whether r is an unreleased build: v0.0.0, which is
// what a binary reports when no release version was set at link time
// (v0.0.0-dev, or v0.0.0-dev+COMMIT from `go tool task build`).
func (r Release) Development() bool {
	return r.Major == 0 && r.Minor == 0 && r.Patch == 0
}

// SkewError is the refusal of a write between two Ichor releases more than
// one minor apart, or of different majors.
type SkewError struct {
	// Client is the version of the program that would write (the CLI);
	// Server the one the cluster runs (IchorInstallation status.installedVersion).
	Client, Server string
	// Want is the MAJOR.MINOR a client must have to write to Server.
	Want string
}

func (e *SkewError) Error() string {
	return fmt.Sprintf("this ichor is %s and the cluster runs Ichor %s, more than one minor release apart, so writes are refused "+
		"(reads still work): install ichor %s.x, the CLI of the cluster's release (`ichor version` compares the two)", e.Client, e.Server, e.Want)
}

// Skew returns nil when a client of version client may write to a cluster
// that runs Ichor server: same major, and at most one minor apart in either
// direction. Otherwise it returns a *SkewError that names both versions and
// the CLI to install, or an error when server is not a version.
//
// Nothing is refused when it cannot be compared meaningfully:
//   - server "" (no IchorInstallation, or its installedVersion not recorded
//     yet): there is no installed release to disagree with;
//   - a development build on either side (v0.0.0...): it is built from a
//     commit, not a release, so its minor says nothing about what it writes;
//     whoever runs one is working on Ichor itself and tracks the source;
//   - a client version that does not parse, which only a hand-made build
//     can have (the build sets a release or v0.0.0-dev+COMMIT): the same.
//
// A server version that does not parse is an error: the installer records
// only the release it installed, so such a value means the object was
// edited by hand and the versions cannot be compared.
func Skew(client, server string) error {
	if server == "" {
		return nil
	}
	s, err := Parse(server)
	if err != nil {
		return fmt.Errorf("the IchorInstallation's status.installedVersion is not a release: %w; writes are refused "+
			"until the installer records one (run `ichor version` to see it)", err)
	}
	c, cerr := Parse(client)
	if cerr != nil || c.Development() || s.Development() {
		return nil //nolint:nilerr // a client that is not a release is not refused (see above)
	}
	gap := c.Minor - s.Minor
	if c.Major == s.Major && gap >= -1 && gap <= 1 {
		return nil
	}
	return &SkewError{Client: client, Server: server, Want: fmt.Sprintf("v%d.%d", s.Major, s.Minor)}
}
