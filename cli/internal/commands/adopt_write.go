package commands

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/maeshinshin/ichor/cli/internal/adoptflow"
	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

// adoptWrite is phase 2 of `ichor adopt`, after the plan printed: the
// person's consent (the cluster's name typed, or --yes), then adoptflow.Write.
func (r *run) adoptWrite(ctx context.Context, cmd *cli.Command, p *adopt.Plan, b *secrets.Bundle, talosconfig []byte) error {
	if p.Cluster.CNIPreset != ichorv1alpha1.CNIPresetUnmanaged {
		return errCiliumTakeoverUnavailable
	}

	switch m := cmd.String(flagInstall); m {
	case initflow.InstallManifest, initflow.InstallNone:
	default:
		return fmt.Errorf("--install %q: give manifest (the installer Job installs Ichor in the cluster) or none (only its CRDs; the controller runs elsewhere)", m)
	}

	ns := cmd.String(flagNamespace)
	if ns == "" {
		ns = initflow.DefaultNamespace
	}

	objs, err := p.Objects(ns)
	if err != nil {
		return err
	}

	if err := r.confirmAdoption(p, objs); err != nil {
		return err
	}

	store, err := secretstore.Open(p.Cluster.Name, r.errOut)
	if err != nil {
		return err
	}

	return adoptflow.Write(ctx, p, objs, adoptflow.Options{
		Namespace: ns, Install: cmd.String(flagInstall), InstallerImage: cmd.String(flagInstallerImage),
		WriteKubeconfig: cmd.String(flagWriteKubeconfig), TalosPort: cmd.Int(flagTalosPort), Talosconfig: talosconfig, Bundle: b,
	}, adoptflow.Env{
		Store:         store,
		Passphrase:    secretstore.PromptPassphrase(cmd.String(flagPassphraseFile), os.Stdin, r.errOut),
		NewPassphrase: func() (string, bool, error) { return r.newPassphrase(cmd, true) },
		Progress:      r.progress(),
		Out:           r.out,
		Version:       version.Get().Version,
	})
}

// confirmAdoption asks for the cluster's name after the plan: the consent to
// the class B differences the first render changes.
func (r *run) confirmAdoption(p *adopt.Plan, objs *adopt.Objects) error {
	owned := 0
	for _, m := range p.Machines {
		owned += adopt.Count(m.Drift, adopt.ClassIchorOwned)
	}

	prompt := fmt.Sprintf("\nAdopting cluster %s writes its bundle Secret, the TalosCluster, %d TalosConfigPatch(es) and %d TalosMachine(s), each held; "+
		"nothing is sent to a node until `ichor adopt --release`.", p.Cluster.Name, len(objs.Patches), len(objs.Machines))
	if owned > 0 {
		prompt += fmt.Sprintf(" Once released, the first render changes the %d Ichor-owned (B) value(s) listed above.", owned)
	}

	if len(objs.Skipped) > 0 {
		prompt += fmt.Sprintf(" Left out (blocked): %v.", objs.Skipped)
	}

	return r.confirm(prompt, p.Cluster.Name)
}

// progress is the steps' display on standard error.
func (r *run) progress() *initflow.Progress {
	tty := false
	if f, ok := r.errOut.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}

	return initflow.NewProgress(r.errOut, tty)
}

// adoptRelease is `ichor adopt --release --cluster NAME`.
func adoptRelease(ctx context.Context, cmd *cli.Command) error {
	name := cmd.String(flagCluster)
	if name == "" {
		return errors.New("--release needs --cluster NAME: the adopted TalosCluster whose machines to release")
	}

	for _, f := range []string{"plan", flagTalosconfig, flagNode, "secrets-bundle", "recover-secrets", "version-contract", "cni-unmanaged"} {
		if cmd.IsSet(f) {
			return fmt.Errorf("--%s belongs to the plan and the write, not to --release (which reads the cluster's resources and its nodes with the bundle)", f)
		}
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	return adoptflow.Release(ctx, r.conn, adoptflow.ReleaseOptions{
		Cluster: name, TalosPort: cmd.Int(flagTalosPort), Timeout: cmd.Duration(flagTimeout),
	}, r.progress(), r.out)
}
