// Package compat decides whether this CLI may write to a cluster run by
// another Ichor release: writes are refused when the CLI and the server are
// more than one minor release apart (or of another major), because the CRs
// they write may mean different things.
package compat

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a parsed release version vMAJOR.MINOR.PATCH[-PRERELEASE].
type Version struct {
	Major, Minor, Patch int
	Prerelease          string
}

// Parse reads a release version; the leading v is optional.
func Parse(s string) (Version, error) {
	core, pre, _ := strings.Cut(strings.TrimPrefix(s, "v"), "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH", s)
		}
		n[i] = v
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Prerelease: pre}, nil
}

// Development reports whether v is an unreleased build (v0.0.0, as a build
// without a release version set at link time reports).
func (v Version) Development() bool {
	return v.Major == 0 && v.Minor == 0 && v.Patch == 0
}

// CheckWrite returns nil when a CLI of version client may write to a server
// of version server. An empty server version (Ichor not installed, or its
// version not reported yet) and a development build of either side are not
// checked.
func CheckWrite(client, server string) error {
	if server == "" {
		return nil
	}
	c, err := Parse(client)
	if err != nil {
		return err
	}
	s, err := Parse(server)
	if err != nil {
		return fmt.Errorf("the server reports %w", err)
	}
	if c.Development() || s.Development() {
		return nil
	}
	gap := c.Minor - s.Minor
	if gap < 0 {
		gap = -gap
	}
	if c.Major == s.Major && gap <= 1 {
		return nil
	}
	return fmt.Errorf("this ichor is %s and the cluster runs Ichor %s, more than one minor release apart, so writes are refused: "+
		"install ichor v%d.%d.x (run `ichor version` to compare)", client, server, s.Major, s.Minor)
}
