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
