package commands

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/urfave/cli/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
)

// talosconfigWait bounds the wait for the controller's signature.
const talosconfigWait = time.Minute

// talosconfigCommand is `ichor cluster talosconfig`.
func talosconfigCommand() *cli.Command {
	return &cli.Command{
		Name: "talosconfig",
		Usage: fmt.Sprintf("write an os:reader talosconfig for the cluster's control planes, valid for %s (at most %s): "+
			"talosctl can read with it (versions, services, logs, resources) and change nothing; "+
			"needs download on talosclusters/talosconfig-reader and leaves a Warning Event naming you",
			download.DefaultTalosconfigDuration, download.MaxTalosconfigDuration),
		ArgsUsage: "[" + argCluster + "]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagFile, Aliases: []string{"f"}, Required: true, TakesFile: true,
				Usage: "write the talosconfig to `FILE` (created with mode 0600; - for standard output)"},
			&cli.DurationFlag{Name: flagDuration, Usage: fmt.Sprintf("how long the certificate lasts, 1m to %s (default %s)",
				download.MaxTalosconfigDuration, download.DefaultTalosconfigDuration)},
			&cli.IntFlag{Name: flagTalosPort, Usage: usageTalosPort},
		},
		Action: clusterTalosconfig,
	}
}

// clusterTalosconfig asks the controller, as the kubeconfig's user, to sign
// a key made here for os:reader (the controller records the Warning Event
// naming the user on the TalosCluster as it signs), then writes the talosconfig. The private key never leaves this process
// except into the file. A refusal answers before anything is created.
func clusterTalosconfig(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return fmt.Errorf("`%s` takes at most one %s; run `%s --help`", cmd.FullName(), argCluster, cmd.FullName())
	}

	d, err := download.ValidTalosconfigDuration(cmd.Duration(flagDuration))
	if err != nil {
		return fmt.Errorf("--duration: %w; nothing was requested", err)
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	c, err := r.getCluster(ctx, cmd.Args().First())
	if err != nil {
		return err
	}

	if err := r.checkDownload(ctx, c.Name, download.TalosconfigReader); err != nil {
		return err
	}

	machines := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, machines, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
	}

	endpoints := download.TalosconfigEndpoints(machines.Items, c.Name, cmd.Int(flagTalosPort))
	if len(endpoints) == 0 {
		return fmt.Errorf("cluster %s has no running control plane with an address for the talosconfig's endpoints; "+
			"check `ichor machine list`; nothing was requested", c.Name)
	}

	key, err := download.NewTalosconfigKey()
	if err != nil {
		return err
	}

	tcr := download.TalosconfigRequest(r.ns(), c.Name, c.Name+"-talosconfig-", key, d)
	if err := r.c().Create(ctx, tcr); err != nil {
		return fmt.Errorf("%w; nothing was requested", r.conn.Explain(err, "creating the TalosCredentialRequest"))
	}

	signed, err := r.waitCredential(ctx, tcr)
	if err != nil {
		return err
	}

	data, err := key.Talosconfig(c.Name, endpoints, signed)
	if err != nil {
		return err
	}

	expires := time.Now().Add(d)
	if signed.Status.ExpiresAt != nil {
		expires = signed.Status.ExpiresAt.Time
	}

	out, done, err := openDownloadFile(cmd.String(flagFile), r.out)
	if err != nil {
		return err
	}

	if _, err := out.Write(data); err != nil {
		done(false)

		return fmt.Errorf("writing %s: %w", cmd.String(flagFile), err)
	}

	if !done(true) {
		return fmt.Errorf("writing %s failed", cmd.String(flagFile))
	}

	if f := cmd.String(flagFile); f != "-" {
		node := endpoints[0]
		if h, _, err := net.SplitHostPort(node); err == nil {
			node = h
		}

		_, _ = fmt.Fprintf(r.errOut, "wrote an os:reader talosconfig of cluster %s to %s, valid until %s (TalosCredentialRequest %s; the controller recorded it as a Warning Event naming you on TalosCluster %s)\n"+
			"  talosctl --talosconfig %s --nodes %s version\n",
			c.Name, f, expires.UTC().Format(time.RFC3339), signed.Name, c.Name, f, node)
	}

	return nil
}

// waitCredential follows the request until the controller signs or denies it.
func (r *run) waitCredential(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest) (*ichorv1alpha1.TalosCredentialRequest, error) {
	wctx, cancel := context.WithTimeout(ctx, talosconfigWait)
	defer cancel()

	for {
		cur := &ichorv1alpha1.TalosCredentialRequest{}

		err := r.c().Get(wctx, client.ObjectKeyFromObject(tcr), cur)
		if err == nil {
			done, derr := download.Answered(cur)
			if derr != nil {
				return nil, fmt.Errorf("%w; nothing was written", derr)
			}

			if done {
				return cur, nil
			}
		} else if !errors.Is(wctx.Err(), context.DeadlineExceeded) {
			return nil, r.conn.Explain(err, "reading TalosCredentialRequest "+tcr.Name)
		}

		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("the controller did not sign TalosCredentialRequest %s within %s; is ichor-controller running? "+
				"(`kubectl get taloscredentialrequest %s -n %s` shows its state); nothing was written", tcr.Name, talosconfigWait, tcr.Name, r.ns())
		case <-time.After(followInterval / 4):
		}
	}
}
