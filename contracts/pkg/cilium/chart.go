// Package cilium renders the Cilium Helm charts pinned in the binary, offline,
// with Helm's Go SDK: the same bytes every run, no network and no cluster
// (architecture "Bootstrap" step 3 and "Cilium"). `ichor init` puts the
// result in the first control plane's inline manifest; the ichor-cni Job
// renders the same chart with the same values (as an adoption's Cilium
// takeover will; this release's `ichor adopt --plan` renders no chart).
//
// The charts are data taken from the Go module github.com/cilium/cilium at the
// pinned versions by tools/cmd/ciliumchart (see charts/README.md); the values
// are layered by contracts/pkg/cilium/ciliumvalues.
package cilium

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/blang/semver/v4"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

//go:generate go run github.com/maeshinshin/ichor/tools/cmd/ciliumchart -out charts -versions v1.19.3,v1.20.2

// charts holds one directory per embedded chart version, named after it (v1.20.2).
//
//go:embed all:charts
var charts embed.FS

// chartFiles are the files of each embedded chart, read once.
var chartFiles = sync.OnceValues(readCharts)

func readCharts() (map[string][]*loader.BufferedFile, error) {
	out := map[string][]*loader.BufferedFile{}
	entries, err := fs.ReadDir(charts, "charts")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		root := path.Join("charts", e.Name())
		var files []*loader.BufferedFile
		err := fs.WalkDir(charts, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := charts.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, root+"/"), Data: data})
			return nil
		})
		if err != nil {
			return nil, err
		}
		out[e.Name()] = files
	}
	return out, nil
}

// Versions returns the chart versions embedded in this binary, oldest first.
func Versions() []string {
	files, err := chartFiles()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(files))
	for v := range files {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b string) int {
		va, errA := semver.ParseTolerant(a)
		vb, errB := semver.ParseTolerant(b)
		if errA != nil || errB != nil {
			return strings.Compare(a, b)
		}
		return va.Compare(vb)
	})
	return out
}

// UnknownVersionError is the refusal of a chart version this binary does not embed.
type UnknownVersionError struct {
	// Version is the version asked for.
	Version string
	// Embedded are the versions this binary has.
	Embedded []string
}

func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("the Cilium chart %s is not embedded in this Ichor; embedded versions: %s", e.Version, strings.Join(e.Embedded, ", "))
}

// LoadChart loads the embedded chart of version (a fresh copy each call, so a
// render cannot change what the next one sees). An empty version is
// release.DefaultCiliumVersion.
func LoadChart(version string) (*chart.Chart, error) {
	if version == "" {
		version = release.DefaultCiliumVersion
	}
	all, err := chartFiles()
	if err != nil {
		return nil, fmt.Errorf("read the embedded Cilium charts: %w", err)
	}
	files, ok := all[version]
	if !ok {
		return nil, &UnknownVersionError{Version: version, Embedded: Versions()}
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load the embedded Cilium chart %s: %w", version, err)
	}
	if got := "v" + ch.Metadata.Version; got != version {
		return nil, fmt.Errorf("the embedded Cilium chart under %s says it is %s: regenerate it with `go tool task generate`", version, got)
	}
	return ch, nil
}
