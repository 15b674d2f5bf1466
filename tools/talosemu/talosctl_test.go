package talosemu_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

// talosctlBinary is the real talosctl that `go tool task tools:talosctl` builds (the Taskfile
// exports its path as TALOSCTL).
func talosctlBinary(t *testing.T) string {
	t.Helper()

	path := os.Getenv("TALOSCTL")
	if path == "" {
		home, _ := os.UserHomeDir()
		path = filepath.Join(home, ".cache", "ichor", "bin", "talosctl-v1.14.1")

		if _, err := os.Stat(path); err != nil {
			t.Skipf("the real talosctl is not built (%s): run `go tool task tools:talosctl`, or set TALOSCTL", path)
		}
	}

	if _, err := os.Stat(path); err != nil {
		t.Fatalf("TALOSCTL=%s: %v (build it with `go tool task tools:talosctl`)", path, err)
	}

	return path
}

// talosctlWorld is the emulated cluster the talosctl table runs against: three control planes
// (CP is the endpoint) and two workers with Kubernetes, and a machine in maintenance.
type talosctlWorld struct {
	w                         *talosemu.World
	cp, cp2, cp3, w1, w2, mnt *talosemu.Machine
	c                         *realCluster
	kube                      *kubernetes.Clientset
	talosconfig, bin          string
	cpBoots                   int

	// nodeWatch records, per Node, whether it was seen unschedulable (cordoned) while it ran
	nodeMu     sync.Mutex
	cordonSeen map[string]bool
	drainProbe map[types.UID]bool
	nodeNames  map[*talosemu.Machine]string
}

// node is m's Kubernetes Node name (its lower-cased hostname).
func (tw *talosctlWorld) node(m *talosemu.Machine) string { return tw.nodeNames[m] }

// watchCordons records every Node seen unschedulable until ctx ends.
func (tw *talosctlWorld) watchCordons(ctx context.Context, t *testing.T) {
	t.Helper()

	tw.nodeMu.Lock()
	tw.cordonSeen = map[string]bool{}
	tw.nodeMu.Unlock()

	ready := make(chan struct{})

	go func() {
		once := sync.OnceFunc(func() { close(ready) })
		defer once()

		for ctx.Err() == nil {
			wi, err := tw.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(200 * time.Millisecond) // poll interval while the API server is away

				continue
			}

			once()

			for ev := range wi.ResultChan() {
				if n, ok := ev.Object.(*corev1.Node); ok && n.Spec.Unschedulable {
					tw.nodeMu.Lock()
					tw.cordonSeen[n.Name] = true
					tw.nodeMu.Unlock()
				}
			}
		}
	}()

	<-ready
}

func (tw *talosctlWorld) cordoned(node string) bool {
	tw.nodeMu.Lock()
	defer tw.nodeMu.Unlock()

	return tw.cordonSeen[node]
}

// waitHealthy waits until every machine of the cluster runs and its Node is Ready again.
func (tw *talosctlWorld) waitHealthy(t *testing.T) {
	t.Helper()

	for _, m := range []*talosemu.Machine{tw.cp, tw.cp2, tw.cp3, tw.w1, tw.w2} {
		waitStage(t, tw.c.factory(m.IP()), runtime.MachineStageRunning)
	}

	waitNodes(t, tw.kube, 5, nodeReady, "5 Ready nodes")
}

type talosctlCase struct {
	name string
	// args, with CP, W1, W2 and MAINT replaced by the machines' addresses
	args []string
	// before runs first (faults, snapshots)
	before func(t *testing.T, tw *talosctlWorld)
	// wantErr: talosctl exits non-zero
	wantErr bool
	// want: substrings of stdout+stderr; check: anything else Talos would show
	want  []string
	check func(t *testing.T, tw *talosctlWorld, out string)
}

// talosctlCases is what Ichor's users and Ichor itself do with talosctl, each with what a real
// Talos v1.14.1 node answers. Grow it with each surface Ichor uses.
var talosctlCases = []talosctlCase{
	// maintenance: talosctl dials the node itself, pinning nothing (--insecure)
	{name: "maintenance version", args: []string{"-n", "MAINT", "version", "--insecure"}, want: []string{"Tag:", "v1.14.1"}},
	{name: "maintenance get disks", args: []string{"-n", "MAINT", "get", "disks", "--insecure"}, want: []string{"nvme0n1"}},
	{name: "maintenance get machinestatus", args: []string{"-n", "MAINT", "get", "machinestatus", "--insecure"}, want: []string{"maintenance"}},
	// configured, direct
	{name: "configured version direct", args: []string{"-e", "CP", "-n", "CP", "version"}, want: []string{"NODE:", "CP", "Tag:"}},
	// cluster discovery: every control plane and worker is a member, seen from any node
	{
		name: "get members", args: []string{"-e", "CP", "-n", "W1", "get", "members"},
		want: []string{"Member", "CP", "CP2", "CP3", "W1", "W2", "controlplane", "worker", "Talos (v1.14.1)"},
	},
	{name: "get affiliates", args: []string{"-e", "CP", "-n", "CP2", "get", "affiliates"}, want: []string{"Affiliate", "CP", "W2", "controlplane", "worker"}},
	// the control plane's static pods with their images, and their configs
	{
		name: "get kubeletconfig", args: []string{"-e", "CP", "-n", "W1", "get", "kubeletconfig", "-o", "yaml"},
		want: []string{"id: kubelet", "image: ghcr.io/siderolabs/kubelet:v1.37.2", "clusterDomain: cluster.local", "10.96.0.10"},
	},
	{
		name: "get apiserverconfig", args: []string{"-e", "CP", "-n", "CP", "get", "apiserverconfig"},
		want: []string{"kube-apiserver", "final-kube-apiserver"},
	},
	{
		name: "get manifests", args: []string{"-e", "CP", "-n", "CP", "get", "manifests"},
		want: []string{"00-kubelet-bootstrapping-token", "05-flannel", "10-kube-proxy", "11-core-dns", "11-core-dns-svc", "11-talos-node-rbac-template"},
	},
	{name: "get routes", args: []string{"-e", "CP", "-n", "W1", "get", "routes"}, want: []string{"RouteStatus", "inet4", "fe80::/64"}},
	{name: "get volumestatus", args: []string{"-e", "CP", "-n", "W2", "get", "volumestatus"}, want: []string{"VolumeStatus", "EPHEMERAL", "STATE", "META", "ready"}},
	// talosctl health runs Talos's cluster checks (pkg/cluster/check) client side over the
	// emulated APIs and Kubernetes
	{
		name: "health of a healthy cluster", args: []string{"-e", "CP", "-n", "CP", "health", "--server=false", "--wait-timeout", "4m"},
		want: []string{"etcd to be healthy: OK", "apid to be ready: OK", "all control plane components to be ready: OK", "kube-proxy to report ready: OK", "coredns to report ready: OK", "all k8s nodes to report schedulable: OK"},
	},
	// once health passes every control plane runs its static pods
	{
		name: "get staticpodstatus", args: []string{"-e", "CP", "-n", "CP2", "get", "staticpodstatus", "-o", "yaml"},
		want: []string{
			"id: kube-system/kube-apiserver-", "id: kube-system/kube-controller-manager-", "id: kube-system/kube-scheduler-",
			"image: registry.k8s.io/kube-apiserver:v1.37.2", "image: registry.k8s.io/kube-scheduler:v1.37.2", "phase: Running",
		},
	},
	{
		name: "health with a worker powered off", args: []string{"-e", "CP", "-n", "CP", "health", "--server=false", "--wait-timeout", "30s"},
		before: func(t *testing.T, tw *talosctlWorld) {
			if err := tw.w2.PowerOff(); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: true, want: []string{"etcd to be healthy: OK", "waiting for apid to be ready", "W2"},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if err := tw.w2.PowerOn(); err != nil {
				t.Fatal(err)
			}

			tw.waitHealthy(t)
		},
	},
	// talosctl health's default (--server=true): the node runs the same checks
	// (ClusterService.HealthCheck) and streams their lines
	{
		name: "health on the server", args: []string{"-e", "CP", "-n", "CP", "health", "--wait-timeout", "2m"},
		want: []string{"discovered nodes:", "CP3", "W2", "waiting for etcd to be healthy: OK", "waiting for all control plane components to be ready: OK", "waiting for coredns to report ready: OK", "waiting for all k8s nodes to report schedulable: OK"},
	},
	{
		name: "health on the server with a control plane powered off", args: []string{"-e", "CP", "-n", "CP", "health", "--wait-timeout", "20s"},
		before: func(t *testing.T, tw *talosctlWorld) {
			if err := tw.cp3.PowerOff(); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: true, want: []string{"waiting for etcd to be healthy: error getting service info for service \"etcd\" from node \"CP3\"", "context deadline exceeded"},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if err := tw.cp3.PowerOn(); err != nil {
				t.Fatal(err)
			}

			tw.waitHealthy(t)
		},
	},
	{name: "health through a worker", args: []string{"-e", "CP", "-n", "W1", "health"}, wantErr: true, want: []string{"cluster health check is only available on control plane nodes"}},
	{name: "configured services direct", args: []string{"-e", "CP", "-n", "CP", "services"}, want: []string{"apid", "Running", "trustd"}},
	// through an endpoint: the answer is the named node's
	{
		name: "get machinestatus through the endpoint", args: []string{"-e", "CP", "-n", "W1", "get", "machinestatus"},
		want: []string{"W1", "running"},
	},
	{
		name: "read the worker's boot ID through the endpoint", args: []string{"-e", "CP", "-n", "W1", "read", "/proc/sys/kernel/random/boot_id"},
		check: func(t *testing.T, tw *talosctlWorld, out string) {
			if strings.TrimSpace(out) != tw.w1.Info().BootID {
				t.Errorf("boot ID %q, want the worker's %q (the endpoint's is %q)", strings.TrimSpace(out), tw.w1.Info().BootID, tw.cp.Info().BootID)
			}
		},
	},
	{
		name: "worker services through the endpoint", args: []string{"-e", "CP", "-n", "W1", "services"},
		want: []string{"kubelet"},
		check: func(t *testing.T, _ *talosctlWorld, out string) {
			if strings.Contains(out, "trustd") {
				t.Error("a worker's services list trustd: the endpoint answered instead of the worker")
			}
		},
	},
	// many nodes
	{name: "version of many nodes", args: []string{"-e", "CP", "-n", "CP,W1,W2", "version"}, want: []string{"NODE:", "CP", "W1", "W2"}},
	{
		name: "many nodes, one powered off", args: []string{"-e", "CP", "-n", "W1,W2", "version"},
		before: func(t *testing.T, tw *talosctlWorld) {
			if err := tw.w2.PowerOff(); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: true, want: []string{"W1", "W2"},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if err := tw.w2.PowerOn(); err != nil {
				t.Fatal(err)
			}

			tw.waitHealthy(t)
		},
	},
	// refusals
	{name: "a worker endpoint forwards nothing", args: []string{"-e", "W1", "-n", "CP", "version"}, wantErr: true, want: []string{"no request forwarding"}},
	// lifecycle through the endpoint: it acts on the named node, not on the endpoint
	{
		name: "upgrade --wait of a worker through the control plane, drained",
		args: []string{
			"-e", "CP", "-n", "W1", "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.14.2",
			"--wait", "--timeout", "3m",
		},
		before: func(t *testing.T, tw *talosctlWorld) {
			// a pod on the worker, which the drain must evict
			dep := deployment("drain-probe", 2)
			dep.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: tw.node(tw.w1)}

			if _, err := tw.kube.AppsV1().Deployments("default").Create(t.Context(), dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}

			waitDeployment(t, tw.kube, "drain-probe")

			pods, err := tw.kube.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=drain-probe"})
			if err != nil || len(pods.Items) != 2 {
				t.Fatalf("drain-probe pods: %v %v", pods, err)
			}

			tw.drainProbe = map[types.UID]bool{pods.Items[0].UID: true, pods.Items[1].UID: true}

			ctx, cancel := context.WithCancel(t.Context())
			t.Cleanup(cancel)
			tw.watchCordons(ctx, t)
		},
		want: []string{"upgrade completed"},
		check: func(t *testing.T, tw *talosctlWorld, out string) {
			if v := tw.w1.Info().Version; v != "v1.14.2" {
				t.Errorf("worker version after upgrade --wait: %s, want v1.14.2 (output %s)", v, out)
			}

			if info := tw.cp.Info(); info.Version != "v1.14.1" || info.Boots != tw.cpBoots {
				t.Errorf("the endpoint changed: version %s, boots %d→%d", info.Version, tw.cpBoots, info.Boots)
			}

			// talosctl cordoned and drained the worker, then uncordoned it once Ready; the
			// endpoint's Node was never cordoned
			if !tw.cordoned(tw.node(tw.w1)) {
				t.Errorf("the worker's Node %s was never cordoned", tw.node(tw.w1))
			}

			if tw.cordoned(tw.node(tw.cp)) {
				t.Errorf("the endpoint's Node %s was cordoned", tw.node(tw.cp))
			}

			n, err := tw.kube.CoreV1().Nodes().Get(t.Context(), tw.node(tw.w1), metav1.GetOptions{})
			if err != nil || n.Spec.Unschedulable {
				t.Errorf("the worker's Node after upgrade --wait: unschedulable=%v, %v (want uncordoned)", n.Spec.Unschedulable, err)
			}

			pods, err := tw.kube.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=drain-probe"})
			if err != nil {
				t.Fatal(err)
			}

			for _, p := range pods.Items {
				if tw.drainProbe[p.UID] {
					t.Errorf("the pod on the worker was not evicted: %s %s", p.Name, p.Status.Phase)
				}
			}
		},
	},
	{
		name: "reboot --wait of a worker through the control plane",
		// talosctl reboot drains only with --drain (default false)
		args: []string{"-e", "CP", "-n", "W1", "reboot", "--wait", "--timeout", "2m"},
		before: func(t *testing.T, tw *talosctlWorld) {
			t.Setenv("W1_BOOT", tw.w1.Info().BootID)
		},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if tw.w1.Info().BootID == os.Getenv("W1_BOOT") {
				t.Error("reboot --wait returned before the worker rebooted")
			}

			if tw.cp.Info().Boots != tw.cpBoots {
				t.Error("the endpoint rebooted")
			}
		},
	},
	{
		name: "reset --wait of a worker through the control plane",
		args: []string{
			"-e", "CP", "-n", "W2", "reset", "--graceful=false", "--reboot",
			"--system-labels-to-wipe", "STATE", "--wait", "--timeout", "2m",
		},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if !tw.w2.Info().Maintenance {
				t.Errorf("the worker is not in maintenance after reset --wait: %+v", tw.w2.Info())
			}

			if tw.cp.Info().Maintenance || tw.cp.Info().Boots != tw.cpBoots {
				t.Error("the endpoint was reset")
			}
		},
	},
}

// TestTalosctlConformance runs the real talosctl v1.14.1 against emulated machines: three
// control planes (the first is the endpoint) and two workers with Kubernetes (kube-apiserver,
// controller-manager, scheduler, kwok), and one machine in maintenance.
func TestTalosctlConformance(t *testing.T) {
	bin := talosctlBinary(t)

	opt := testOptions()
	opt.Kubernetes, opt.KubeAssets = true, kubeAssets(t)

	spec := testSpec(6)
	for i, name := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2", "maint"} {
		spec.Machines[i].Name = name
	}

	w, err := talosemu.Start(t.Context(), spec, t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(w.Close)

	ms := w.Machines()
	tw := &talosctlWorld{w: w, cp: ms[0], cp2: ms[1], cp3: ms[2], w1: ms[3], w2: ms[4], mnt: ms[5], bin: bin}

	tw.c = newRealCluster(t, tw.cp.IP(), nil)
	tw.c.provisionAll(t, ms[:3], ms[3:5])
	waitStage(t, maintenanceFactory(tw.mnt.IP()), runtime.MachineStageMaintenance)

	a := tw.c.admin(t, tw.cp.IP())
	if _, err := a.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	kc, err := a.Kubeconfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	tw.kube = kubeClient(t, kc)
	waitNodes(t, tw.kube, 5, nodeReady, "5 Ready nodes")

	tw.nodeNames = map[*talosemu.Machine]string{}
	for _, m := range ms[:5] {
		tw.nodeNames[m] = strings.ToLower(hostnameOf(t, tw.c.admin(t, m.IP())))
	}

	tw.cpBoots = tw.cp.Info().Boots
	tw.talosconfig = filepath.Join(t.TempDir(), "talosconfig")

	if err := tw.c.talosconfig.Save(tw.talosconfig); err != nil {
		t.Fatal(err)
	}

	replacer := strings.NewReplacer("MAINT", tw.mnt.IP(), "CP2", tw.cp2.IP(), "CP3", tw.cp3.IP(), "CP", tw.cp.IP(), "W1", tw.w1.IP(), "W2", tw.w2.IP())

	for _, tc := range talosctlCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t, tw)
			}

			args := append([]string{"--talosconfig", tw.talosconfig}, tc.args...)
			for i := range args {
				args[i] = replacer.Replace(args[i])
			}

			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()

			var out bytes.Buffer

			cmd := exec.CommandContext(ctx, tw.bin, args...) //nolint:gosec // the talosctl under test, with the table's arguments
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.Env = append(os.Environ(), "TALOSCONFIG="+tw.talosconfig)
			err := cmd.Run()

			t.Logf("talosctl %s\n%s", strings.Join(args[2:], " "), out.String())

			if tc.wantErr != (err != nil) {
				t.Fatalf("talosctl exit: %v, want error %v", err, tc.wantErr)
			}

			for _, want := range tc.want {
				if w := replacer.Replace(want); !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}

			if tc.check != nil {
				tc.check(t, tw, out.String())
			}
		})
	}
}
