package main

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeZip writes a module zip holding the given files (paths relative to the module root).
func writeZip(t *testing.T, version string, files map[string]string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, data := range files {
		w, err := zw.Create(ciliumModule + "@" + version + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), version+".zip")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fsys := os.DirFS(root)
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		out[p] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGenerateCopiesTheChartDeterministically(t *testing.T) {
	chart := map[string]string{
		chartDir + "/Chart.yaml":              "name: cilium\nversion: 1.20.2\n",
		chartDir + "/values.yaml":             "a: 1\n",
		chartDir + "/templates/ds.yaml":       "kind: DaemonSet\n",
		chartDir + "/files/agent/x.bash":      "echo\n",
		chartDir + "/README.md":               "docs\n",
		chartDir + "/values.yaml.tmpl":        "tmpl\n",
		chartDir + "/.helmignore":             "# c\n*.tmpl\n.git/\n",
		chartDir + "/.git/config":             "x\n",
		"pkg/agent/main.go":                   "package main\n",
		"install/kubernetes/other/Chart.yaml": "name: other\n",
	}
	mod := module{Path: ciliumModule, Version: "v1.20.2", Zip: writeZip(t, "v1.20.2", chart), Sum: "h1:test"}
	out := t.TempDir()
	// A version that is no longer pinned and a stale file are removed.
	if err := os.MkdirAll(filepath.Join(out, "v1.18.0"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(out, "v1.20.2", "templates"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "v1.20.2", "templates", "stale.yaml"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := generate(out, []module{mod}); err != nil {
		t.Fatal(err)
	}
	first := tree(t, out)
	want := []string{"README.md", "v1.20.2/Chart.yaml", "v1.20.2/files/agent/x.bash", "v1.20.2/templates/ds.yaml", "v1.20.2/values.yaml"}
	got := make([]string, 0, len(first))
	for k := range first {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("generated %v, want %v", got, want)
	}
	if first["v1.20.2/values.yaml"] != "a: 1\n" {
		t.Errorf("values.yaml = %q, not the module's bytes", first["v1.20.2/values.yaml"])
	}
	if !strings.Contains(first["README.md"], "DO NOT EDIT") || !strings.Contains(first["README.md"], "| v1.20.2 | `h1:test` |") {
		t.Errorf("README.md does not say it is generated or does not record the sum:\n%s", first["README.md"])
	}
	if err := generate(out, []module{mod}); err != nil {
		t.Fatal(err)
	}
	if second := tree(t, out); !mapsEqual(first, second) {
		t.Error("a second run wrote different files")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestModuleWithoutTheChartIsRefused(t *testing.T) {
	mod := module{Path: ciliumModule, Version: "v9.9.9", Zip: writeZip(t, "v9.9.9", map[string]string{"go.mod": "module x\n"})}
	if _, err := chartFiles(mod); err == nil || !strings.Contains(err.Error(), "no longer ships the chart") {
		t.Fatalf("want a refusal of a module without the chart, got %v", err)
	}
}

func TestHelmignoreFormsNotImplementedAreRefused(t *testing.T) {
	for _, rule := range []string{"!keep.yaml", "templates/x.yaml", "[bad"} {
		if _, err := parseHelmignore([]byte(rule + "\n")); err == nil {
			t.Errorf("rule %q: want a refusal", rule)
		}
	}
}

func TestSplitVersions(t *testing.T) {
	if got := splitVersions(" v1.20.2,v1.19.3,,v1.20.2 "); !slices.Equal(got, []string{"v1.19.3", "v1.20.2"}) {
		t.Errorf("splitVersions = %v", got)
	}
}
