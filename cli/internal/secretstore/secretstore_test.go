package secretstore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	pass    = "correct horse battery staple"
	caKey   = "-----BEGIN ED25519 PRIVATE KEY-----\nc2VjcmV0LWNhLWtleQ==\n-----END ED25519 PRIVATE KEY-----\n"
	kubecfg = "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: kube-token-123\n"
	talcfg  = "context: prod\ncontexts:\n  prod:\n    key: talos-key-456\n"
)

func fixed(p string) Passphrase { return func() (string, error) { return p, nil } }

func newStore(t *testing.T, warn *bytes.Buffer) *Store {
	t.Helper()
	t.Setenv(HomeEnv, t.TempDir())
	s, err := Open("prod", warn)
	if err != nil {
		t.Fatal(err)
	}
	// age's default work factor costs about a second per file; the format is the same.
	s.WorkFactor = 10
	return s
}

func contents() Contents {
	return Contents{Bundle: []byte("certs:\n  os:\n    key: " + caKey), Kubeconfig: []byte(kubecfg), Talosconfig: []byte(talcfg)}
}

func TestRoundTrip(t *testing.T) {
	var warn bytes.Buffer
	s := newStore(t, &warn)
	if err := s.Save(contents(), pass); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(fixed(pass))
	if err != nil {
		t.Fatal(err)
	}
	want := contents()
	if !bytes.Equal(got.Bundle, want.Bundle) || !bytes.Equal(got.Kubeconfig, want.Kubeconfig) || !bytes.Equal(got.Talosconfig, want.Talosconfig) {
		t.Fatalf("round trip changed the contents: %+v", got)
	}
	if warn.Len() != 0 {
		t.Fatalf("an encrypted store loads without warnings, got %q", warn.String())
	}
}

func TestFileModesAndNoPlaintextOnDisk(t *testing.T) {
	s := newStore(t, nil)
	if err := s.Save(contents(), pass); err != nil {
		t.Fatal(err)
	}
	di, err := os.Stat(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %04o, want 0700", di.Mode().Perm())
	}
	home, _ := Home()
	secrets := []string{pass, "c2VjcmV0LWNhLWtleQ", "kube-token-123", "talos-key-456"}
	n := 0
	err = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", path, fi.Mode().Perm())
		}
		if !strings.HasSuffix(path, EncryptedSuffix) {
			t.Errorf("%s is not encrypted", path)
		}
		data, err := os.ReadFile(path) //nolint:gosec // a test directory of its own
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(data, []byte("age-encryption.org/v1\n")) {
			t.Errorf("%s is not an age file", path)
		}
		for _, sec := range secrets {
			if bytes.Contains(data, []byte(sec)) {
				t.Errorf("%s contains %q in the clear", path, sec)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(Files) {
		t.Fatalf("%d files under %s, want %d", n, home, len(Files))
	}
}

func TestWrongPassphraseSaysSo(t *testing.T) {
	s := newStore(t, nil)
	if err := s.Save(contents(), pass); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read(FileKubeconfig, fixed("not the passphrase"))
	if !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("want ErrWrongPassphrase, got %v", err)
	}
	if !strings.Contains(err.Error(), "wrong passphrase") || !strings.Contains(err.Error(), "--passphrase-file") {
		t.Fatalf("the error must say the passphrase is wrong and where it comes from: %q", err)
	}
	if strings.Contains(err.Error(), "not the passphrase") {
		t.Fatalf("the error quotes the passphrase: %q", err)
	}
}

func TestPassphraseAskedOnlyForEncryptedFiles(t *testing.T) {
	s := newStore(t, &bytes.Buffer{})
	writePlain(t, s, FileKubeconfig, kubecfg)
	asked := false
	if _, err := s.Read(FileKubeconfig, func() (string, error) { asked = true; return pass, nil }); err != nil {
		t.Fatal(err)
	}
	if asked {
		t.Fatal("a plaintext file needs no passphrase, yet one was asked for")
	}
}

func writePlain(t *testing.T, s *Store, name, data string) {
	t.Helper()
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, name), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPlaintextLoadsWithWarningAndEncryptMigrates(t *testing.T) {
	var warn bytes.Buffer
	s := newStore(t, &warn)
	c := contents()
	writePlain(t, s, FileBundle, string(c.Bundle))
	writePlain(t, s, FileKubeconfig, kubecfg)
	writePlain(t, s, FileTalosconfig, talcfg)

	got, err := s.Load(fixed(pass))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Kubeconfig, []byte(kubecfg)) {
		t.Fatal("the plaintext kubeconfig did not load")
	}
	if !strings.Contains(warn.String(), "stored unencrypted") || !strings.Contains(warn.String(), "ichor secrets encrypt --cluster prod") {
		t.Fatalf("loading plaintext must warn and name the migration command, got %q", warn.String())
	}

	done, err := s.Encrypt(pass)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 3 {
		t.Fatalf("encrypted %v, want all three files", done)
	}
	st, err := s.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st {
		if !f.Encrypted || f.Plaintext {
			t.Fatalf("after the migration %s: %+v", f.Name, f)
		}
	}
	warn.Reset()
	got, err = s.Load(fixed(pass))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Talosconfig, []byte(talcfg)) || warn.Len() != 0 {
		t.Fatalf("after the migration the store must load cleanly: %q", warn.String())
	}
}

func TestEncryptRefusesAnotherPassphraseThanTheStores(t *testing.T) {
	s := newStore(t, nil)
	if err := s.Save(Contents{Kubeconfig: []byte(kubecfg)}, pass); err != nil {
		t.Fatal(err)
	}
	writePlain(t, s, FileTalosconfig, talcfg)
	if _, err := s.Encrypt("another passphrase"); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("encrypting under another passphrase must be refused, got %v", err)
	}
	if st, _ := s.Status(); !st[2].Plaintext || st[2].Encrypted {
		t.Fatalf("a refused migration must write nothing: %+v", st[2])
	}
}

func TestLooseModeWarns(t *testing.T) {
	var warn bytes.Buffer
	s := newStore(t, &warn)
	if err := s.Save(Contents{Kubeconfig: []byte(kubecfg)}, pass); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(s.Dir, FileKubeconfig+EncryptedSuffix), 0o644); err != nil { //nolint:gosec // loosened on purpose
		t.Fatal(err)
	}
	if _, err := s.Read(FileKubeconfig, fixed(pass)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "chmod 600") {
		t.Fatalf("a file readable by others must be warned about, got %q", warn.String())
	}
}

func TestMissingStoreSaysWhere(t *testing.T) {
	s := newStore(t, nil)
	_, err := s.Load(fixed(pass))
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), s.Dir) {
		t.Fatalf("want ErrNotFound naming %s, got %v", s.Dir, err)
	}
}

func TestBadClusterName(t *testing.T) {
	if _, err := Open("../etc", nil); err == nil || !strings.Contains(err.Error(), "not valid") {
		t.Fatalf("a path-like cluster name must be refused, got %v", err)
	}
}

func TestPassphraseFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pass")
	if err := os.WriteFile(p, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPassphraseFile(p)
	if err != nil || got != pass {
		t.Fatalf("got %q, %v", got, err)
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPassphraseFile(p); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("an empty passphrase file must be refused, got %v", err)
	}
	if a, b := GeneratePassphrase(), GeneratePassphrase(); a == b || len(a) < 20 {
		t.Fatalf("generated passphrases must be long and distinct: %q %q", a, b)
	}
}
