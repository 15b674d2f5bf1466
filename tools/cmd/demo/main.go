// Command ichor-demo starts Ichor's demo world on this machine (run it through
// `go tool task demo`). Today the world is the local Kubernetes control plane
// (a real kube-apiserver and etcd built by `go tool task assets`) with Ichor's
// CRDs installed; the emulated Talos machines, `ichor init`, the controller and
// ichor-ui join it as their issues land. Ctrl-C stops everything.
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
	"github.com/maeshinshin/ichor/tools/testenv"
)

func main() {
	stateDir := flag.String("state-dir", ".demo", "Directory for the demo's kubeconfig and state.")
	flag.Parse()
	if err := run(*stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "ichor-demo:", err)
		os.Exit(1)
	}
}

func run(stateDir string) error {
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

	fmt.Printf(`
The local Kubernetes control plane is running with %d Ichor CRD(s) installed.
  kubeconfig: %s
  try:        %s/kubectl --kubeconfig %s get crd

Not in the demo yet: the emulated Talos machines, ichor init, ichor-controller
and the web console. They are added as their issues land.
Press Ctrl-C to stop.
`, len(env.CRDs), path, os.Getenv(testenv.AssetsEnv), path)

	<-ctx.Done()
	return nil
}
