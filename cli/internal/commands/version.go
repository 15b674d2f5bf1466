package commands

import (
	"context"

	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/cli/internal/output"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

// versionReport is what `ichor version -o yaml|json` prints.
type versionReport struct {
	Client version.Info `json:"client"`
	Server serverInfo   `json:"server"`
}

type serverInfo struct {
	// Version is the Ichor release the cluster runs; empty when unknown.
	Version string `json:"version,omitempty"`
	// Problem says why the version is unknown.
	Problem string `json:"problem,omitempty"`
	// WritesAllowed is false when the CLI refuses to write to this server.
	WritesAllowed bool `json:"writesAllowed"`
	// Refusal says why writes are refused.
	Refusal string `json:"refusal,omitempty"`
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version of this ichor binary and of the Ichor the cluster runs",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "client", Usage: "print only the client version; do not contact the cluster"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			r, err := newRun(cmd)
			if err != nil {
				return err
			}
			rep := versionReport{Client: version.Get()}
			if !cmd.Bool("client") {
				rep.Server = r.server(ctx)
			}
			if r.format != output.Table {
				return output.Object(r.out, r.format, rep)
			}
			b := &output.Block{}
			b.Add("Client", "ichor "+rep.Client.String())
			if !cmd.Bool("client") {
				switch {
				case rep.Server.Version != "":
					b.Add("Server", "Ichor "+rep.Server.Version)
				case rep.Server.Problem != "":
					b.Add("Server", "unknown ("+rep.Server.Problem+")")
				default:
					b.Add("Server", "unknown")
				}
				if rep.Server.Refusal != "" {
					b.Add("Writes", "refused: "+rep.Server.Refusal)
				}
			}
			return b.Write(r.out)
		},
	}
}

func (r *run) server(ctx context.Context) serverInfo {
	info := serverInfo{WritesAllowed: true}
	rr, err := connected(r.cmd)
	if err != nil {
		info.Problem = err.Error()
		return info
	}
	// The unwrapped client: this read is the comparison itself, not a read
	// the skew warning is for.
	v, err := rr.serverVersion(ctx, rr.skew.raw)
	if err != nil {
		info.Problem = err.Error()
		return info
	}
	if v == "" {
		info.Problem = "no IchorInstallation reports an installed version: Ichor is not installed in this cluster, or not ready yet"
		return info
	}
	info.Version = v
	if err := version.Skew(version.Get().Version, v); err != nil {
		info.WritesAllowed = false
		info.Refusal = err.Error()
	}
	return info
}
