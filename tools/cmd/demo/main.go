// Command ichor-demo starts Ichor's demo world on this machine (run it through
// `go tool task demo`). Today the world is the local Kubernetes control plane
// (a real kube-apiserver and etcd built by `go tool task assets`) with Ichor's
// CRDs installed, and five emulated Talos machines (tools/talosemu) waiting in
// maintenance mode; `ichor init`, the controller and ichor-ui join it as their
// issues land. Ctrl-C stops everything.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func main() {
	stateDir := flag.String("state-dir", ".demo", "Directory for the demo's kubeconfig and state.")
	subnet := flag.String("subnet", "127.0.10.0/24", "Loopback subnet of the emulated Talos machines.")
	flag.Parse()
	if err := run(*stateDir, *subnet); err != nil {
		fmt.Fprintln(os.Stderr, "ichor-demo:", err)
		os.Exit(1)
	}
}

func run(stateDir, subnet string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("ichor-demo %s: starting kube-apiserver and etcd...\n", version.Get().Version)
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("ichor-demo: stopping kube-apiserver and etcd")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "ichor-demo: stopping:", err)
		}
	}()

	kubeconfig, err := env.KubeconfigYAML()
	if err != nil {
		return fmt.Errorf("writing an admin kubeconfig: %w", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	path, err := filepath.Abs(filepath.Join(stateDir, "kubeconfig"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return err
	}

	// Three control planes and two workers, in maintenance mode until
	// configured; their state survives a restart of the demo.
	spec, err := talosemu.GenerateSpec(5, 3, subnet)
	if err != nil {
		return err
	}
	world, err := talosemu.Start(ctx, spec, filepath.Join(stateDir, "machines"))
	if err != nil {
		return fmt.Errorf("starting the emulated Talos machines: %w", err)
	}
	defer func() {
		fmt.Println("ichor-demo: stopping the emulated Talos machines")
		world.Close()
	}()

	fmt.Printf(`
The local Kubernetes control plane is running with %d Ichor CRD(s) installed.
  kubeconfig: %s
  try:        %s/kubectl --kubeconfig %s get crd

Emulated Talos machines (Talos API on port 50000; control API %s):
`, len(env.CRDs), path, os.Getenv(testenv.AssetsEnv), path, world.ControlURL())
	for _, m := range world.Machines() {
		fmt.Printf("  %-8s %s\n", m.Name(), m.Address())
	}
	fmt.Print(`
Not in the demo yet: ichor init, ichor-controller and the web console, so the
machines stay in maintenance mode. They are added as their issues land.
Press Ctrl-C to stop.
`)

	<-ctx.Done()
	return nil
}
