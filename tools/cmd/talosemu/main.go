// Command talosemu runs emulated Talos machines that speak Talos's own API, each on its own
// loopback address, with a control API for faults. See tools/talosemu/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "talosemu:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("talosemu", flag.ContinueOnError)
	specPath := fs.String("spec", "", "YAML spec of the machines (see README.md); overrides --machines/--subnet/--controlplanes")
	machines := fs.Int("machines", 0, "number of default machines to emulate")
	controlPlanes := fs.Int("controlplanes", 0, "how many of the --machines carry the controlplane role hint (the rest: worker)")
	subnet := fs.String("subnet", "127.0.10.0/24", "loopback subnet the machine addresses are taken from")
	stateDir := fs.String("state-dir", ".talosemu", "directory with one state directory per machine")
	controlAddr := fs.String("control", "127.0.0.1:50100", "listen address of the control API (loopback only)")
	install := fs.Duration("install-duration", 0, "length of the installing stage (default 2s)")
	reboot := fs.Duration("reboot-duration", 0, "length of a reboot (default 1s)")
	boot := fs.Duration("boot-duration", 0, "length of the booting stage (default 500ms)")
	apply := fs.Duration("apply-duration", 0, "how long ApplyConfiguration takes (default 0)")
	verbose := fs.Bool("v", false, "log machine events to stderr")
	kube := fs.Bool("kubernetes", false, "run a real Kubernetes control plane on bootstrapped control planes and simulated kubelets (needs the binaries of `go tool task assets`)")
	kubeAssets := fs.String("kube-assets", os.Getenv("KUBEBUILDER_ASSETS"), "directory with kube-apiserver, kube-controller-manager and kube-scheduler (default $KUBEBUILDER_ASSETS)")
	apiRestart := fs.Duration("apiserver-restart-delay", 0, "with --kubernetes: how long the API server stays away when a change of its settings restarts it (15-45s on real hardware)")
	singleAPIServer := fs.Bool("single-apiserver", false, "with --kubernetes: one control plane (apiserver, controller-manager, scheduler) per cluster instead of one per control plane, for large tests")
	heartbeat := fs.Duration("kubelet-heartbeat", 0, "with --kubernetes: how often each emulated kubelet renews its Node's Lease (default 5s; a real kubelet's is 10s); longer for thousands of machines on one host")
	podBinDir := fs.String("pod-bin-dir", "", "with --kubernetes: run the pods of Ichor's images (ichor-controller, ichor-ui, ichor-installer) as local processes of the binaries in this directory (bin/ of `go tool task build`); empty: kwok simulates every pod")
	networkNeedsCNI := fs.Bool("network-needs-cni", false, "with --kubernetes: report each Node NotReady (network plugin not ready) until a Ready pod of a CNI DaemonSet (cilium, flannel, calico) runs on it, as a real kubelet does; default: Nodes are Ready without a CNI")
	podSubnet := fs.String("pod-subnet", "", "with --pod-bin-dir: loopback range the pods' processes listen on (default 127.244.0.0/16)")

	if err := fs.Parse(args); err != nil {
		return err
	}

	var (
		spec *talosemu.Spec
		err  error
	)

	switch {
	case *specPath != "":
		spec, err = talosemu.LoadSpec(*specPath)
	case *machines > 0:
		spec, err = talosemu.GenerateSpec(*machines, *controlPlanes, *subnet)
	default:
		return errors.New("give --machines N or --spec FILE")
	}

	if err != nil {
		return err
	}

	if *controlAddr != "" && spec.ControlAddress == "" {
		spec.ControlAddress = *controlAddr
	}

	override := func(d *talosemu.Duration, v time.Duration) {
		if v > 0 {
			*d = talosemu.Duration(v)
		}
	}

	override(&spec.Durations.Install, *install)
	override(&spec.Durations.Reboot, *reboot)
	override(&spec.Durations.Boot, *boot)
	override(&spec.Durations.Apply, *apply)

	opts := talosemu.Options{
		Kubernetes: *kube, KubeAssets: *kubeAssets, SingleAPIServer: *singleAPIServer, APIServerRestartDelay: *apiRestart, KubeletHeartbeat: *heartbeat,
		PodBinDir: *podBinDir, PodSubnet: *podSubnet, NetworkNeedsCNI: *networkNeedsCNI,
	}
	if *verbose {
		opts.Logger = log.New(os.Stderr, "talosemu: ", log.LstdFlags)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()

	w, err := talosemu.Start(ctx, spec, *stateDir, opts)
	if err != nil {
		return err
	}
	defer w.Close()

	fmt.Printf("talosemu: %d machines started in %s; control API %s\n", len(w.Machines()), time.Since(start).Round(time.Millisecond), w.ControlURL())

	enc := json.NewEncoder(os.Stdout)

	for _, m := range w.Machines() {
		i := m.Info()

		if err := enc.Encode(map[string]string{
			"name": i.Name, "endpoint": i.Endpoint, "uuid": i.UUID, "fingerprint": i.MaintenanceFingerprint,
		}); err != nil {
			return err
		}
	}

	<-ctx.Done()
	fmt.Println("talosemu: stopping")

	return nil
}
