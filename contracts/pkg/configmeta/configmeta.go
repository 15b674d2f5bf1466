// Package configmeta says what the Talos configuration types cannot: whether
// changing a field needs a reboot, whether it only matters at install time,
// whether it restarts the Kubernetes API server, and which Talos version
// introduced it. It is keyed by document path, the same paths the mirror
// package uses ("Kind:dotted.path", [] for list elements, {*} for map
// values); the planner derives the apply mode of a change from it.
//
// Lookup takes the most specific entry whose path is a prefix of the field's;
// a path no entry covers is treated as needing a reboot. Whether a field is
// privileged comes from contracts/pkg/privileged, the one list of them.
package configmeta

import (
	"strings"

	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
)

// Meta is what is known about changing one configuration field.
type Meta struct {
	// Known is false when no entry covers the path.
	Known bool
	// RebootRequired: the change takes effect only after a reboot.
	RebootRequired bool
	// InstallTimeOnly: the field is read when Talos installs (or upgrades)
	// the machine; changing it later changes nothing until then.
	InstallTimeOnly bool
	// APIServerRestart: the change restarts kube-apiserver on control planes.
	APIServerRestart bool
	// Since is the Talos version that introduced the document kind (vX.Y),
	// taken from the first Talos release tag that registers it.
	Since string
	// Privileged: the field runs code as root on a node or acts as
	// cluster-admin (contracts/pkg/privileged); a patch that sets it needs
	// `update` on talosconfigpatches/privileged.
	Privileged bool
}

type entry struct {
	path string
	meta Meta
}

// Lookup returns what is known about changing the field at path.
func Lookup(path string) Meta {
	best := -1

	for i, e := range table {
		if privileged.Covers(e.path, path) && (best < 0 || len(e.path) > len(table[best].path)) {
			best = i
		}
	}

	if best < 0 {
		return Meta{RebootRequired: true, Privileged: privileged.Is(path)}
	}

	m := table[best].meta
	m.Known = true
	m.Privileged = privileged.Is(path)

	if m.Since == "" {
		m.Since = kindSince(path)
	}

	return m
}

func kindSince(path string) string {
	kind, _, _ := strings.Cut(path, ":")

	for _, e := range table {
		if e.path == kind {
			return e.meta.Since
		}
	}

	return ""
}

// Paths returns the paths of the table, for tests and documentation.
func Paths() []string {
	out := make([]string, 0, len(table))
	for _, e := range table {
		out = append(out, e.path)
	}

	return out
}
