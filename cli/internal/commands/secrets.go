package commands

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/maeshinshin/ichor/cli/internal/output"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
)

func secretsCommand() *cli.Command {
	clusterFlag := &cli.StringFlag{Name: flagCluster, Usage: "cluster `NAME` (the directory ~/.ichor/clusters/NAME)", Required: true}
	passFlag := &cli.StringFlag{Name: flagPassphraseFile, Usage: "read the passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true}
	return &cli.Command{
		Name:   "secrets",
		Usage:  "the secrets kept on this machine: bundle, admin kubeconfig and os:admin talosconfig (~/.ichor/clusters/NAME)",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:   "status",
				Usage:  "which files the store holds, and whether they are encrypted",
				Flags:  []cli.Flag{clusterFlag},
				Action: secretsStatus,
			},
			{
				Name:      "export",
				Usage:     "write one file of the store, decrypted, to a new file of mode 0600 (the recovery path that needs no controller)",
				ArgsUsage: secretstore.FileBundle + "|" + secretstore.FileKubeconfig + "|" + secretstore.FileTalosconfig,
				Flags: []cli.Flag{
					clusterFlag, passFlag,
					&cli.StringFlag{Name: "out", Usage: "`FILE` to write; it must not exist", Required: true, TakesFile: true},
				},
				Action: secretsExport,
			},
			{
				Name:  "encrypt",
				Usage: "encrypt plaintext files left by an earlier version with age, under a passphrase; the plaintext is removed",
				Flags: []cli.Flag{
					clusterFlag, passFlag,
					&cli.BoolFlag{Name: flagGeneratePassphrase, Usage: "generate the passphrase and show it once"},
				},
				Action: secretsEncrypt,
			},
		},
	}
}

func secretsStatus(_ context.Context, cmd *cli.Command) error {
	r, err := newRun(cmd)
	if err != nil {
		return err
	}
	s, err := secretstore.Open(cmd.String(flagCluster), r.errOut)
	if err != nil {
		return err
	}
	st, err := s.Status()
	if err != nil {
		return err
	}
	if r.format != output.Table {
		return output.Object(r.out, r.format, struct {
			Dir   string                  `json:"dir"`
			Files []secretstore.FileState `json:"files"`
		}{s.Dir, st})
	}
	r.printf("%s\n", s.Dir)
	t := &output.Rows{Header: []string{"FILE", "STORED"}}
	plain := false
	for _, f := range st {
		state := "missing"
		switch {
		case f.Encrypted && f.Plaintext:
			state, plain = "encrypted, and a plaintext copy", true
		case f.Encrypted:
			state = "encrypted"
		case f.Plaintext:
			state, plain = "plaintext", true
		}
		t.Add(f.Name, state)
	}
	if err := t.Write(r.out); err != nil {
		return err
	}
	if plain {
		r.printf("\nRun `ichor secrets encrypt --cluster %s` to encrypt the plaintext files.\n", s.Cluster)
	}
	return nil
}

func secretsEncrypt(_ context.Context, cmd *cli.Command) error {
	r, err := newRun(cmd)
	if err != nil {
		return err
	}
	s, err := secretstore.Open(cmd.String(flagCluster), r.errOut)
	if err != nil {
		return err
	}
	st, err := s.Status()
	if err != nil {
		return err
	}
	var plain, encrypted bool
	for _, f := range st {
		plain = plain || f.Plaintext
		encrypted = encrypted || f.Encrypted
	}
	if !plain {
		if encrypted {
			r.printf("everything in %s is already encrypted; nothing to do\n", s.Dir)
			return nil
		}
		return fmt.Errorf("%s holds no secrets of cluster %s: check --cluster and %s", s.Dir, s.Cluster, secretstore.HomeEnv)
	}
	pass, generated, err := r.newPassphrase(cmd, !encrypted)
	if err != nil {
		return err
	}
	done, err := s.Encrypt(pass)
	if err != nil {
		return err
	}
	if generated {
		// Shown once, on the terminal's error stream, never stored.
		_, _ = fmt.Fprintf(r.errOut, "\nThe generated passphrase (shown only now; Ichor does not keep it, store it in your password manager):\n\n    %s\n\n", pass)
	}
	r.printf("encrypted %s in %s\n", strings.Join(done, ", "), s.Dir)
	return nil
}

// newPassphrase gets the passphrase for encryption: --passphrase-file,
// $ICHOR_PASSPHRASE, --generate-passphrase, or a terminal prompt (asked twice
// when it is new; an empty answer generates one).
func (r *run) newPassphrase(cmd *cli.Command, isNew bool) (pass string, generated bool, err error) {
	if f := cmd.String(flagPassphraseFile); f != "" {
		p, err := secretstore.ReadPassphraseFile(f)
		return p, false, err
	}
	if p := os.Getenv(secretstore.PassphraseEnv); p != "" {
		return p, false, nil
	}
	if cmd.Bool(flagGeneratePassphrase) {
		if !isNew {
			return "", false, errors.New("the store already holds encrypted files: give their passphrase instead of generating one")
		}
		return secretstore.GeneratePassphrase(), true, nil
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", false, fmt.Errorf("no passphrase: pass --passphrase-file FILE, set %s, or pass --generate-passphrase (standard input is not a terminal to ask on)",
			secretstore.PassphraseEnv)
	}
	prompt := "Passphrase: "
	if isNew {
		prompt = "New passphrase (empty to generate one): "
	}
	p, err := readSecret(fd, r, prompt)
	if err != nil {
		return "", false, err
	}
	if p == "" {
		if !isNew {
			return "", false, errors.New("no passphrase given")
		}
		return secretstore.GeneratePassphrase(), true, nil
	}
	if isNew {
		again, err := readSecret(fd, r, "Again: ")
		if err != nil {
			return "", false, err
		}
		if again != p {
			return "", false, errors.New("the two passphrases differ; nothing was changed")
		}
	}
	return p, false, nil
}

func readSecret(fd int, r *run, prompt string) (string, error) {
	_, _ = fmt.Fprint(r.errOut, prompt)
	b, err := term.ReadPassword(fd)
	_, _ = fmt.Fprintln(r.errOut)
	if err != nil {
		return "", fmt.Errorf("reading the passphrase: %w", err)
	}
	return string(b), nil
}

func secretsExport(_ context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one of "+strings.Join(secretstore.Files, ", ")); err != nil {
		return err
	}
	name := cmd.Args().First()
	if !slices.Contains(secretstore.Files, name) {
		return fmt.Errorf("%q is not a file of the store: use one of %s", name, strings.Join(secretstore.Files, ", "))
	}
	r, err := newRun(cmd)
	if err != nil {
		return err
	}
	s, err := secretstore.Open(cmd.String(flagCluster), r.errOut)
	if err != nil {
		return err
	}
	data, err := s.Read(name, secretstore.PromptPassphrase(cmd.String(flagPassphraseFile), os.Stdin, r.errOut))
	if err != nil {
		return err
	}
	out := cmd.String("out")
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s exists: remove it or pick another --out", out)
		}
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	r.printf("wrote %s of cluster %s to %s (mode 0600)\n", name, s.Cluster, out)
	return nil
}
