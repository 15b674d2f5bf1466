// Command ciliumchart copies Cilium's Helm chart out of the github.com/cilium/cilium
// Go module at pinned versions into contracts/pkg/cilium/charts, where
// contracts/pkg/cilium embeds it (DESIGN.md §2: the module zip ships
// install/kubernetes/cilium, with no subcharts).
//
// For each version it runs `go mod download -json github.com/cilium/cilium@VERSION`
// (so the go command fetches the zip, about 35 MB per version, once into the
// module cache and checks it against the checksum database), reads the chart
// out of the module zip and writes it to <out>/<version>/. Files the chart's
// own .helmignore excludes are left out (Helm leaves them out of a packaged
// chart too), and so is README.md,
// documentation that is not needed to render. Every run writes the same bytes:
// files are written in sorted order with mode 0644, stale files and versions
// are removed, and <out>/README.md records the versions and the module sums.
package main

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

const (
	ciliumModule = "github.com/cilium/cilium"
	chartDir     = "install/kubernetes/cilium"
)

func main() {
	out := flag.String("out", "charts", "directory to write the charts into (one subdirectory per version)")
	versions := flag.String("versions", "", "comma-separated versions of "+ciliumModule+" to take the chart from, e.g. v1.19.3,v1.20.2")
	flag.Parse()

	log.SetFlags(0)
	log.SetPrefix("ciliumchart: ")

	list := splitVersions(*versions)
	if len(list) == 0 {
		log.Fatal("no versions given: pass -versions v1.20.2[,...]")
	}
	mods := make([]module, 0, len(list))
	for _, v := range list {
		m, err := download(context.Background(), v)
		if err != nil {
			log.Fatal(err)
		}
		mods = append(mods, m)
	}
	if err := generate(*out, mods); err != nil {
		log.Fatal(err)
	}
}

// module is what `go mod download -json` reports about one module version.
type module struct {
	Path    string
	Version string
	Zip     string
	Sum     string
	Error   string
}

func splitVersions(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// download makes the go command fetch the module zip into the module cache
// (once; later runs find it there) and returns where it is. It runs outside
// any module (GOWORK=off, in the temporary directory) so the workspace's
// go.mod files are neither read nor changed.
func download(ctx context.Context, version string) (module, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ciliumModule+"@"+version) //nolint:gosec // the version comes from the go:generate directive
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, runErr := cmd.Output()
	var m module
	if err := json.Unmarshal(stdout, &m); err != nil {
		return module{}, fmt.Errorf("go mod download %s@%s: %w: %s", ciliumModule, version, errors.Join(runErr, err), stderr.String())
	}
	if runErr != nil {
		return module{}, fmt.Errorf("go mod download %s@%s: %w: %s %s", ciliumModule, version, runErr, m.Error, stderr.String())
	}
	if m.Error != "" {
		return module{}, fmt.Errorf("go mod download %s@%s: %s", ciliumModule, version, m.Error)
	}
	if m.Zip == "" {
		return module{}, fmt.Errorf("go mod download %s@%s reported no zip", ciliumModule, version)
	}
	return m, nil
}

// generate writes every version's chart and the README, and removes any
// version directory that is no longer pinned.
func generate(out string, mods []module) error {
	if err := os.MkdirAll(out, 0o750); err != nil {
		return err
	}
	keep := map[string]bool{"README.md": true}
	for _, m := range mods {
		files, err := chartFiles(m)
		if err != nil {
			return err
		}
		if err := writeChart(filepath.Join(out, m.Version), files); err != nil {
			return err
		}
		keep[m.Version] = true
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(out, e.Name())); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(out, "README.md"), readme(mods), 0o644) //nolint:gosec // a generated source file, world-readable like the rest of the tree
}

// chartFile is one file of the chart, by its path inside the chart.
type chartFile struct {
	name string
	data []byte
}

// chartFiles reads the chart out of the module zip, sorted by path.
func chartFiles(m module) ([]chartFile, error) {
	zr, err := zip.OpenReader(m.Zip)
	if err != nil {
		return nil, fmt.Errorf("open the module zip of %s@%s: %w", m.Path, m.Version, err)
	}
	defer func() { _ = zr.Close() }()

	prefix := m.Path + "@" + m.Version + "/" + chartDir + "/"
	all := map[string]*zip.File{}
	for _, f := range zr.File {
		if name, ok := strings.CutPrefix(f.Name, prefix); ok && !f.FileInfo().IsDir() {
			all[name] = f
		}
	}
	if all["Chart.yaml"] == nil {
		return nil, fmt.Errorf("%s@%s has no %s/Chart.yaml: the module no longer ships the chart", m.Path, m.Version, chartDir)
	}
	var ignore []string
	if f := all[".helmignore"]; f != nil {
		data, err := readZip(f)
		if err != nil {
			return nil, err
		}
		if ignore, err = parseHelmignore(data); err != nil {
			return nil, fmt.Errorf("%s@%s: %w", m.Path, m.Version, err)
		}
	}
	names := make([]string, 0, len(all))
	for name := range all {
		if name == ".helmignore" || name == "README.md" || ignored(ignore, name) {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	files := make([]chartFile, 0, len(names))
	for _, name := range names {
		data, err := readZip(all[name])
		if err != nil {
			return nil, err
		}
		files = append(files, chartFile{name: name, data: data})
	}
	return files, nil
}

func readZip(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	return io.ReadAll(rc)
}

// parseHelmignore returns the patterns of a .helmignore. Only the forms the
// Cilium chart uses are supported (a glob on a file name, or a directory name
// ending in "/"); anything else (negation, a path with a slash inside) fails
// the generator rather than being guessed at. The rules are Helm's
// (helm.sh/helm/v3 pkg/ignore/doc.go).
func parseHelmignore(data []byte) ([]string, error) {
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") || strings.Contains(strings.TrimSuffix(line, "/"), "/") {
			return nil, fmt.Errorf(".helmignore rule %q is a form this generator does not implement; extend parseHelmignore", line)
		}
		if _, err := path.Match(strings.TrimSuffix(line, "/"), ""); err != nil {
			return nil, fmt.Errorf(".helmignore rule %q: %w", line, err)
		}
		out = append(out, line)
	}
	return out, nil
}

// ignored reports whether a chart file matches a .helmignore pattern: a
// directory pattern matches any directory on the path, a file pattern the
// file's base name.
func ignored(patterns []string, name string) bool {
	parts := strings.Split(name, "/")
	for _, p := range patterns {
		if dir, ok := strings.CutSuffix(p, "/"); ok {
			for _, d := range parts[:len(parts)-1] {
				if ok, _ := path.Match(dir, d); ok {
					return true
				}
			}
			continue
		}
		if ok, _ := path.Match(p, parts[len(parts)-1]); ok {
			return true
		}
	}
	return false
}

// writeChart replaces dir with exactly the given files.
func writeChart(dir string, files []chartFile) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil { //nolint:gosec // chart files are data, world-readable like the rest of the tree
			return err
		}
	}
	return nil
}

func readme(mods []module) []byte {
	var b bytes.Buffer
	b.WriteString("# Cilium charts (generated, DO NOT EDIT)\n\n")
	b.WriteString("Generated by `tools/cmd/ciliumchart` (`go tool task generate`, through the\n")
	b.WriteString("`//go:generate` directive in `contracts/pkg/cilium/chart.go`). Each directory is\n")
	b.WriteString("`install/kubernetes/cilium` of the Go module `" + ciliumModule + "` at that\n")
	b.WriteString("version, without README.md and the files the chart's `.helmignore` excludes.\n")
	b.WriteString("The pinned default is `release.DefaultCiliumVersion`.\n\n")
	b.WriteString("| version | module sum |\n|---|---|\n")
	for _, m := range mods {
		fmt.Fprintf(&b, "| %s | `%s` |\n", m.Version, m.Sum)
	}
	return b.Bytes()
}
