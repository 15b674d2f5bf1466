// Package secretstore keeps a cluster's secrets on the operator's machine:
// the Talos secrets bundle, the admin kubeconfig and the os:admin talosconfig,
// in ~/.ichor/clusters/<name>/ (or $ICHOR_HOME/clusters/<name>/). They are the
// recovery path that needs no controller.
//
// Each file is encrypted on its own with age under a passphrase (an scrypt
// recipient), so `age -d kubeconfig.age` recovers it without Ichor. The
// directory is mode 0700 and the files 0600. The passphrase is never stored:
// it comes from a file, an environment variable or a terminal prompt each
// time, or is generated once and shown to the person.
//
// A plaintext file left by an earlier version still loads, with a warning;
// Encrypt migrates it (`ichor secrets encrypt`).
package secretstore

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"filippo.io/age"
	"golang.org/x/term"
)

// Environment variables the store reads.
const (
	// HomeEnv overrides the Ichor home directory (default ~/.ichor).
	HomeEnv = "ICHOR_HOME"
	// PassphraseEnv holds the passphrase, for scripts.
	PassphraseEnv = "ICHOR_PASSPHRASE"
)

// The files of a cluster's directory, without the encryption suffix.
const (
	// FileBundle is the Talos secrets bundle YAML (as `talosctl gen secrets` writes it).
	FileBundle = "secrets.yaml"
	// FileKubeconfig is the admin kubeconfig.
	FileKubeconfig = "kubeconfig"
	// FileTalosconfig is the os:admin talosconfig.
	FileTalosconfig = "talosconfig"
	// EncryptedSuffix ends the name of an encrypted file.
	EncryptedSuffix = ".age"
)

// Files are the file names the store keeps, in a fixed order.
var Files = []string{FileBundle, FileKubeconfig, FileTalosconfig}

const (
	dirMode  fs.FileMode = 0o700
	fileMode fs.FileMode = 0o600
)

// ErrWrongPassphrase is wrapped by the error of a decryption whose passphrase is not the file's.
var ErrWrongPassphrase = errors.New("wrong passphrase")

// ErrNotFound is wrapped when the store has no such file, encrypted or not.
var ErrNotFound = errors.New("not in the secrets store")

// Passphrase returns the passphrase when it is first needed. Implementations
// read a file, an environment variable or a terminal; nothing stores it.
type Passphrase func() (string, error)

// Contents is what the store keeps for one cluster. An empty field is not written.
type Contents struct {
	// Bundle is the Talos secrets bundle YAML.
	Bundle []byte
	// Kubeconfig is the admin kubeconfig.
	Kubeconfig []byte
	// Talosconfig is the os:admin talosconfig.
	Talosconfig []byte
}

func (c *Contents) field(name string) *[]byte {
	switch name {
	case FileBundle:
		return &c.Bundle
	case FileKubeconfig:
		return &c.Kubeconfig
	default:
		return &c.Talosconfig
	}
}

// Store is the directory of one cluster.
type Store struct {
	// Cluster is the cluster's name.
	Cluster string
	// Dir is the directory, ~/.ichor/clusters/<name>.
	Dir string
	// Warn receives warnings (plaintext files, loose modes); nil discards them.
	Warn io.Writer
	// WorkFactor is the scrypt work factor (log2 N) for encryption; zero means
	// age's default (18). Tests lower it.
	WorkFactor int
}

// Home returns the Ichor home directory: $ICHOR_HOME, else ~/.ichor.
func Home() (string, error) {
	if h := os.Getenv(HomeEnv); h != "" {
		return h, nil
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find the home directory (%w): set %s to the directory Ichor keeps its files in", err, HomeEnv)
	}
	return filepath.Join(u, ".ichor"), nil
}

var clusterName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Open returns the store of cluster under Home. It creates nothing.
func Open(cluster string, warn io.Writer) (*Store, error) {
	if !clusterName.MatchString(cluster) {
		return nil, fmt.Errorf("cluster name %q is not valid: use the TalosCluster's name (lower-case letters, digits and '-')", cluster)
	}
	home, err := Home()
	if err != nil {
		return nil, err
	}
	return &Store{Cluster: cluster, Dir: filepath.Join(home, "clusters", cluster), Warn: warn}, nil
}

func (s *Store) warnf(format string, args ...any) {
	if s.Warn != nil {
		_, _ = fmt.Fprintf(s.Warn, "warning: "+format+"\n", args...)
	}
}

// FileState says how one file is stored.
type FileState struct {
	// Name is the file name without the encryption suffix.
	Name string `json:"name"`
	// Encrypted is true when the .age file exists.
	Encrypted bool `json:"encrypted"`
	// Plaintext is true when the unencrypted file exists.
	Plaintext bool `json:"plaintext"`
}

// Status reports which files exist and how.
func (s *Store) Status() ([]FileState, error) {
	out := make([]FileState, 0, len(Files))
	for _, name := range Files {
		enc, err := exists(filepath.Join(s.Dir, name+EncryptedSuffix))
		if err != nil {
			return nil, err
		}
		plain, err := exists(filepath.Join(s.Dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, FileState{Name: name, Encrypted: enc, Plaintext: plain})
	}
	return out, nil
}

// Exists reports whether the store holds any file.
func (s *Store) Exists() (bool, error) {
	st, err := s.Status()
	if err != nil {
		return false, err
	}
	for _, f := range st {
		if f.Encrypted || f.Plaintext {
			return true, nil
		}
	}
	return false, nil
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// Save encrypts every non-empty part of c under the passphrase and writes it,
// replacing what was there; a plaintext copy of a written file is removed.
func (s *Store) Save(c Contents, passphrase string) error {
	rcpt, err := s.recipient(passphrase)
	if err != nil {
		return err
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	for _, name := range Files {
		data := *c.field(name)
		if len(data) == 0 {
			continue
		}
		if err := s.writeEncrypted(name, data, rcpt); err != nil {
			return err
		}
		if err := removeIfExists(filepath.Join(s.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// Read returns one file's content (FileBundle, FileKubeconfig or
// FileTalosconfig). The passphrase is asked for only when the file is
// encrypted; a plaintext file loads with a warning.
func (s *Store) Read(name string, passphrase Passphrase) ([]byte, error) {
	encPath := filepath.Join(s.Dir, name+EncryptedSuffix)
	plainPath := filepath.Join(s.Dir, name)
	enc, err := exists(encPath)
	if err != nil {
		return nil, err
	}
	if enc {
		s.checkMode(encPath)
		if ok, _ := exists(plainPath); ok {
			s.warnf("%s is also stored unencrypted; run `ichor secrets encrypt --cluster %s` to remove the plaintext copy", plainPath, s.Cluster)
		}
		pass, err := passphrase()
		if err != nil {
			return nil, err
		}
		return s.decryptFile(encPath, pass)
	}
	plain, err := exists(plainPath)
	if err != nil {
		return nil, err
	}
	if !plain {
		return nil, fmt.Errorf("%s: %w of cluster %q (%s)", name, ErrNotFound, s.Cluster, s.Dir)
	}
	s.checkMode(plainPath)
	s.warnf("%s is stored unencrypted; run `ichor secrets encrypt --cluster %s` to encrypt it", plainPath, s.Cluster)
	data, err := os.ReadFile(plainPath)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// Load reads every file the store holds; a missing file is left empty.
func (s *Store) Load(passphrase Passphrase) (Contents, error) {
	var c Contents
	found := false
	for _, name := range Files {
		data, err := s.Read(name, passphrase)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Contents{}, err
		}
		*c.field(name) = data
		found = true
	}
	if !found {
		return Contents{}, fmt.Errorf("cluster %q has no secrets in %s: %w", s.Cluster, s.Dir, ErrNotFound)
	}
	return c, nil
}

// Encrypt migrates plaintext files to encrypted ones under the passphrase
// and removes the plaintext. When some files are already encrypted, the
// passphrase must open them, so that one passphrase opens the whole store. It
// returns the names of the files it encrypted.
func (s *Store) Encrypt(passphrase string) ([]string, error) {
	st, err := s.Status()
	if err != nil {
		return nil, err
	}
	rcpt, err := s.recipient(passphrase)
	if err != nil {
		return nil, err
	}
	// Check the passphrase against an existing encrypted file before writing anything.
	for _, f := range st {
		if f.Encrypted {
			if _, err := s.decryptFile(filepath.Join(s.Dir, f.Name+EncryptedSuffix), passphrase); err != nil {
				return nil, fmt.Errorf("%w: the store already holds encrypted files, and the passphrase must be theirs", err)
			}
			break
		}
	}
	var done []string
	for _, f := range st {
		if !f.Plaintext {
			continue
		}
		plainPath := filepath.Join(s.Dir, f.Name)
		data, err := os.ReadFile(plainPath)
		if err != nil {
			return done, err
		}
		if f.Encrypted {
			cur, err := s.decryptFile(plainPath+EncryptedSuffix, passphrase)
			if err != nil {
				return done, err
			}
			if !bytes.Equal(cur, data) {
				return done, fmt.Errorf("%s and %s both exist and differ: move the one you do not want out of %s, then run the command again",
					plainPath, plainPath+EncryptedSuffix, s.Dir)
			}
		} else if err := s.writeEncrypted(f.Name, data, rcpt); err != nil {
			return done, err
		}
		if err := os.Remove(plainPath); err != nil {
			return done, err
		}
		done = append(done, f.Name)
	}
	if err := os.Chmod(s.Dir, dirMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return done, err
	}
	return done, nil
}

// PromptPassphrase reads the passphrase of an existing store: from file when
// one is named, else $ICHOR_PASSPHRASE, else a prompt on the terminal in
// (written to prompt). Nothing keeps it.
func PromptPassphrase(file string, in *os.File, prompt io.Writer) Passphrase {
	return func() (string, error) {
		if file != "" {
			return ReadPassphraseFile(file)
		}
		if p := os.Getenv(PassphraseEnv); p != "" {
			return p, nil
		}
		fd := int(in.Fd())
		if !term.IsTerminal(fd) {
			return "", fmt.Errorf("the file is encrypted and no passphrase was given: pass --passphrase-file FILE or set %s", PassphraseEnv)
		}
		_, _ = fmt.Fprint(prompt, "Passphrase: ")
		b, err := term.ReadPassword(fd)
		_, _ = fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("reading the passphrase: %w", err)
		}
		return string(b), nil
	}
}

// GeneratePassphrase returns a new random passphrase (128 bits).
func GeneratePassphrase() string {
	return rand.Text()
}

// ReadPassphraseFile reads a passphrase from a file; one trailing newline is dropped.
func ReadPassphraseFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the passphrase file: %w", err)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
	if p == "" {
		return "", fmt.Errorf("the passphrase file %s is empty: write the passphrase into it", path)
	}
	return p, nil
}

func (s *Store) recipient(passphrase string) (*age.ScryptRecipient, error) {
	if passphrase == "" {
		return nil, errors.New("the passphrase is empty: give one with --passphrase-file, " + PassphraseEnv + " or at the prompt")
	}
	r, err := age.NewScryptRecipient(passphrase)
	if err != nil {
		return nil, err
	}
	if s.WorkFactor > 0 {
		r.SetWorkFactor(s.WorkFactor)
	}
	return r, nil
}

func (s *Store) ensureDir() error {
	if err := os.MkdirAll(s.Dir, dirMode); err != nil {
		return err
	}
	return os.Chmod(s.Dir, dirMode)
}

func (s *Store) writeEncrypted(name string, data []byte, rcpt age.Recipient) error {
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, rcpt)
	if err != nil {
		return fmt.Errorf("encrypting %s: %w", name, err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("encrypting %s: %w", name, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("encrypting %s: %w", name, err)
	}
	return WriteFileAtomic(filepath.Join(s.Dir, name+EncryptedSuffix), buf.Bytes())
}

func (s *Store) decryptFile(path, passphrase string) ([]byte, error) {
	id, err := age.NewScryptIdentity(passphrase)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, ErrWrongPassphrase)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	r, err := age.Decrypt(f, id)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) || errors.Is(err, age.ErrIncorrectIdentity) {
			return nil, fmt.Errorf("%w for %s: the passphrase does not open it; check --passphrase-file or %s", ErrWrongPassphrase, path, PassphraseEnv)
		}
		return nil, fmt.Errorf("%s is not a readable age file: %w", path, err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", path, err)
	}
	return data, nil
}

func (s *Store) checkMode(path string) {
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if fi.Mode().Perm()&0o077 != 0 {
		s.warnf("%s is readable by others (mode %04o); run `chmod 600 %s`", path, fi.Mode().Perm(), path)
	}
}

// WriteFileAtomic writes data to path, mode 0600, whole or not at all: a
// temporary file beside it, synced, then renamed over it.
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer func() { _ = os.Remove(name) }()
	if err := tmp.Chmod(fileMode); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(name, path)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
