// Command ichor-demo starts Ichor's demo world on this machine (run it through
// `go tool task demo`): five emulated Talos machines (tools/talosemu; three
// control planes and two workers, in maintenance mode) whose first control
// plane runs a real Kubernetes control plane once bootstrapped; `ichor init
// --preset standard` against the first; ichor-controller as a local process
// against the emulated cluster; and the other machines added to discovery, so
// they wait as pending machines for `ichor machine approve`.
//
// A second run reuses the state directory (the machines keep their
// configuration, etcd and secrets, and init continues from what exists);
// --fresh starts clean. Ctrl-C stops everything it started.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

const clusterName = "demo"

func main() {
	stateDir := flag.String("state-dir", ".demo", "Directory for the demo's machines, secrets store, kubeconfig and logs.")
	subnet := flag.String("subnet", "127.0.10.0/24", "Loopback subnet of the emulated Talos machines.")
	binDir := flag.String("bin-dir", "", "Directory with the ichor and ichor-controller binaries (default: this program's directory).")
	fresh := flag.Bool("fresh", false, "Delete the state directory first and start a new cluster.")
	flag.Parse()

	if err := run(*stateDir, *subnet, *binDir, *fresh); err != nil {
		fmt.Fprintln(os.Stderr, "ichor-demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	state, bin string
	env        []string
	kubeconfig string
	passFile   string
}

func run(stateDir, subnet, binDir string, fresh bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	d, err := prepare(stateDir, binDir, fresh)
	if err != nil {
		return err
	}

	fmt.Printf("ichor-demo %s: starting 5 emulated Talos machines (3 control planes, 2 workers) with Kubernetes...\n", version.Get().Version)

	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec, err := talosemu.GenerateSpec(5, 3, subnet)
	if err != nil {
		return err
	}

	world, err := talosemu.Start(ctx, spec, filepath.Join(d.state, "machines"), talosemu.Options{
		Kubernetes: true, SingleAPIServer: true, KubeAssets: assets,
	})
	if err != nil {
		return fmt.Errorf("starting the emulated Talos machines: %w", err)
	}

	defer func() {
		fmt.Println("ichor-demo: stopping the emulated Talos machines")
		world.Close()
	}()

	machines := world.Machines()
	first := machines[0].IP()

	// init writes the kubeconfig once etcd is bootstrapped; the controller
	// starts as soon as the CRDs are served, so init's wait sees it take over.
	initDone := make(chan error, 1)

	go func() { initDone <- d.ichor(ctx, os.Stdout, d.initArgs(first)...) }()

	ctrl, err := d.startController(ctx, initDone)
	if err != nil {
		return err
	}

	defer ctrl.stop()

	others := make([]string, 0, len(machines)-1)
	for _, m := range machines[1:] {
		others = append(others, m.IP())
	}

	if err := d.ichor(ctx, os.Stdout, append([]string{"--kubeconfig", d.kubeconfig, "cluster", "discovery", "add", "--cluster", clusterName}, others...)...); err != nil {
		return err
	}

	d.next(world, machines)

	select {
	case <-ctx.Done():
	case err := <-ctrl.exited:
		return fmt.Errorf("ichor-controller stopped: %w; its log is %s", err, ctrl.log)
	}

	return nil
}

func prepare(stateDir, binDir string, fresh bool) (*demo, error) {
	if fresh {
		if err := os.RemoveAll(stateDir); err != nil {
			return nil, fmt.Errorf("removing %s: %w", stateDir, err)
		}
	}

	state, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}

	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}

	if binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}

		binDir = filepath.Dir(exe)
	}

	for _, b := range []string{"ichor", "ichor-controller"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("%s is missing in %s: run `go tool task build` (or `go tool task demo`, which builds it)", b, binDir)
		}
	}

	d := &demo{state: state, bin: binDir, kubeconfig: filepath.Join(state, "kubeconfig"), passFile: filepath.Join(state, "passphrase")}

	// The demo's secrets store lives in the state directory, under a
	// passphrase kept next to it: a demo convenience a real cluster must not copy.
	if _, err := os.Stat(d.passFile); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(d.passFile, []byte(rand.Text()+"\n"), 0o600); err != nil {
			return nil, err
		}
	}

	d.env = append(os.Environ(), "ICHOR_HOME="+filepath.Join(state, "home"))

	return d, nil
}

func (d *demo) initArgs(first string) []string {
	return []string{
		"init", "--cluster", clusterName, "--preset", "standard", "--node", first,
		// The controller runs here as a local process, so only the CRDs go in.
		"--install", "none",
		"--write-kubeconfig", d.kubeconfig, "--passphrase-file", d.passFile, "--timeout", "5m",
	}
}

// ichor runs the CLI with the demo's secrets store.
func (d *demo) ichor(ctx context.Context, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "ichor"), args...) //nolint:gosec // our own binary
	cmd.Env, cmd.Stdout, cmd.Stderr = d.env, out, os.Stderr

	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ichor %s: %w", args[0], err)
	}

	return nil
}

type controller struct {
	cmd    *exec.Cmd
	log    string
	exited chan error
}

// startController starts ichor-controller once init has written the
// kubeconfig and the API server serves Ichor's CRDs, then waits for init.
func (d *demo) startController(ctx context.Context, initDone <-chan error) (*controller, error) {
	var initErr error

	initFinished := false

	for !served(ctx, d) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case initErr = <-initDone:
			if initErr != nil {
				return nil, initErr
			}

			initFinished = true
		case <-time.After(time.Second):
		}
	}

	c := &controller{log: filepath.Join(d.state, "controller.log"), exited: make(chan error, 1)}

	logf, err := os.Create(c.log)
	if err != nil {
		return nil, err
	}

	// Webhooks off: the API server cannot reach a local process's webhook
	// server through the ichor-webhook Service, and the CRDs alone are
	// installed, so nothing calls one.
	// Not bound to ctx: Ctrl-C stops it with SIGTERM, so it can let go of its work.
	c.cmd = exec.CommandContext(context.WithoutCancel(ctx), filepath.Join(d.bin, "ichor-controller"), //nolint:gosec // our own binary
		"--enable-webhooks=false", "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	c.cmd.Env = append(slices.Clone(d.env), "KUBECONFIG="+d.kubeconfig)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf

	if err := c.cmd.Start(); err != nil {
		_ = logf.Close()

		return nil, fmt.Errorf("starting ichor-controller: %w", err)
	}

	fmt.Printf("ichor-demo: ichor-controller runs as process %d (webhooks off: a local process cannot serve the cluster's admission webhooks); log: %s\n",
		c.cmd.Process.Pid, c.log)

	go func() {
		c.exited <- c.cmd.Wait()
		_ = logf.Close()
	}()

	if !initFinished {
		select {
		case <-ctx.Done():
			c.stop()

			return nil, ctx.Err()
		case err := <-initDone:
			if err != nil {
				c.stop()

				return nil, err
			}
		}
	}

	return c, nil
}

// ichorCRDs are the CRDs the controller watches; it exits at start when one
// is not served yet.
var ichorCRDs = []string{
	"crd/ichorinstallations.ichor.maesh.dev", "crd/ichorusers.ichor.maesh.dev", "crd/machinereclaims.ichor.maesh.dev",
	"crd/talosclusters.ichor.maesh.dev", "crd/talosconfigpatches.ichor.maesh.dev", "crd/taloscredentialrequests.ichor.maesh.dev",
	"crd/talosetcdbackups.ichor.maesh.dev", "crd/talosmachines.ichor.maesh.dev", "crd/talosoperations.ichor.maesh.dev",
	"crd/talosstorages.ichor.maesh.dev",
}

// served reports whether the kubeconfig exists and the API server serves
// every Ichor CRD, established (through the kubectl of the test binaries).
func served(ctx context.Context, d *demo) bool {
	if _, err := os.Stat(d.kubeconfig); err != nil {
		return false
	}

	kubectl := filepath.Join(os.Getenv(testenv.AssetsEnv), "kubectl")
	args := append([]string{"--kubeconfig", d.kubeconfig, "wait", "--for=condition=Established", "--timeout=2s"}, ichorCRDs...)
	cmd := exec.CommandContext(ctx, kubectl, args...) //nolint:gosec // the test binaries
	cmd.Env = d.env

	return cmd.Run() == nil
}

func (c *controller) stop() {
	if c == nil || c.cmd.Process == nil {
		return
	}

	fmt.Println("ichor-demo: stopping ichor-controller")

	_ = c.cmd.Process.Signal(syscall.SIGTERM)

	var err error

	select {
	case err = <-c.exited:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		err = <-c.exited
	}

	if err != nil {
		fmt.Println("ichor-demo: ichor-controller:", err)
	}
}

func (d *demo) next(world *talosemu.World, machines []*talosemu.Machine) {
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return r
			}
		}

		return p
	}

	fmt.Printf(`
The demo cluster %q runs: its first control plane %s was initialised by ichor init,
ichor-controller manages it, and the other machines wait in maintenance mode.

  machines:        `, clusterName, machines[0].IP())

	for i, m := range machines {
		if i > 0 {
			fmt.Print(", ")
		}

		fmt.Printf("%s %s", m.Name(), m.IP())
	}

	fmt.Printf(`
  control API:     %s (power-off, wipe-disk, ...; tools/talosemu/README.md)
  controller log:  %s

In another terminal:

  export KUBECONFIG=%s ICHOR_HOME=%s PATH=%s:$PATH
  ichor machine list                                   # 4 pending machines (discovery finds them in a few seconds)
  ichor machine approve MACHINE --role controlplane    # two of them, then
  ichor machine approve MACHINE --role worker          # the others
  ichor machine list --watch                           # until all are Ready
  ichor node remove MACHINE --reboot                   # a removed machine comes back as pending

Press Ctrl-C to stop everything; `+"`go tool task demo`"+` again resumes this cluster,
`+"`go tool task demo -- --fresh`"+` starts a new one.
`, world.ControlURL(), rel(filepath.Join(d.state, "controller.log")), d.kubeconfig, filepath.Join(d.state, "home"), d.bin)
}
