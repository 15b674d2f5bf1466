package commands

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/maeshinshin/ichor/cli/internal/adoptflow"
	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/output"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

// adoptWrite is phase 2 of `ichor adopt`, after the plan printed: the
// person's consent (the cluster's name typed, or --yes), then adoptflow.Write.
func (r *run) adoptWrite(ctx context.Context, cmd *cli.Command, p *adopt.Plan, b *secrets.Bundle, talosconfig []byte) error {
	if p.Cluster.CNIPreset == ichorv1alpha1.CNIPresetCilium && p.CiliumTakeover == nil && p.CiliumInstall == nil {
		return errors.New("the plan has no check of the running Cilium: nothing was written; run `ichor adopt --plan` to see why")
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

	for _, f := range append([]string{flagAddMachine}, planOnlyFlags...) {
		if cmd.IsSet(f) {
			return fmt.Errorf("--%s is not a flag of --release (which reads the cluster's resources, and its nodes with the cluster's bundle)", f)
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

// flagAddMachine is `ichor adopt --add-machine ADDRESS`.
const flagAddMachine = "add-machine"

// planOnlyFlags belong to the plan and the write of a whole cluster.
var planOnlyFlags = []string{flagPlan, flagTalosconfig, flagNode, "secrets-bundle", "recover-secrets", "recover-from", "version-contract", "cni-unmanaged",
	flagAcceptCiliumDiff, flagAcceptCiliumChanges,
	flagInstall, flagInstallerImage, flagWriteKubeconfig, flagGeneratePassphrase}

// adoptAddMachine is `ichor adopt --cluster NAME --add-machine ADDRESS`:
// the read-only plan of each machine, the consent, the held TalosMachines.
func adoptAddMachine(ctx context.Context, cmd *cli.Command) error {
	name := cmd.String(flagCluster)
	if name == "" {
		return errors.New("--add-machine needs --cluster NAME: the TalosCluster the machine belongs to")
	}

	for _, f := range planOnlyFlags {
		if cmd.IsSet(f) {
			return fmt.Errorf("--%s belongs to the adoption of a whole cluster, not to --add-machine (which reads the machine with the cluster's own credentials)", f)
		}
	}

	addrs := cmd.StringSlice(flagAddMachine)
	for _, a := range addrs {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("--add-machine %q is not an IP address; give the address the machine's Talos API answers on", a)
		}
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	add, err := adoptflow.PlanAdditions(ctx, r.conn, adoptflow.AddOptions{Cluster: name, Addresses: addrs, TalosPort: cmd.Int(flagTalosPort)})
	if err != nil {
		return err
	}

	r.printf("Machines to register with cluster %s (read with the cluster's credentials; nothing was written)\n\n", name)

	t := output.Rows{Header: []string{colAddress, "HOSTNAME", colRole, colTalos, "A", "B", "C", colStatus}}
	for _, a := range add.Additions {
		st := "adoptable"
		if a.Blocked {
			st = "blocked"
		}

		t.Add(a.Address, a.Hostname, a.Role, a.TalosVersion, strconv.Itoa(adopt.Count(a.Drift, adopt.ClassRepresentable)),
			strconv.Itoa(adopt.Count(a.Drift, adopt.ClassIchorOwned)), strconv.Itoa(adopt.Count(a.Drift, adopt.ClassBlocking)), st)
	}

	if err := t.Write(r.out); err != nil {
		return err
	}

	for _, a := range add.Additions {
		r.printMachineDrift(a.MachinePlan)
	}

	if blocked := add.Blocked(); len(blocked) > 0 {
		return fmt.Errorf("%v blocked by class C drift: nothing was written; make each match what Ichor renders (the paths above), then run the command again", blocked)
	}

	if err := r.confirm(fmt.Sprintf("\nRegistering %d machine(s) with cluster %s writes their TalosMachines, held; nothing is sent to a node until `ichor adopt --release`.",
		len(add.Additions), name), name); err != nil {
		return err
	}

	if err := adoptflow.WriteAdditions(ctx, r.conn, add, r.progress()); err != nil {
		return err
	}

	r.printf("\nRegistered and held. Release them, one at a time, with\n  ichor adopt --release --cluster %s\n", name)

	return nil
}
