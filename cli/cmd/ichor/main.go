// Command ichor is the Ichor CLI: it bootstraps clusters, offers every
// operation the web UI has, and is the recovery path that needs no controller.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/cli/internal/commands"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().Run(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ichor:", err)
		os.Exit(1)
	}
}

func newApp() *cli.Command {
	return commands.New()
}
