package commands

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

func initCommand() *cli.Command {
	return &cli.Command{
		Name:  "init",
		Usage: "create a cluster from its first control plane in maintenance mode: secrets bundle, configuration with Cilium, etcd bootstrap, Ichor",
		Description: "init generates the cluster's secrets bundle into ~/.ichor/clusters/NAME (encrypted; back it up), sends the first control plane\n" +
			"its configuration over the maintenance connection with the certificate fingerprint pinned, bootstraps etcd, stores the admin\n" +
			"kubeconfig and the os:admin talosconfig, installs Ichor and creates the cluster's resources. Run it again after a failure:\n" +
			"it continues from what exists and never generates a second bundle.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagCluster, Value: "ichor", Usage: "cluster `NAME` (the TalosCluster and ~/.ichor/clusters/NAME)"},
			&cli.StringFlag{Name: "preset", Usage: "topology `PRESET` (required without the form): " + strings.Join(initflow.Presets, ", ") +
				" (single: 1 schedulable control plane; compact-ha: 3 schedulable; standard: 3 + workers; large: 5 + workers)"},
			&cli.StringFlag{Name: "cni-tunnel", Value: "vxlan", Usage: "Cilium's tunnel `PROTOCOL`: vxlan or geneve (immutable)"},
			&cli.StringFlag{Name: "ui-url", Usage: "https `URL` browsers reach ichor-ui at (for Ichor's own users)"},
			&cli.StringFlag{Name: flagNode, Usage: "`ADDRESS` of the first control plane, booted in maintenance mode (required)"},
			&cli.IntFlag{Name: flagTalosPort, Usage: "Talos API `PORT` of the node (default 50000)"},
			&cli.StringFlag{Name: "node-fingerprint", Usage: "pin the node's maintenance certificate `FINGERPRINT` (its console shows it; default: trust the first one seen)"},
			&cli.StringFlag{Name: "install-disk", Usage: "system disk `SELECTOR`: " + selectorSyntax + " (default: the node's disk, keyed on its most stable attribute)"},
			&cli.BoolFlag{Name: "confirm-wipe", Usage: "confirm that the install disk may be wiped although it holds partitions"},
			&cli.StringFlag{Name: "endpoint", Usage: "`HOST` of the Kubernetes API endpoint (default: the node's address)"},
			&cli.StringFlag{Name: "endpoint-type", Usage: "`TYPE` of the endpoint: node, vip or loadBalancer (default: node when the host is the node's address, else vip)"},
			&cli.IntFlag{Name: "endpoint-port", Usage: "`PORT` of the Kubernetes API (default 6443)"},
			&cli.StringFlag{Name: "talos-version", Usage: "Talos `VERSION` the cluster installs (default: this release's)"},
			&cli.StringFlag{Name: "kubernetes-version", Usage: "Kubernetes `VERSION` (default: this release's)"},
			&cli.StringFlag{Name: "cilium-version", Usage: "Cilium chart `VERSION` to boot, one this Ichor embeds (" + strings.Join(release.CiliumVersions(), ", ") +
				"; default " + release.DefaultCiliumVersion + "); `ichor cni upgrade` moves it later"},
			&cli.StringFlag{Name: flagInstall, Value: initflow.InstallManifest, Usage: "`MODE`: manifest (the installer Job installs Ichor in the cluster) or none (only its CRDs; the controller runs elsewhere)"},
			&cli.StringFlag{Name: flagInstallerImage, Usage: "the installer Job's `IMAGE` (default: this release's, " + install.InstallerRepository + ":<version>)"},
			&cli.BoolFlag{Name: "wait", Value: true, Usage: "wait for the controller to take over the first control plane"},
			&cli.DurationFlag{Name: flagTimeout, Value: 15 * time.Minute, Usage: "how long each wait lasts"},
			&cli.StringFlag{Name: flagWriteKubeconfig, Usage: "also write the admin kubeconfig to `FILE` (mode 0600)", TakesFile: true},
			&cli.StringFlag{Name: flagPassphraseFile, Usage: "read the secrets store's passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true},
			&cli.BoolFlag{Name: flagGeneratePassphrase, Usage: "generate the passphrase of a new secrets store and show it once"},
			&cli.BoolFlag{Name: "interactive", Usage: "ask for the settings the flags leave out (the default on a terminal when --preset or --node is missing)"},
		},
		Action: initAction,
	}
}

func initAction(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return requireOneArg(cmd, "no arguments (the first node is --node ADDRESS)")
	}

	r, err := newRun(cmd)
	if err != nil {
		return err
	}

	o := initflow.Options{
		Cluster:           cmd.String(flagCluster),
		Namespace:         cmd.String(flagNamespace),
		Preset:            cmd.String("preset"),
		Tunnel:            cmd.String("cni-tunnel"),
		UIURL:             cmd.String("ui-url"),
		Node:              cmd.String(flagNode),
		TalosPort:         cmd.Int(flagTalosPort),
		Fingerprint:       cmd.String("node-fingerprint"),
		ConfirmWipe:       cmd.Bool("confirm-wipe"),
		Endpoint:          cmd.String("endpoint"),
		EndpointType:      cmd.String("endpoint-type"),
		EndpointPort:      int32(cmd.Int("endpoint-port")), //nolint:gosec // Validate checks the range
		TalosVersion:      cmd.String("talos-version"),
		KubernetesVersion: cmd.String("kubernetes-version"),
		CiliumVersion:     cmd.String("cilium-version"),
		Install:           cmd.String(flagInstall),
		InstallerImage:    cmd.String(flagInstallerImage),
		Wait:              cmd.Bool("wait"),
		Timeout:           cmd.Duration(flagTimeout),
		WriteKubeconfig:   cmd.String(flagWriteKubeconfig),
	}

	if d := cmd.String("install-disk"); d != "" {
		sel, err := parseDiskSelector(d)
		if err != nil {
			return err
		}

		o.InstallDisk = &sel
	}

	stdinTTY := term.IsTerminal(int(os.Stdin.Fd()))
	if cmd.Bool("interactive") || (stdinTTY && !cmd.IsSet("interactive") && (o.Preset == "" || o.Node == "")) {
		f := &form{in: bufio.NewReader(r.in), out: r.errOut, given: cmd.IsSet}
		if err := f.fill(&o); err != nil {
			return err
		}
	} else if o.Preset == "" {
		return fmt.Errorf("--preset is missing: give one of %s (or run init on a terminal, or with --interactive, to be asked)", strings.Join(initflow.Presets, ", "))
	}

	// Everything is checked before the store is touched.
	if err := o.Validate(); err != nil {
		return err
	}

	if o.EndpointType == ichorv1alpha1.EndpointTypeNode {
		r.warnf("the Kubernetes endpoint is the node's own address %s; a VIP (--endpoint HOST --endpoint-type vip) is recommended even for one node, "+
			"because changing the endpoint later means re-issuing certificates", o.Node)
	}

	store, err := secretstore.Open(o.Cluster, r.errOut)
	if err != nil {
		return err
	}

	tty := false
	if f, ok := r.errOut.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}

	env := initflow.Env{
		Store:         store,
		Passphrase:    secretstore.PromptPassphrase(cmd.String(flagPassphraseFile), os.Stdin, r.errOut),
		NewPassphrase: func() (string, bool, error) { return r.newPassphrase(cmd, true) },
		Progress:      initflow.NewProgress(r.errOut, tty),
		Out:           r.out,
		ErrOut:        r.errOut,
		Version:       version.Get().Version,
	}

	return initflow.Run(ctx, o, env)
}
