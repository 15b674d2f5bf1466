// Package version reports which build of Ichor is running. Every deliverable
// (controller, installer, CLI, UI backend) prints the same information, set at
// link time with -X github.com/maeshinshin/ichor/contracts/pkg/version.version=...
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is replaced at link time by the build (see Taskfile.yml, task build).
var version = "v0.0.0-dev"

// Info describes one build of an Ichor binary.
type Info struct {
	// Version is the Ichor release, a semantic version with a leading "v".
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, when the build recorded it.
	Commit string `json:"commit,omitempty"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build information of the running binary.
func Get() Info {
	info := Info{
		Version:   version,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Commit = s.Value
			}
		}
	}
	return info
}

// String renders the information on one line, e.g. for `--version` flags.
func (i Info) String() string {
	s := fmt.Sprintf("%s (%s, %s)", i.Version, i.GoVersion, i.Platform)
	if i.Commit != "" {
		s = fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
	}
	return s
}
