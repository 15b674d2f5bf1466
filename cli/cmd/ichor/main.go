// Command ichor is the Ichor CLI: it bootstraps clusters, offers every
// operation the web UI has, and is the recovery path that needs no controller.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

func main() {
	if err := newApp().Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "ichor:", err)
		os.Exit(1)
	}
}

func newApp() *cli.Command {
	return &cli.Command{
		Name:                  "ichor",
		Usage:                 "manage Talos Linux clusters through Kubernetes custom resources",
		EnableShellCompletion: true,
		// Without an action, urfave/cli answers an unknown command with help and
		// success; a typo must fail instead, and say what to run.
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Present() {
				return fmt.Errorf("unknown command %q: run `ichor --help` for the list of commands", cmd.Args().First())
			}
			return cli.ShowRootCommandHelp(cmd)
		},
		Commands: []*cli.Command{
			{
				Name:  "version",
				Usage: "print the version of this ichor binary",
				Action: func(_ context.Context, cmd *cli.Command) error {
					_, err := fmt.Fprintln(cmd.Root().Writer, "ichor", version.Get())
					return err
				},
			},
		},
	}
}
