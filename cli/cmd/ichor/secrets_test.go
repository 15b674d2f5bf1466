package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
)

const (
	plainKubeconfig  = "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: kube-token-9f3a\n"
	plainTalosconfig = "context: prod\ncontexts:\n  prod:\n    key: talos-key-77b1\n"
)

// plainStore writes a plaintext store as an earlier version left it.
func plainStore(t *testing.T) (home, dir string) {
	t.Helper()
	home = t.TempDir()
	dir = filepath.Join(home, "clusters", "prod")
	must(t, os.MkdirAll(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, secretstore.FileKubeconfig), []byte(plainKubeconfig), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, secretstore.FileTalosconfig), []byte(plainTalosconfig), 0o600))
	return home, dir
}

// filesUnder returns every file under dir with its content.
func filesUnder(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p) //nolint:gosec // a test directory of its own
		out[p] = b
		return err
	}))
	return out
}

func TestSecretsPlaintextMigration(t *testing.T) {
	home, dir := plainStore(t)
	homeEnv := "ICHOR_HOME=" + home
	inv := invocation{env: []string{homeEnv}}

	st := mustSucceed(t, ichorWith(t, inv, "secrets", "status", "--cluster", "prod"))
	if !strings.Contains(st.stdout, "plaintext") || !strings.Contains(st.stdout, "ichor secrets encrypt --cluster prod") {
		t.Fatalf("status must show plaintext files and the way out:\n%s", st.stdout)
	}

	// A plaintext file still loads, with a warning.
	out := filepath.Join(t.TempDir(), "kc")
	r := mustSucceed(t, ichorWith(t, inv, "secrets", "export", "kubeconfig", "--cluster", "prod", "--out", out))
	if !strings.Contains(r.stderr, "stored unencrypted") || !strings.Contains(r.stderr, "ichor secrets encrypt --cluster prod") {
		t.Fatalf("loading plaintext must warn:\n%s", r.stderr)
	}
	if b, _ := os.ReadFile(out); string(b) != plainKubeconfig {
		t.Fatal("the exported kubeconfig differs")
	}

	// Without any passphrase source and no terminal, encrypt says what to do.
	mustFail(t, ichorWith(t, inv, "secrets", "encrypt", "--cluster", "prod"), "--passphrase-file", "ICHOR_PASSPHRASE")

	pass := "river-candle-orbit-42"
	passFile := filepath.Join(t.TempDir(), "pass")
	must(t, os.WriteFile(passFile, []byte(pass+"\n"), 0o600))
	r = mustSucceed(t, ichorWith(t, inv, "secrets", "encrypt", "--cluster", "prod", "--passphrase-file", passFile))
	if strings.Contains(r.all(), pass) {
		t.Fatal("encrypt printed the passphrase it was given")
	}
	files := filesUnder(t, home)
	if len(files) != 2 {
		t.Fatalf("after the migration the store must hold two encrypted files, got %d", len(files))
	}
	for p, b := range files {
		fi, err := os.Stat(p)
		must(t, err)
		if !strings.HasSuffix(p, ".age") || fi.Mode().Perm() != 0o600 || !bytes.HasPrefix(b, []byte("age-encryption.org/v1")) {
			t.Fatalf("%s: mode %04o, want an age file of mode 0600", p, fi.Mode().Perm())
		}
		for _, s := range []string{pass, "kube-token-9f3a", "talos-key-77b1"} {
			if bytes.Contains(b, []byte(s)) {
				t.Fatalf("%s holds %q in the clear", p, s)
			}
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory has mode %04o, want 0700", fi.Mode().Perm())
	}

	// The wrong passphrase says so; the right one opens the file, with no warning.
	r = mustFail(t, ichorWith(t, invocation{env: []string{homeEnv, "ICHOR_PASSPHRASE=not-it"}},
		"secrets", "export", "talosconfig", "--cluster", "prod", "--out", filepath.Join(t.TempDir(), "tc")), "wrong passphrase")
	if strings.Contains(r.all(), "not-it") {
		t.Fatal("the error quotes the passphrase")
	}
	tc := filepath.Join(t.TempDir(), "tc")
	r = mustSucceed(t, ichorWith(t, invocation{env: []string{homeEnv, "ICHOR_PASSPHRASE=" + pass}},
		"secrets", "export", "talosconfig", "--cluster", "prod", "--out", tc))
	if strings.Contains(r.stderr, "warning") {
		t.Fatalf("an encrypted store loads without warnings:\n%s", r.stderr)
	}
	if b, _ := os.ReadFile(tc); string(b) != plainTalosconfig {
		t.Fatal("the decrypted talosconfig differs")
	}
	if fi, _ := os.Stat(tc); fi.Mode().Perm() != 0o600 {
		t.Fatalf("export wrote mode %04o, want 0600", fi.Mode().Perm())
	}
	mustFail(t, ichorWith(t, invocation{env: []string{homeEnv, "ICHOR_PASSPHRASE=" + pass}},
		"secrets", "export", "talosconfig", "--cluster", "prod", "--out", tc), "exists")
}

var generatedPass = regexp.MustCompile(`(?m)^\s{4}(\S+)$`)

func TestSecretsGeneratedPassphraseShownOnceNeverStored(t *testing.T) {
	home, _ := plainStore(t)
	inv := invocation{env: []string{"ICHOR_HOME=" + home}}
	r := mustSucceed(t, ichorWith(t, inv, "secrets", "encrypt", "--cluster", "prod", "--generate-passphrase"))
	m := generatedPass.FindStringSubmatch(r.stderr)
	if m == nil || !strings.Contains(r.stderr, "shown only now") {
		t.Fatalf("the generated passphrase must be shown once:\n%s", r.stderr)
	}
	pass := m[1]
	if strings.Contains(r.stdout, pass) {
		t.Fatal("the passphrase went to standard output")
	}
	for p, b := range filesUnder(t, home) {
		if bytes.Contains(b, []byte(pass)) {
			t.Fatalf("%s stores the passphrase", p)
		}
	}
	out := filepath.Join(t.TempDir(), "kc")
	mustSucceed(t, ichorWith(t, invocation{env: []string{"ICHOR_HOME=" + home, "ICHOR_PASSPHRASE=" + pass}},
		"secrets", "export", "kubeconfig", "--cluster", "prod", "--out", out))
	if b, _ := os.ReadFile(out); string(b) != plainKubeconfig {
		t.Fatal("the generated passphrase does not open the store")
	}
}
