package adopt

import (
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// MinTalos is the oldest Talos minor adoption takes (architecture: "It needs
// Talos v1.12 or later on every node it adopts").
const MinTalos = "v1.12"

var minTalos = semver.MustParse("1.12.0")

// newestKnown is the newest Talos minor this Ichor knows: its default
// version contract, the newest of the machinery it is built with.
var newestKnown = semver.MustParse(strings.TrimPrefix(release.DefaultVersionContract, "v") + ".0")

// fieldTalosVersion is the Field of the version refusals.
const fieldTalosVersion = "talos version"

// CheckVersions refuses a cluster adoption does not take: a node whose version
// does not parse or is newer than this Ichor knows (unknown), a node older
// than v1.12, or nodes of different versions. Each refusal names the nodes and
// what they run. running maps a node's address to its Talos version.
func CheckVersions(running map[string]string) []guard.Refusal {
	var (
		unknown, old []string
		byVersion    = map[string][]string{}
	)

	for _, addr := range sortedKeys(running) {
		v := running[addr]
		byVersion[v] = append(byVersion[v], addr)

		sv, err := semver.ParseTolerant(v)

		switch {
		case err != nil || v == "":
			unknown = append(unknown, fmt.Sprintf("%s runs %q", addr, v))
		case sv.LT(minTalos):
			old = append(old, fmt.Sprintf("%s runs Talos %s", addr, v))
		case sv.Major > newestKnown.Major || (sv.Major == newestKnown.Major && sv.Minor > newestKnown.Minor):
			unknown = append(unknown, fmt.Sprintf("%s runs Talos %s", addr, v))
		}
	}

	var out []guard.Refusal

	if len(unknown) > 0 {
		out = append(out, guard.Refusal{
			Field: fieldTalosVersion,
			Rule: fmt.Sprintf("%s: a Talos version this Ichor does not know (it knows v1.12 to v%d.%d)",
				strings.Join(unknown, ", "), newestKnown.Major, newestKnown.Minor),
			WayOut: "adopt with an Ichor release that knows this Talos version",
		})
	}

	if len(old) > 0 {
		out = append(out, guard.Refusal{
			Field:  fieldTalosVersion,
			Rule:   fmt.Sprintf("%s, older than %s, the oldest Talos Ichor adopts", strings.Join(old, ", "), MinTalos),
			WayOut: "upgrade Talos first (talosctl upgrade, every node to one version of " + MinTalos + " or later), then run `ichor adopt --plan` again",
		})
	}

	if len(byVersion) > 1 {
		parts := make([]string, 0, len(byVersion))
		for _, v := range sortedKeys(byVersion) {
			parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(byVersion[v], ", ")))
		}

		out = append(out, guard.Refusal{
			Field:  fieldTalosVersion,
			Rule:   "the nodes run different Talos versions (" + strings.Join(parts, "; ") + ")",
			WayOut: "upgrade Talos first, so that every node runs the same version, then run `ichor adopt --plan` again",
		})
	}

	return out
}

// ContractCandidates are the version contracts probed for a cluster running
// Talos version, newest first: from the running version's down to v1.12.
func ContractCandidates(version string) ([]string, error) {
	sv, err := semver.ParseTolerant(version)
	if err != nil {
		return nil, fmt.Errorf("talos version %q: %w", version, err)
	}

	var out []string

	for minor := sv.Minor; minor >= minTalos.Minor; minor-- {
		out = append(out, fmt.Sprintf("v%d.%d", sv.Major, minor))
	}

	if len(out) == 0 {
		return nil, fmt.Errorf("talos version %s is older than %s", version, MinTalos)
	}

	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	slices.Sort(keys)

	return keys
}
