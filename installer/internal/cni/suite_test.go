package cni_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one emulated world set up the way `ichor init`
// leaves a cluster: a control plane (cp-1) and a worker (w-1), the real
// Kubernetes control plane on cp-1, kwok playing the kubelets (so the
// DaemonSet's and Deployments' status is the real controllers' work), CNI
// "none", and Cilium as the inline manifest "cilium" of the control plane's
// config, rendered by cilium.Render. The emulator applies inline manifests
// as Talos v1.14 does: create-only, server-side apply with the field manager
// "talos" (machinery constants.KubernetesFieldManagerName; talosemu
// manifests.go, which mirrors Talos's
// internal/app/machined/pkg/controllers/k8s/manifest_apply.go).
//
// The pod runner runs pods of the ichor-installer image as processes of this
// package's build of ichor-installer, so the ichor-cni Job runs for real;
// Cilium's own pods are kwok's.
var (
	world     *talosemu.World
	admin     *rest.Config
	clientset *kubernetes.Clientset
	// adminKubeconfig is a file of admin's kubeconfig.
	adminKubeconfig string
)

// base is the request Talos's inline manifest was rendered from.
var base = cilium.Request{KubernetesVersion: "1.37.2"}

const (
	// applyTimeout bounds Helm's waits in the tests (a busy 2-core machine).
	applyTimeout = 5 * time.Minute
	waitTimeout  = 5 * time.Minute
	// installerImage is an image of the pod runner's ichor-installer.
	installerImage = "ghcr.io/maeshinshin/ichor-installer:test"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	klog.SetLogger(logr.Discard())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir, err := os.MkdirTemp("", "ichor-cni-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)

		return 1
	}

	defer func() { _ = os.RemoveAll(dir) }()

	if err := setup(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: setting up the emulated world:", err)

		if world != nil {
			world.Close()
		}

		return 1
	}

	defer world.Close()

	return m.Run()
}

func setup(ctx context.Context, dir string) error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o750); err != nil {
		return err
	}

	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "ichor-installer"), "github.com/maeshinshin/ichor/installer/cmd") //nolint:gosec // the module's own binary
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building ichor-installer: %w\n%s", err, out)
	}

	rendered, err := cilium.Render(ctx, base.Options())
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{
		Subnet: "127.0.171.0/24",
		Machines: []talosemu.MachineSpec{
			{Name: "cp-1", Role: talosemu.RoleHintControlPlane},
			{Name: "w-1", Role: talosemu.RoleHintWorker},
		},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(200 * time.Millisecond), Reboot: talosemu.Duration(200 * time.Millisecond), Boot: talosemu.Duration(100 * time.Millisecond),
		},
	}

	world, err = talosemu.Start(ctx, spec, filepath.Join(dir, "world"), talosemu.Options{
		Kubernetes: true, KubeAssets: assets, SingleAPIServer: true,
		PodBinDir: bin, PodSubnet: "127.171.254.0/24",
	})
	if err != nil {
		return err
	}

	cp, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	w1, err := world.Machine("w-1")
	if err != nil {
		return err
	}

	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		return err
	}

	in, err := generate.NewInput("cni", "https://"+cp.IP()+":6443", base.KubernetesVersion,
		generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/nvme0n1"))
	if err != nil {
		return err
	}

	for _, x := range []struct {
		m   *talosemu.Machine
		typ machine.Type
	}{{cp, machine.TypeControlPlane}, {w1, machine.TypeWorker}} {
		cfg, err := in.Config(x.typ)
		if err != nil {
			return err
		}

		// Cilium inline, as `ichor init` sends it. (Talos's own CNI document,
		// flannel by default, is left: the emulator plays no CNI, and the
		// tests look at Cilium's objects only.)
		cc := cfg.RawV1Alpha1().ClusterConfig
		if x.typ == machine.TypeControlPlane {
			cc.ClusterInlineManifests = v1alpha1.ClusterInlineManifests{ //nolint:staticcheck // what generated v1.14 configs carry
				{InlineManifestName: "cilium", InlineManifestContents: rendered.Manifest},
			}
		}

		data, err := cfg.EncodeBytes()
		if err != nil {
			return err
		}

		if err := x.m.ApplyInMaintenance(ctx, data, 2*time.Minute); err != nil {
			return err
		}
	}

	talosconfig, err := in.Talosconfig()
	if err != nil {
		return err
	}

	tc, err := talosclient.New(ctx, talosclient.WithConfig(talosconfig), talosclient.WithEndpoints(cp.IP()))
	if err != nil {
		return err
	}

	defer func() { _ = tc.Close() }()

	if _, err := tc.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}

	kubeconfig, err := tc.Kubeconfig(ctx)
	if err != nil {
		return err
	}

	adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(adminKubeconfig, kubeconfig, 0o600); err != nil {
		return err
	}

	if admin, err = clientcmd.RESTConfigFromKubeConfig(kubeconfig); err != nil {
		return err
	}

	admin.Timeout = 30 * time.Second

	if clientset, err = kubernetes.NewForConfig(admin); err != nil {
		return err
	}

	return poll(ctx, 6*time.Minute, func() error { return rolledOut(ctx) })
}

// poll calls cond until it returns nil or timeout passes (TestMain has no
// *testing.T for testenv.Eventually).
func poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)

	for {
		err := cond()
		if err == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}

		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// rolledOut says whether the DaemonSet cilium and the Deployment
// cilium-operator are rolled out: every pod of the current template
// scheduled and ready.
func rolledOut(ctx context.Context) error {
	ds, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	if err != nil {
		return err
	}

	if err := daemonSetDone(ds); err != nil {
		return err
	}

	if ds.Status.NumberReady != ds.Status.DesiredNumberScheduled {
		return fmt.Errorf("DaemonSet cilium: %d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	}

	dep, err := clientset.AppsV1().Deployments(cilium.Namespace).Get(ctx, "cilium-operator", metav1.GetOptions{})
	if err != nil {
		return err
	}

	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}

	if dep.Status.ObservedGeneration != dep.Generation || dep.Status.UpdatedReplicas != want || dep.Status.AvailableReplicas != want {
		return fmt.Errorf("Deployment cilium-operator: generation %d observed %d, %d updated and %d available of %d",
			dep.Generation, dep.Status.ObservedGeneration, dep.Status.UpdatedReplicas, dep.Status.AvailableReplicas, want)
	}

	return nil
}

// daemonSetDone says whether the DaemonSet's controller has seen its
// current generation and scheduled the current template on every node.
func daemonSetDone(ds *appsv1.DaemonSet) error {
	if ds.Status.ObservedGeneration != ds.Generation || ds.Status.DesiredNumberScheduled == 0 ||
		ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled {
		return fmt.Errorf("DaemonSet %s: generation %d observed %d, %d of %d updated pods scheduled", ds.Name,
			ds.Generation, ds.Status.ObservedGeneration, ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled)
	}

	return nil
}

// ciliumPods are the UIDs of the pods of the DaemonSet cilium and the
// Deployment cilium-operator, by name.
func ciliumPods(t *testing.T) map[string]string {
	t.Helper()

	ctx := t.Context()
	out := map[string]string{}

	ds, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	testenv.Must(t, err)

	dep, err := clientset.AppsV1().Deployments(cilium.Namespace).Get(ctx, "cilium-operator", metav1.GetOptions{})
	testenv.Must(t, err)

	for _, sel := range []*metav1.LabelSelector{ds.Spec.Selector, dep.Spec.Selector} {
		pods, err := clientset.CoreV1().Pods(cilium.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(sel)})
		testenv.Must(t, err)

		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				out[p.Name] = string(p.UID)
			}
		}
	}

	if len(out) == 0 {
		t.Fatal("no running Cilium pods")
	}

	return out
}
