package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The loopback subnets of the adopt tests (no other test uses them).
const (
	adoptSubnet        = "127.0.125.0/24"
	adoptRefusalSubnet = "127.0.126.0/24"
)

// readOnlyRPCs are the Talos API calls a plan may make: reads of COSI
// resources, the version, the etcd members and the admin kubeconfig. Anything else (ApplyConfiguration, Reset,
// Reboot, Shutdown, Upgrade, Bootstrap, etcd changes, ...) is a write.
var readOnlyRPCs = []string{
	"/cosi.resource.State/Get",
	"/cosi.resource.State/List",
	"/machine.MachineService/Version",
	"/machine.MachineService/EtcdMemberList",
	// The admin kubeconfig, as `talosctl kubeconfig` reads it: Talos builds
	// it from the cluster's CA and changes nothing on the node
	// (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Kubeconfig).
	"/machine.MachineService/Kubeconfig",
}

// adoptWorld starts emulated machines in maintenance mode with fast stages.
func adoptWorld(t *testing.T, subnet string, machines ...talosemu.MachineSpec) *talosemu.World {
	t.Helper()

	fast := talosemu.Durations{
		Install: talosemu.Duration(100 * time.Millisecond), Reboot: talosemu.Duration(100 * time.Millisecond), Boot: talosemu.Duration(50 * time.Millisecond),
	}

	w, err := talosemu.Start(context.Background(), &talosemu.Spec{Subnet: subnet, Machines: machines, Durations: fast}, t.TempDir(), talosemu.Options{NoControlAPI: true})
	must(t, err)
	t.Cleanup(w.Close)

	return w
}

// makeTalosctl makes a cluster as talosctl does and writes the operator's
// talosconfig and `talosctl gen secrets` file; it returns their paths.
func makeTalosctl(t *testing.T, c talosemu.TalosctlCluster) (talosconfig, secretsFile string) {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	res, err := talosemu.MakeTalosctlCluster(ctx, c)
	must(t, err)

	dir := t.TempDir()
	talosconfig, secretsFile = filepath.Join(dir, "talosconfig"), filepath.Join(dir, "secrets.yaml")
	must(t, os.WriteFile(talosconfig, res.Talosconfig, 0o600))
	must(t, os.WriteFile(secretsFile, res.SecretsYAML, 0o600))

	return talosconfig, secretsFile
}

// checkOnlyReads fails when a machine received a call that is not a read.
func checkOnlyReads(t *testing.T, ms ...*talosemu.Machine) {
	t.Helper()

	for _, m := range ms {
		for method, n := range m.RPCCounts() {
			if !slices.Contains(readOnlyRPCs, method) {
				t.Errorf("%s received %d %s during the plan", m.Name(), n, method)
			}
		}
	}
}

// kubeState is every Ichor resource and Secret the API server holds, with
// its resourceVersion.
func kubeState(t *testing.T) []string {
	t.Helper()

	ctx := context.Background()

	var out []string

	add := func(kind string, list client.ObjectList) {
		must(t, k8s.List(ctx, list))

		items, err := metaItems(list)
		must(t, err)

		for _, o := range items {
			out = append(out, kind+" "+o.GetNamespace()+"/"+o.GetName()+" "+o.GetResourceVersion())
		}
	}

	add("TalosCluster", &ichorv1alpha1.TalosClusterList{})
	add("TalosMachine", &ichorv1alpha1.TalosMachineList{})
	add("TalosConfigPatch", &ichorv1alpha1.TalosConfigPatchList{})
	add("IchorInstallation", &ichorv1alpha1.IchorInstallationList{})
	add("Secret", &corev1.SecretList{})
	add("Namespace", &corev1.NamespaceList{})

	sort.Strings(out)

	return out
}

// TestAdoptPlanWritesNothing: a cluster talosctl made, with Talos's CNI off
// and Cilium as an inline manifest, is planned with the operator's own
// talosconfig: the plan names the versions, the contract probe's choice, the
// CNI and where it came from, kube-proxy, KubePrism, the inline manifest and
// each machine's drift (B: the Cilium entry; nothing blocks), as a table and
// as JSON, with the bundle file and with a bundle rebuilt from the control
// plane. Nothing is written: no Ichor resource or Secret appears or changes
// in the API server, no call but reads reaches a node, nothing is stored
// under the home directory. Taking Cilium over is checked over the cluster's
// Kubernetes API, which this world does not run: the plan and the write are
// refused with the way out, after the same reads.
func TestAdoptPlanWritesNothing(t *testing.T) {
	w := adoptWorld(t, adoptSubnet,
		talosemu.MachineSpec{Name: "their-cp", Role: talosemu.RoleHintControlPlane},
		talosemu.MachineSpec{Name: "their-w", Role: talosemu.RoleHintWorker})
	cp, wk := w.Machines()[0], w.Machines()[1]

	tc, sec := makeTalosctl(t, talosemu.TalosctlCluster{
		Name: "theirs", ControlPlanes: []*talosemu.Machine{cp}, Workers: []*talosemu.Machine{wk},
		CNI: talosemu.TalosctlCNINone, InlineManifests: []talosemu.InlineManifest{talosemu.CiliumInlineManifest("kubernetes")},
	})

	before := kubeState(t)
	home := t.TempDir()
	inv := invocation{env: []string{"HOME=" + home}}

	cp.ResetRPCCounts()
	wk.ResetRPCCounts()

	// Writing it takes Cilium over, which is checked over the cluster's
	// Kubernetes API first; this world runs none, so the write is refused
	// after the read-only plan, before anything is written.
	unread := "the running Cilium could not be read over the cluster's Kubernetes API"
	r := mustFail(t, ichorWith(t, inv, "adopt", "--talosconfig", tc, "--node", cp.IP(), "--node", wk.IP(), "--secrets-bundle", sec, "--yes"),
		unread, "https://"+cp.IP()+":6443", "add --cni-unmanaged to adopt the cluster with its Cilium left as it runs", "is refused; nothing was changed")
	checkNoCredential(t, r.all(), tc)
	checkOnlyReads(t, cp, wk)

	args := []string{"adopt", "--plan", "--talosconfig", tc, "--node", cp.IP(), "--node", wk.IP()}

	r = mustFail(t, ichorWith(t, inv, append(args, "--secrets-bundle", sec)...), unread)
	checkNoCredential(t, r.all(), tc)

	for _, want := range []string{
		"Adoption plan for cluster theirs (read-only: nothing was written, no change was sent to a node)",
		"https://" + cp.IP() + ":6443",
		"Talos:", "v1.14.1", "Kubernetes:", "1.37.2",
		"v1.14 (probed; v1.14: 0 unrepresentable, v1.13:", "v1.12:",
		"cilium (inline manifest cilium, IPAM kubernetes); taken over as Ichor's Cilium (spec.cni.preset: cilium)",
		"Talos CNI setting:", "none",
		"kube-proxy:", "enabled (Talos deploys it)",
		"KubePrism:", "port 7445",
		"inline manifest:", "cilium: ServiceAccount kube-system/cilium, ConfigMap kube-system/cilium-config, DaemonSet kube-system/cilium",
		cp.IP(), wk.IP(), "controlplane", "worker", "adoptable",
		"B  removed  v1alpha1:cluster.inlineManifests: the Cilium inline manifest",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the plan does not say %q:\n%s", want, r.stdout)
		}
	}

	if strings.Contains(r.stdout, "blocked") {
		t.Errorf("a machine is blocked:\n%s", r.stdout)
	}

	r = mustFail(t, ichorWith(t, inv, append(args, "--recover-secrets", "-o", "json")...), unread)

	var p adopt.Plan
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}

	if p.Cluster.Name != "theirs" || p.Cluster.VersionContract != "v1.14" || p.Cluster.CNIPreset != ichorv1alpha1.CNIPresetCilium ||
		len(p.Cluster.CNIs) != 1 || p.Cluster.CNIs[0].Source != adopt.SourceInlineManifest || p.Cluster.KubePrismPort != 7445 || !p.Cluster.KubeProxy {
		t.Errorf("-o json cluster: %+v", p.Cluster)
	}

	if len(p.Machines) != 2 || p.Machines[0].UUID != cp.UUID() || p.Machines[1].Role != ichorv1alpha1.RoleWorker {
		t.Fatalf("-o json machines: %d", len(p.Machines))
	}

	for _, m := range p.Machines {
		if m.Blocked || adopt.Count(m.Drift, adopt.ClassBlocking) != 0 {
			t.Errorf("%s blocked with a bundle rebuilt from the control plane: %+v", m.Address, m.Drift)
		}
	}

	if strings.Contains(r.stdout, "BEGIN") || strings.Contains(r.stdout, "contents") {
		t.Errorf("-o json shows configuration material:\n%s", r.stdout)
	}

	checkOnlyReads(t, cp, wk)

	if n := cp.RPCCounts()["/cosi.resource.State/Get"]; n == 0 {
		t.Errorf("the plan read nothing from the control plane: %v", cp.RPCCounts())
	}

	if after := kubeState(t); !slices.Equal(before, after) {
		t.Errorf("the plan changed the API server:\nbefore %v\nafter  %v", before, after)
	}

	entries, err := os.ReadDir(home)
	must(t, err)

	if len(entries) != 0 {
		t.Errorf("the plan stored files under HOME: %v", entries)
	}
}

// TestAdoptRefusals (plan time): what adoption never takes is refused with
// the nodes and what they run, and nothing is written: Talos older than
// v1.12, mixed versions, two CNIs (Talos's flannel beside an inline Cilium),
// a cluster-pool Cilium, a control plane left out of the nodes given.
func TestAdoptRefusals(t *testing.T) {
	w := adoptWorld(t, adoptRefusalSubnet,
		talosemu.MachineSpec{Name: "old-cp", Role: talosemu.RoleHintControlPlane, TalosVersion: "v1.11.5"},
		talosemu.MachineSpec{Name: "mixed-cp", Role: talosemu.RoleHintControlPlane},
		talosemu.MachineSpec{Name: "mixed-w", Role: talosemu.RoleHintWorker, TalosVersion: "v1.13.4"},
		talosemu.MachineSpec{Name: "two-cp", Role: talosemu.RoleHintControlPlane},
		talosemu.MachineSpec{Name: "pool-cp", Role: talosemu.RoleHintControlPlane},
		talosemu.MachineSpec{Name: "left-cp1", Role: talosemu.RoleHintControlPlane},
		talosemu.MachineSpec{Name: "left-cp2", Role: talosemu.RoleHintControlPlane},
	)
	m := func(name string) *talosemu.Machine {
		em, err := w.Machine(name)
		must(t, err)

		return em
	}

	cilium := []talosemu.InlineManifest{talosemu.CiliumInlineManifest("kubernetes")}
	before := kubeState(t)
	parent := t
	// made keeps the files of the clusters made, by first control plane.
	made := map[string][2]string{}

	for _, tc := range []struct {
		name    string
		cluster talosemu.TalosctlCluster
		// given, when set, are the machines named with --node (default: the cluster's)
		given []*talosemu.Machine
		extra []string
		want  []string
	}{
		{
			name:    "older than v1.12",
			cluster: talosemu.TalosctlCluster{Name: "old", ControlPlanes: []*talosemu.Machine{m("old-cp")}, CNI: talosemu.TalosctlCNINone, InlineManifests: cilium},
			want:    []string{m("old-cp").IP() + " runs Talos v1.11.5, older than v1.12", "upgrade Talos first"},
		},
		{
			name: "mixed versions",
			cluster: talosemu.TalosctlCluster{
				Name: "mixed", ControlPlanes: []*talosemu.Machine{m("mixed-cp")}, Workers: []*talosemu.Machine{m("mixed-w")}, CNI: talosemu.TalosctlCNINone, InlineManifests: cilium,
			},
			want: []string{"different Talos versions", "v1.13.4 on " + m("mixed-w").IP(), "v1.14.1 on " + m("mixed-cp").IP(), "upgrade Talos first"},
		},
		{
			name:    "two CNIs",
			cluster: talosemu.TalosctlCluster{Name: "two", ControlPlanes: []*talosemu.Machine{m("two-cp")}, CNI: talosemu.TalosctlCNIFlannel, InlineManifests: cilium},
			want:    []string{"two CNIs", "flannel (Talos's own, machine configuration) and cilium (inline manifest cilium, IPAM kubernetes)"},
		},
		{
			name:  "two CNIs with --cni-unmanaged",
			extra: []string{"--cni-unmanaged"},
			want:  []string{"two CNIs"},
		},
		{
			name: "cluster-pool Cilium",
			cluster: talosemu.TalosctlCluster{
				Name: "pool", ControlPlanes: []*talosemu.Machine{m("pool-cp")}, CNI: talosemu.TalosctlCNINone,
				InlineManifests: []talosemu.InlineManifest{talosemu.CiliumInlineManifest("cluster-pool")},
			},
			want: []string{`Cilium runs with IPAM "cluster-pool"`, "kubernetes IPAM mode first"},
		},
		{
			name: "a control plane left out",
			cluster: talosemu.TalosctlCluster{
				Name: "left", ControlPlanes: []*talosemu.Machine{m("left-cp1"), m("left-cp2")}, CNI: talosemu.TalosctlCNINone, InlineManifests: cilium,
			},
			given: []*talosemu.Machine{m("left-cp1")},
			want:  []string{"etcd has members that are not among the nodes given", "every control plane", "--node"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cluster.Name == "" {
				// the previous case's cluster, with other flags
				tc.cluster.ControlPlanes = []*talosemu.Machine{m("two-cp")}
			}

			var talosconfig, secretsFile string

			key := tc.cluster.ControlPlanes[0].Name()
			if f, ok := made[key]; ok {
				talosconfig, secretsFile = f[0], f[1]
			} else {
				talosconfig, secretsFile = makeTalosctl(parent, tc.cluster)
				made[key] = [2]string{talosconfig, secretsFile}
			}

			ms := append(append([]*talosemu.Machine{}, tc.cluster.ControlPlanes...), tc.cluster.Workers...)
			if tc.given != nil {
				waitEtcdMembers(t, talosconfig, tc.cluster.ControlPlanes[0], len(tc.cluster.ControlPlanes))

				ms = tc.given
			}
			args := []string{"adopt", "--plan", "--talosconfig", talosconfig, "--secrets-bundle", secretsFile}

			for _, em := range ms {
				em.ResetRPCCounts()

				args = append(args, "--node", em.IP())
			}

			r := mustFail(t, ichor(t, append(args, tc.extra...)...), append([]string{"is refused; nothing was changed"}, tc.want...)...)
			checkNoCredential(t, r.all(), talosconfig)
			checkOnlyReads(t, ms...)
		})
	}

	if after := kubeState(t); !slices.Equal(before, after) {
		t.Errorf("the refused plans changed the API server:\nbefore %v\nafter  %v", before, after)
	}
}

// waitEtcdMembers waits until etcd, read through cp with the talosconfig,
// lists n members (a control plane joins after the bootstrap).
func waitEtcdMembers(t *testing.T, talosconfig string, cp *talosemu.Machine, n int) {
	t.Helper()

	cfg, err := clientconfig.Open(talosconfig)
	must(t, err)

	testenv.EventuallyOK(t, 2*time.Minute, fmt.Sprintf("%d etcd members", n), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		c, err := talosclient.New(ctx, talosclient.WithConfig(cfg), talosclient.WithEndpoints(cp.IP()))
		if err != nil {
			return false, err.Error()
		}
		defer c.Close() //nolint:errcheck // a read

		resp, err := c.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
		if err != nil {
			return false, err.Error()
		}

		got := 0
		for _, msg := range resp.GetMessages() {
			got += len(msg.GetMembers())
		}

		return got == n, fmt.Sprintf("%d members", got)
	})
}

// metaItems are a list's objects.
func metaItems(list client.ObjectList) ([]metav1.Object, error) {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}

	out := make([]metav1.Object, 0, len(objs))

	for _, o := range objs {
		mo, err := meta.Accessor(o)
		if err != nil {
			return nil, err
		}

		out = append(out, mo)
	}

	return out, nil
}

// TestAdoptFlagMisuse: flags that belong to another phase are refused by
// name before anything is read or written.
func TestAdoptFlagMisuse(t *testing.T) {
	before := kubeState(t)

	mustFail(t, ichor(t, "adopt", "--release"), "--release needs --cluster NAME")
	mustFail(t, ichor(t, "adopt", "--plan", "--cluster", "x", "--talosconfig", "tc", "--node", "127.0.0.1"),
		"--cluster names the cluster of --release or --add-machine")
	mustFail(t, ichor(t, "adopt", "--release", "--cluster", "x", "--node", "127.0.0.1"), "--node is not a flag of --release")
	mustFail(t, ichor(t, "adopt", "--add-machine", "127.0.0.1"), "--add-machine needs --cluster NAME")
	mustFail(t, ichor(t, "adopt", "--cluster", "x", "--add-machine", "127.0.0.1", "--talosconfig", "tc"), "--talosconfig belongs to the adoption of a whole cluster")
	mustFail(t, ichor(t, "adopt", "--cluster", "x", "--add-machine", "node-1"), `--add-machine "node-1" is not an IP address`)
	mustFail(t, ichor(t, "adopt", "--release", "--cluster", "absent", "-n", "default"), "absent")

	if after := kubeState(t); !slices.Equal(before, after) {
		t.Errorf("the refusals changed the API server:\nbefore %v\nafter  %v", before, after)
	}
}
