package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// reclaimCommand is `ichor machine reclaim ADDRESS --talosconfig FILE`: the
// reset of a machine another cluster configured, run from the operator's own
// machine with the operator's own credential, which never leaves it
// (architecture, "Nodes"). The MachineReclaim controller runs the same code
// (contracts/pkg/reclaim) for the UI.
func reclaimCommand() *cli.Command {
	return &cli.Command{
		Name:      "reclaim",
		Usage:     "reset a machine another cluster configured (STATE and EPHEMERAL), so that it can be discovered and approved",
		ArgsUsage: argAddress,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagTalosconfig, Usage: "the foreign cluster's talosconfig `FILE` (its current context's credentials; its endpoints are ignored)"},
			&cli.StringFlag{Name: "confirm-uuid", Usage: "the machine's SMBIOS `UUID`, typed as consent (asked for on a terminal when omitted)"},
			&cli.BoolFlag{Name: "force", Usage: "reset a control plane even if that breaks its cluster's etcd quorum or it is the last one"},
			&cli.BoolFlag{Name: "force-ungraceful", Usage: "skip the machine's own shutdown sequence (a dead foreign cluster)"},
			&cli.IntFlag{Name: "port", Usage: usageTalosPort},
		},
		Action: machineReclaim,
	}
}

func machineReclaim(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one ADDRESS"); err != nil {
		return err
	}

	address := cmd.Args().First()
	if _, err := netip.ParseAddr(address); err != nil {
		return fmt.Errorf("%q is not an IP address; give the address the machine answers on", address)
	}

	file := cmd.String(flagTalosconfig)
	if file == "" {
		return errors.New("--talosconfig is required: the foreign cluster's talosconfig (for example the file `talosctl config` wrote); it is read here and sent nowhere")
	}

	talosconfig, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading --talosconfig: %w", err)
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	// The reset below goes to Talos, not through the API server's client,
	// so the version-skew rule is asked here.
	if err := r.mayWrite(ctx); err != nil {
		return err
	}

	// The Ichor check first needs the clusters Ichor manages.
	managed, err := reclaim.ManagedClusters(ctx, r.c(), r.c())
	if err != nil {
		return r.conn.Explain(err, "listing the clusters Ichor manages (to refuse an Ichor machine)")
	}

	c, err := talos.DialTalosconfig(ctx, address, cmd.Int("port"), talosconfig)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	in, err := reclaim.Inspect(ctx, c)
	if err != nil {
		return fmt.Errorf("inspecting %s with the talosconfig: %w", address, err)
	}

	r.printInspection(address, in)

	if err := refusalError("resetting "+address, reclaim.Decide(in, reclaim.Facts{Managed: managed, Force: cmd.Bool("force")})); err != nil {
		return err
	}

	typed := cmd.String("confirm-uuid")
	if typed == "" {
		if typed, err = r.ask(fmt.Sprintf("This wipes STATE and EPHEMERAL of %s; its user disks stay. Type the machine's UUID (%s) to confirm: ", address, in.UUID)); err != nil {
			return err
		}
	}

	if ref := reclaim.CheckConfirmation(in, typed); ref != nil {
		return refusalError("resetting "+address, []guard.Refusal{*ref})
	}

	graceful := reclaim.Graceful(in, cmd.Bool("force-ungraceful"))
	if err := c.ResetGeneric(ctx, reclaim.ResetRequest(graceful, true)); err != nil {
		return fmt.Errorf("the machine refused the reset: %w", err)
	}

	r.printf("reset requested (graceful: %t): %s wipes STATE and EPHEMERAL and reboots into maintenance mode\n", graceful, address)
	r.printf("then add it: `ichor cluster discovery add %s`\n", address)

	return nil
}

func (r *run) printInspection(address string, in *reclaim.Inspection) {
	r.printf("machine at %s\n", address)
	r.printf("  UUID:          %s\n", orDash(in.UUID))
	r.printf("  serial:        %s\n", orDash(in.Serial))
	r.printf("  hostname:      %s\n", orDash(in.Hostname))
	r.printf("  type:          %s\n", orDash(in.MachineType))
	r.printf("  cluster:       %s\n", orDash(in.ClusterName))

	if in.ControlPlane {
		r.printf("  etcd members:  %d\n", len(in.EtcdMembers))
	}

	r.printf("  system disk:   %s (STATE and EPHEMERAL are wiped)\n", orDash(in.SystemDisk))

	for _, d := range in.UserDisks {
		r.printf("  user disk:     %s (not touched)\n", d)
	}

	for _, v := range in.EncryptedVolumes {
		r.printf("  encrypted:     %s (on a user disk: not touched)\n", v)
	}
}

// ask reads one line of consent from standard input.
func (r *run) ask(prompt string) (string, error) {
	_, _ = fmt.Fprint(r.errOut, prompt)

	line, err := bufio.NewReader(r.in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}

	return strings.TrimSpace(line), nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}

	return s
}
