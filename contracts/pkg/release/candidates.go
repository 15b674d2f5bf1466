package release

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// The groups of the upgrade candidates (architecture, "Upgrades"): the
// pinned set's version when it is newer than the running one, the patches of
// the running minor, and the next minor's releases.
const (
	GroupRecommended = "Recommended"
	GroupPatch       = "Patch"
	GroupNextMinor   = "Next minor"
)

// Candidate is one version an upgrade may move to.
type Candidate struct {
	// Version is the release, e.g. v1.14.2.
	Version string `json:"version"`
	// Group is GroupRecommended, GroupPatch or GroupNextMinor.
	Group string `json:"group"`
	// Default marks the newest patch of the running minor: what an upgrade
	// proposes when a person names no version.
	Default bool `json:"default,omitempty"`
}

// TalosCandidates are the Talos versions a cluster running current may move
// to, out of available (a release source's list, in any order): final
// releases newer than current, of its minor or the next one, that TalosPath
// accepts; grouped Recommended (recommended, normally DefaultTalosVersion,
// when it is among them), Patch and Next minor, newest first within each
// group, the newest patch of the current minor marked Default. A version
// that does not parse, a pre-release and a duplicate are left out.
func TalosCandidates(current, recommended string, available []string) ([]Candidate, error) {
	if _, err := parse("talos", current); err != nil {
		return nil, err
	}

	return candidates(current, recommended, available, func(v string) bool { return TalosPath(current, v) == nil })
}

// DefaultCandidate is the candidate marked Default, or "" when there is none.
func DefaultCandidate(cs []Candidate) string {
	for _, c := range cs {
		if c.Default {
			return c.Version
		}
	}

	return ""
}

// DefaultReleaseSource is the Image Factory whose /versions lists the Talos
// releases when the cluster names none (spec.registry.imageFactoryURL).
const DefaultReleaseSource = "https://factory.talos.dev"

// maxVersionsBody bounds what FetchVersions reads (the real list is a few KiB).
const maxVersionsBody = 1 << 20

// FetchVersions reads the Talos releases an Image Factory offers: GET
// base/versions answers a JSON array of version strings (the Image Factory's
// HTTP frontend, github.com/siderolabs/image-factory README "GET /versions").
func FetchVersions(ctx context.Context, hc *http.Client, base string) ([]string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}

	url := strings.TrimSuffix(base, "/") + "/versions"

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("release source %q is not a URL: %w", base, err)
	}

	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the Talos releases from %s: %w", url, err)
	}
	defer resp.Body.Close() //nolint:errcheck // a read-only body

	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the Talos releases from %s: %s", url, resp.Status)
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxVersionsBody))
	if err != nil {
		return nil, fmt.Errorf("reading the Talos releases from %s: %w", url, err)
	}

	var vs []string
	if err := json.Unmarshal(body, &vs); err != nil {
		return nil, fmt.Errorf("the Talos releases from %s are not a JSON list of versions: %w", url, err)
	}

	return vs, nil
}
