package commands

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// Flags of the downloads.
const (
	flagFile        = "file"
	flagInterface   = "interface"
	flagDuration    = "duration"
	flagSnapLen     = "snap-len"
	flagPromiscuous = "promiscuous"
	// flagTalosPort is the Talos API port of the nodes.
	flagTalosPort = "talos-port"
	// usageTalosPort is flagTalosPort's help text.
	usageTalosPort = "the Talos API `PORT` (default 50000)"
)

// downloadFlags are the flags every download has.
func downloadFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: flagFile, Aliases: []string{"f"}, Required: true, TakesFile: true,
			Usage: "write the download to `FILE` (created with mode 0600; - for standard output)"},
		&cli.StringFlag{Name: flagPassphraseFile, Usage: "read the secrets store's passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true},
		&cli.IntFlag{Name: flagTalosPort, Usage: usageTalosPort},
	}, extra...)
}

// supportBundleCommand is `ichor node support-bundle`.
func supportBundleCommand() *cli.Command {
	return &cli.Command{
		Name: "support-bundle",
		Usage: "download a support bundle of a node (a tar.gz of its service logs and states, kernel log, mounts and Talos resources, " +
			"as talosctl support collects them); needs download on talosclusters/support-bundle and leaves a Warning Event naming you",
		ArgsUsage:     argMachine,
		ShellComplete: completeMachines,
		Flags:         downloadFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return runDownload(ctx, cmd, download.SupportBundle)
		},
	}
}

// captureCommand is `ichor node capture`.
func captureCommand() *cli.Command {
	return &cli.Command{
		Name: "capture",
		Usage: fmt.Sprintf("capture the packets of one of a node's links into a pcap file, for a bounded time (at most %s); "+
			"needs download on talosclusters/packet-capture and leaves a Warning Event naming you", download.MaxCaptureDuration),
		ArgsUsage:     argMachine,
		ShellComplete: completeMachines,
		Flags: downloadFlags(
			&cli.StringFlag{Name: flagInterface, Required: true, Usage: "the node's link `NAME` to capture on (eth0, enp0s1...)"},
			&cli.DurationFlag{Name: flagDuration, Value: download.DefaultCaptureDuration, Usage: fmt.Sprintf("how long to capture, 1s to %s", download.MaxCaptureDuration)},
			&cli.UintFlag{Name: flagSnapLen, Value: download.DefaultSnapLen, Usage: fmt.Sprintf("the `BYTES` kept of each frame, %d to %d", download.MinSnapLen, download.MaxSnapLen)},
			&cli.BoolFlag{Name: flagPromiscuous, Usage: "capture frames not addressed to the node too"},
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return runDownload(ctx, cmd, download.PacketCapture)
		},
	}
}

// etcdSnapshotCommand is `ichor etcd snapshot`.
func etcdSnapshotCommand() *cli.Command {
	return &cli.Command{
		Name: "snapshot",
		Usage: "download a snapshot of the live etcd from a control plane (the first running one unless MACHINE is given), " +
			"as talosctl etcd snapshot saves it; needs download on talosclusters/etcd-snapshot and leaves a Warning Event naming you",
		ArgsUsage:     "[" + argMachine + "]",
		ShellComplete: completeMachines,
		Flags:         downloadFlags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			return runDownload(ctx, cmd, download.EtcdSnapshot)
		},
	}
}

// runDownload checks the download verb as the kubeconfig's user, records the
// Warning Event naming that user, then calls the node with the talosconfig of
// the cluster's secrets store and streams the bytes into the file. A refusal
// or a bad parameter answers before anything is recorded or written.
func runDownload(ctx context.Context, cmd *cli.Command, kind string) error {
	if cmd.Args().Len() > 1 || (kind != download.EtcdSnapshot && cmd.Args().Len() != 1) {
		return fmt.Errorf("`%s` takes %s; run `%s --help`", cmd.FullName(), argMachine, cmd.FullName())
	}

	var (
		capture download.Capture
		detail  string
	)

	if kind == download.PacketCapture {
		var err error

		capture, err = download.Capture{
			Interface: cmd.String(flagInterface), Duration: cmd.Duration(flagDuration),
			SnapLen: uint32(min(cmd.Uint(flagSnapLen), 1<<32-1)), Promiscuous: cmd.Bool(flagPromiscuous),
		}.Normalize()
		if err != nil {
			return fmt.Errorf("%w; nothing was captured", err)
		}

		detail = fmt.Sprintf("interface %s, %s, snap length %d", capture.Interface, capture.Duration, capture.SnapLen)
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	m, err := r.downloadMachine(ctx, cmd.Args().First(), kind)
	if err != nil {
		return err
	}

	if err := r.checkDownload(ctx, m.Spec.ClusterName, kind); err != nil {
		return err
	}

	user, err := r.conn.WhoAmI(ctx)
	if err != nil {
		return err
	}

	st, err := secretstore.Open(m.Spec.ClusterName, r.errOut)
	if err != nil {
		return err
	}

	talosconfig, err := st.Read(secretstore.FileTalosconfig, secretstore.PromptPassphrase(cmd.String(flagPassphraseFile), os.Stdin, r.errOut))
	if err != nil {
		return fmt.Errorf("reading the talosconfig of cluster %s from %s: %w; the download needs the operator's store `ichor init` wrote", m.Spec.ClusterName, st.Dir, err)
	}

	out, done, err := openDownloadFile(cmd.String(flagFile), r.out)
	if err != nil {
		return err
	}

	ev := download.Event(kind, user, m.Name, detail, "ichor", download.Target{Kind: "TalosMachine", Namespace: m.Namespace, Name: m.Name, UID: string(m.UID)}, time.Now())
	if err := r.c().Create(ctx, ev); err != nil {
		done(false)

		return fmt.Errorf("%w; nothing was downloaded: every download is recorded as a Warning Event first (you need create on events in namespace %s)",
			r.conn.Explain(err, "recording the download's Event"), r.ns())
	}

	c, err := talos.DialTalosconfig(ctx, m.Spec.Address, cmd.Int(flagTalosPort), talosconfig)
	if err != nil {
		done(false)

		return fmt.Errorf("connecting to node %s (%s): %w", m.Name, m.Spec.Address, err)
	}

	defer c.Close() //nolint:errcheck

	var n int64

	switch kind {
	case download.SupportBundle:
		cw := &countWriter{w: out}
		err = download.WriteSupportBundle(ctx, c, m.Name, cw)
		n = cw.n
	case download.EtcdSnapshot:
		n, err = download.WriteEtcdSnapshot(ctx, c, out)
	case download.PacketCapture:
		n, err = download.WritePacketCapture(ctx, c, capture, out)
	}

	if err != nil {
		done(false)

		return fmt.Errorf("downloading from node %s: %s", m.Name, talos.Message(err))
	}

	if !done(true) {
		return fmt.Errorf("writing %s failed", cmd.String(flagFile))
	}

	if cmd.String(flagFile) != "-" {
		_, _ = fmt.Fprintf(r.errOut, "wrote %d bytes to %s (recorded as a Warning Event on TalosMachine %s)\n", n, cmd.String(flagFile), m.Name)
	}

	return nil
}

// downloadMachine reads the machine to download from; for an etcd snapshot
// without a name, the first running control plane of the namespace.
func (r *run) downloadMachine(ctx context.Context, name, kind string) (*ichorv1alpha1.TalosMachine, error) {
	if name == "" {
		list := &ichorv1alpha1.TalosMachineList{}
		if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
			return nil, r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
		}

		for i := range list.Items {
			m := &list.Items[i]
			if m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Status.Stage == ichorv1alpha1.StageRunning && m.Spec.Address != "" {
				return m, nil
			}
		}

		return nil, fmt.Errorf("namespace %s has no running control plane to take an etcd snapshot from: name one, or check `ichor machine list`", r.ns())
	}

	m, err := r.getMachine(ctx, name)
	if err != nil {
		return nil, err
	}

	switch {
	case m.Status.Stage != ichorv1alpha1.StageRunning:
		return nil, fmt.Errorf("machine %s is not running (stage %q): its node can be downloaded from once it runs", name, m.Status.Stage)
	case m.Spec.Address == "":
		return nil, fmt.Errorf("machine %s has no spec.address to reach its node at", name)
	case kind == download.EtcdSnapshot && m.Spec.Role != ichorv1alpha1.RoleControlPlane:
		return nil, fmt.Errorf("machine %s is a %s: etcd runs on the control planes; name one of them", name, m.Spec.Role)
	}

	return m, nil
}

// checkDownload refuses, as the kubeconfig's user, what ichor-ui and the
// webhook refuse: a download without `download` on its talosclusters
// subresource (the same guard.CredentialRequestRequirements).
func (r *run) checkDownload(ctx context.Context, cluster, kind string) error {
	tcr := &ichorv1alpha1.TalosCredentialRequest{}
	tcr.Namespace, tcr.Spec.ClusterName, tcr.Spec.Purpose = r.ns(), cluster, kind

	return r.checkRequirements(ctx, guard.CredentialRequestRequirements(tcr), "download from the cluster", "nothing was downloaded")
}

// openDownloadFile opens the file to write (0600, created or truncated) or
// standard output for "-"; done(ok) closes it, and removes a file whose
// download failed. done reports whether the close succeeded.
func openDownloadFile(path string, stdout io.Writer) (io.Writer, func(ok bool) bool, error) {
	if path == "-" {
		return stdout, func(bool) bool { return true }, nil
	}

	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("creating %s: %w", path, err)
	}

	return f, func(ok bool) bool {
		cerr := f.Close()
		if !ok || cerr != nil {
			_ = os.Remove(path)
		}

		return cerr == nil
	}, nil
}

// countWriter counts what it writes.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)

	return n, err
}
