package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The loopback subnets of the Cilium takeover's world (no other test uses them).
const (
	adoptCiliumSubnet   = "127.0.209.0/24"
	adoptCiliumPodRange = "127.209.0.0/24"
	adoptHelmSubnet     = "127.0.210.0/24"
	adoptHelmPodRange   = "127.210.0.0/24"
	adoptNoCNISubnet    = "127.0.211.0/24"
	adoptNoCNIPodRange  = "127.211.0.0/24"
)

// TestAdoptTalosctlCluster: a cluster of three control planes and two
// workers made with the real talosctl, Talos's CNI off and Cilium (the
// chart one minor below the pinned one, rendered for one Node as a person
// following Talos's guide would) as an inline manifest, no Ichor involved,
// is adopted with its Cilium taken over:
//
//   - the plan reads the running Cilium over the cluster's Kubernetes API
//     and refuses the write until --accept-cilium-diff, naming what differs
//     (the operator's replicas: Ichor runs two on a cluster of five Nodes);
//   - the write records the takeover (annotation, the foreign entry's name,
//     the tunnel carried over) and holds every machine; no configuration
//     reaches a node while held;
//   - the controller, killed with SIGKILL at random moments from its start
//     to the end of the release, hands Cilium over to Ichor's Helm release
//     (the ichor-cni Job, TakeOwnership): the DaemonSet is the release's and
//     its pods were never replaced;
//   - the release waits for the hand-over, then releases the five machines,
//     control planes first; the control planes' configuration no longer
//     carries the foreign inline entry;
//   - every machine then runs its render (no drift), and a config rollout
//     reaches the five.
func TestAdoptTalosctlCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	w, err := startWorldIn(adoptCiliumSubnet, 5, 3, adoptCiliumPodRange)
	testenv.Must(t, err)
	t.Cleanup(w.stop)

	cps, workers := w.machines[:3], w.machines[3:]
	const name = "theirs-cilium"

	// Cilium as the Talos guide installs it: `helm template` of the chart,
	// as an inline manifest of the control planes, Talos's CNI off.
	r, err := cilium.Render(ctx, cilium.Options{Version: bootCilium, KubernetesVersion: "1.37.2", Choices: ciliumvalues.Choices{Nodes: 1}})
	testenv.Must(t, err)

	dir := t.TempDir()
	inline, cniOff := filepath.Join(dir, "inline.yaml"), filepath.Join(dir, "cni.yaml")
	writeYAML(t, inline, map[string]any{"cluster": map[string]any{"inlineManifests": []any{map[string]any{"name": "cilium", "contents": r.Manifest}}}})
	testenv.Must(t, os.WriteFile(cniOff, []byte(flannelOff), 0o600))

	tc, secretsFile := makeTalosctlClusterWith(ctx, t, name, cps, workers, "--config-patch", "@"+cniOff, "--config-patch-control-plane", "@"+inline)

	before := map[string]int{}

	for _, m := range w.machines {
		c, err := w.rpcs(ctx, m.Name)
		testenv.Must(t, err)
		before[m.Name] = c[applyRPC]
	}

	flags := make([]string, 0, 4+2*len(w.machines))
	flags = append(flags, "--talosconfig", tc, "--secrets-bundle", secretsFile)

	for _, m := range w.machines {
		flags = append(flags, "--node", m.ip())
	}

	// The plan, once Cilium runs on the five Nodes: refused without
	// --accept-cilium-diff, with what the takeover changes.
	var out string

	testenv.EventuallyEvery(t, 8*time.Minute, 3*time.Second, "a plan that checked the running Cilium on five Nodes", func() (bool, string) {
		out, _ = w.ichor(ctx, slices.Concat([]string{"adopt", "--plan"}, flags)...)

		return strings.Contains(out, "agent ready on 5 of 5 Nodes") && !strings.Contains(out, "not healthy on every Node"), out
	})

	for _, want := range []string{
		"cilium (inline manifest cilium, IPAM kubernetes); taken over as Ichor's Cilium",
		"Cilium takeover: Cilium " + bootCilium + " runs, taken over with the chart " + bootCilium + "; IPAM kubernetes, tunnel vxlan",
		"change  Deployment kube-system/cilium-operator: spec.replicas",
		"add --accept-cilium-diff",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not say %q:\n%s", want, out)
		}
	}

	if strings.Contains(out, "(owned: ") {
		t.Errorf("the plan lists Ichor-owned changes for a Cilium made with Ichor's own values:\n%s", out)
	}

	// Nothing else differs: the objects the API server holds compare equal
	// to their render (zero values it drops, quantities it rewrites).
	for _, line := range strings.Split(out, "\n") {
		if (strings.HasPrefix(line, "  change  ") || strings.HasPrefix(line, "  create  ")) && !strings.Contains(line, "cilium-operator") {
			t.Errorf("the plan lists a difference the one-Node render does not make: %q", line)
		}
	}

	write := slices.Concat([]string{"adopt", "--accept-cilium-diff", "--install", "none", "--write-kubeconfig", w.kubeconfig, "--yes"}, flags)

	out = w.mustIchor(t, ctx, write...)
	if !strings.Contains(out, "Cluster "+name+" is adopted and held") {
		t.Errorf("the write:\n%s", out)
	}

	if out, err := w.kubectl(ctx, "get", "taloscluster", name, "-n", "ichor-system", "-o",
		`jsonpath={.spec.cni.preset} {.spec.cni.tunnel} {.metadata.annotations.ichor\.maesh\.dev/cni-bootstrap} {.status.cni.takenOverInlineManifest}`); err != nil ||
		strings.TrimSpace(out) != "cilium vxlan adopt-takeover cilium" {
		t.Errorf("the TalosCluster (preset, tunnel, takeover annotation, foreign entry): %q %v", out, err)
	}

	testenv.Must(t, w.startController())

	k := startKiller(w)

	w.waitHeld(t, name, 5)

	// At least one kill falls in the hold, whatever the machine's pace, and
	// the check below covers the controllers killed in it.
	k.waitKilled(ctx, t, 1)

	for _, m := range w.machines {
		c, err := w.rpcs(ctx, m.Name)
		testenv.Must(t, err)

		if c[applyRPC] != before[m.Name] {
			t.Errorf("%s received %d configuration(s) while held", m.Name, c[applyRPC]-before[m.Name])
		}
	}

	out = w.mustIchor(t, ctx, "adopt", "--release", "--cluster", name, "--timeout", "8m")
	if !strings.Contains(out, "Cilium taken over as Ichor's Helm release") || !strings.Contains(out, "Every machine of cluster "+name+" is released") ||
		!strings.Contains(out, "Release 5/5") {
		t.Errorf("the release:\n%s", out)
	}

	// Control planes first.
	last := 0
	for _, m := range cps {
		last = max(last, strings.Index(out, "(controlplane, "+m.ip()+")"))
	}

	for _, m := range workers {
		if i := strings.Index(out, "(worker, "+m.ip()+")"); i < last {
			t.Errorf("worker %s released before a control plane:\n%s", m.ip(), out)
		}
	}

	_, err = k.halt()
	testenv.Must(t, err)

	// Helm's own record says the release is deployed; the DaemonSet is the
	// release's and was never changed (its pods were not replaced).
	if revs := w.ciliumRevisions(t, ctx); len(revs) == 0 || revs[len(revs)-1] != "deployed" {
		t.Errorf("Helm's records of release cilium: %v", revs)
	}

	var ds struct {
		Metadata struct {
			Generation  int               `json:"generation"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}

	testenv.Must(t, w.kubeJSON(ctx, &ds, "get", "daemonset", "-n", "kube-system", "cilium"))

	if ds.Metadata.Annotations["meta.helm.sh/release-name"] != "cilium" || ds.Metadata.Generation != 1 {
		t.Errorf("DaemonSet cilium after the takeover: annotations %v, generation %d", ds.Metadata.Annotations, ds.Metadata.Generation)
	}

	// The foreign entry went with the first render, after the hand-over.
	ms, err := w.heldMachines(ctx)
	testenv.Must(t, err)

	hashes := map[string]string{}

	for _, m := range ms {
		ready, reason := m.condition("Ready")
		if ready != "True" || m.Status.AppliedConfigHash == "" {
			t.Errorf("%s after the release: Ready %s (%s)", m.Metadata.Name, ready, reason)
		}

		hashes[m.Metadata.Name] = m.Status.AppliedConfigHash

		// Adopted with zero drift: the node runs its render.
		if len(m.Status.DriftPaths) > 0 {
			t.Errorf("%s drifts from its render after the release: %v", m.Metadata.Name, m.Status.DriftPaths)
		}

		if m.Spec.Role == "controlplane" {
			cfg, err := talosctl(ctx, t, tc, "--endpoints", m.Spec.Address, "--nodes", m.Spec.Address, "get", "machineconfig", "-o", "yaml")
			testenv.Must(t, err)

			if strings.Contains(cfg, "inlineManifests") || strings.Contains(cfg, "KubeInlineManifestConfig") {
				t.Errorf("%s still carries the foreign Cilium entry", m.Metadata.Name)
			}
		}
	}

	// A config rollout works on the adopted cluster.
	w.mustIchor(t, ctx, "patch", "create", "tuning", "--cluster", name, "--sysctl", "net.core.somaxconn=65535", "--yes")

	waitRolledOut(t, w, hashes)
}

// flannelOff is the documented patch for a CNI of one's own under Talos
// v1.14's multi-document configuration: the KubeFlannelCNIConfig document
// deleted.
const flannelOff = "apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n"

// bareTalosctlCluster starts a world of one control plane and one worker
// (the pod runner on) and makes a cluster of them with the real talosctl,
// Talos's CNI off and nothing else: no CNI runs. It returns the world, the
// talosconfig and adopt's flags for the two machines.
func bareTalosctlCluster(ctx context.Context, t *testing.T, name, subnet, pods string, emuArgs ...string) (*world, string, []string) {
	t.Helper()

	w, err := startWorldWith(subnet, 2, 1, pods, emuArgs...)
	testenv.Must(t, err)
	t.Cleanup(w.stop)

	cp, wk := w.machines[0], w.machines[1]

	cniOff := filepath.Join(t.TempDir(), "cni.yaml")
	testenv.Must(t, os.WriteFile(cniOff, []byte(flannelOff), 0o600))

	tc, secretsFile := makeTalosctlClusterWith(ctx, t, name, []emuMachine{cp}, []emuMachine{wk}, "--config-patch", "@"+cniOff)

	return w, tc, []string{"--talosconfig", tc, "--secrets-bundle", secretsFile, "--node", cp.ip(), "--node", wk.ip()}
}

func writeYAML(t *testing.T, file string, v any) {
	t.Helper()

	data, err := yaml.Marshal(v)
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(file, data, 0o600))
}

// TestAdoptHelmCilium: a talosctl cluster (one control plane, one worker,
// Talos's CNI off) whose Cilium someone installed with Helm as release
// kube-system/cilium, with a value of their own, is adopted with Cilium taken
// over: the plan names the release's records and carries its values (without
// the Ichor-owned keys) into spec.cni.cilium.values; the write copies each
// record into ichor-cilium-prior-release, byte for byte, and deletes it; the
// controller's ichor-cni Job installs Ichor's release over the running
// objects (a first install, deployed, the DaemonSet never changed); the
// release then hands both machines over.
func TestAdoptHelmCilium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	const name = "theirs-helm"

	w, tc, flags := bareTalosctlCluster(ctx, t, name, adoptHelmSubnet, adoptHelmPodRange)
	cp := w.machines[0]
	dir := t.TempDir()

	// Their Helm install, with the Helm SDK, as `helm install cilium` does.
	kc := filepath.Join(dir, "kubeconfig")

	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "talosctl kubeconfig", func() (bool, string) {
		out, err := talosctl(ctx, t, tc, "--endpoints", cp.ip(), "--nodes", cp.ip(), "kubeconfig", kc, "--force")

		return err == nil, out
	})

	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	testenv.Must(t, err)

	var helmLog strings.Builder

	testenv.EventuallyEvery(t, 5*time.Minute, 5*time.Second, "their Helm install of Cilium", func() (bool, string) {
		_, err := cilium.Apply(ctx, cfg, cilium.Request{
			Version: bootCilium, KubernetesVersion: "1.37.2", Choices: ciliumvalues.Choices{Nodes: 2},
			UserValues: map[string]any{"debug": map[string]any{"enabled": true}},
		}, 3*time.Minute, &helmLog)

		return err == nil, fmt.Sprintf("%v\n%s", err, helmLog.String())
	})

	theirs := w.ciliumRecords(t, ctx, kc)
	if len(theirs) != 1 {
		t.Fatalf("their release's records: %v", theirs)
	}

	var out string

	testenv.EventuallyEvery(t, 5*time.Minute, 3*time.Second, "a plan that checked the running Cilium on two Nodes", func() (bool, string) {
		out, _ = w.ichor(ctx, slices.Concat([]string{"adopt", "--plan"}, flags)...)

		return strings.Contains(out, "agent ready on 2 of 2 Nodes"), out
	})

	for _, want := range []string{
		"Helm release kube-system/cilium (records sh.helm.release.v1.cilium.v1): kept in ichor-cilium-prior-release",
		"its newest record's values become spec.cni.cilium.values, without the Ichor-owned keys",
		"Ichor's render matches every running object",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not say %q:\n%s", want, out)
		}
	}

	out = w.mustIchor(t, ctx, slices.Concat([]string{"adopt", "--install", "none", "--write-kubeconfig", w.kubeconfig, "--yes"}, flags)...)
	if !strings.Contains(out, "sh.helm.release.v1.cilium.v1 kept in ichor-system/ichor-cilium-prior-release, then deleted") {
		t.Errorf("the write:\n%s", out)
	}

	// Their record, kept byte for byte, and gone from kube-system.
	kept, err := w.kubectl(ctx, "get", "secret", "-n", "ichor-system", "ichor-cilium-prior-release", "-o", `jsonpath={.data.sh\.helm\.release\.v1\.cilium\.v1}`)
	testenv.Must(t, err)

	if strings.TrimSpace(kept) != theirs["sh.helm.release.v1.cilium.v1"] {
		t.Errorf("the kept record is not theirs (%d bytes kept, %d theirs)", len(kept), len(theirs["sh.helm.release.v1.cilium.v1"]))
	}

	if left := w.ciliumRecords(t, ctx, kc); len(left) != 0 {
		t.Errorf("their records are still in kube-system: %v", slices.Collect(maps.Keys(left)))
	}

	if out, err := w.kubectl(ctx, "get", "taloscluster", name, "-n", "ichor-system", "-o", `jsonpath={.spec.cni.cilium.values}`); err != nil ||
		!strings.Contains(out, `"debug":{"enabled":true}`) || strings.Contains(out, "k8sServiceHost") {
		t.Errorf("spec.cni.cilium.values: %q %v", out, err)
	}

	testenv.Must(t, w.startController())
	w.waitHeld(t, name, 2)

	out = w.mustIchor(t, ctx, "adopt", "--release", "--cluster", name, "--timeout", "8m")
	if !strings.Contains(out, "Every machine of cluster "+name+" is released") {
		t.Errorf("the release:\n%s", out)
	}

	// Ichor's release: a first install over the running objects, deployed;
	// the DaemonSet was never changed.
	if revs := w.ciliumRevisions(t, ctx); len(revs) != 1 || revs[0] != "deployed" {
		t.Errorf("Ichor's records of release cilium: %v, want one deployed", revs)
	}

	var ds struct {
		Metadata struct {
			Generation int `json:"generation"`
		} `json:"metadata"`
	}

	testenv.Must(t, w.kubeJSON(ctx, &ds, "get", "daemonset", "-n", "kube-system", "cilium"))

	if ds.Metadata.Generation != 1 {
		t.Errorf("DaemonSet cilium changed in the takeover (generation %d): its pods were replaced", ds.Metadata.Generation)
	}
}

// ciliumRecords are Helm's records of release cilium in kube-system, read
// with the kubeconfig kc: their release data by name.
func (w *world) ciliumRecords(t *testing.T, ctx context.Context, kc string) map[string]string {
	t.Helper()

	out, err := w.kubectlAs(ctx, kc, "get", "secret", "-n", "kube-system", "-l", "owner=helm,name=cilium",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.data.release}{"\n"}{end}`)
	testenv.Must(t, err)

	recs := map[string]string{}

	for _, line := range strings.Fields(out) {
		n, data, _ := strings.Cut(line, "=")
		recs[n] = data
	}

	return recs
}

// TestAdoptNoCNI: a talosctl cluster (one control plane, one worker)
// without a CNI (Talos's flannel deleted, nothing else) is adopted with
// Ichor's pinned Cilium installed in process: the plan says so, the write
// installs it as Ichor's own Helm release and waits for the Nodes before it
// writes the resources, the controller finds the release applied
// (CNIHandover), and the release hands both machines over.
func TestAdoptNoCNI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	const name = "theirs-bare"

	w, _, flags := bareTalosctlCluster(ctx, t, name, adoptNoCNISubnet, adoptNoCNIPodRange)

	// --cni-unmanaged keeps a CNI that runs, and none does.
	if out, err := w.ichor(ctx, slices.Concat([]string{"adopt", "--plan", "--cni-unmanaged"}, flags)...); err == nil || !strings.Contains(out, "this one runs none") {
		t.Errorf("--cni-unmanaged on a cluster without a CNI: %v\n%s", err, out)
	}

	testenv.EventuallyEvery(t, 5*time.Minute, 3*time.Second, "the plan of the install on two Nodes", func() (bool, string) {
		out, err := w.ichor(ctx, slices.Concat([]string{"adopt", "--plan"}, flags)...)

		return err == nil && strings.Contains(out, "Cilium install: the cluster runs no CNI; the write installs Ichor's pinned Cilium") &&
			strings.Contains(out, "(for 2 Node(s))"), out
	})

	out := w.mustIchor(t, ctx, slices.Concat([]string{"adopt", "--install", "none", "--write-kubeconfig", w.kubeconfig, "--yes"}, flags)...)
	if !strings.Contains(out, "installed in process as Helm release kube-system/cilium") || !strings.Contains(out, "2 Node(s) Ready") {
		t.Errorf("the write:\n%s", out)
	}

	if revs := w.ciliumRevisions(t, ctx); len(revs) != 1 || revs[0] != "deployed" {
		t.Errorf("the installed release's records: %v, want one deployed", revs)
	}

	testenv.Must(t, w.startController())
	w.waitHeld(t, name, 2)

	out = w.mustIchor(t, ctx, "adopt", "--release", "--cluster", name, "--timeout", "8m")
	if !strings.Contains(out, "Every machine of cluster "+name+" is released") {
		t.Errorf("the release:\n%s", out)
	}

	if out, err := w.kubectl(ctx, "get", "taloscluster", name, "-n", "ichor-system", "-o",
		`jsonpath={.spec.cni.preset} {.status.conditions[?(@.type=="CNIHandover")].status}`); err != nil || strings.TrimSpace(out) != "cilium True" {
		t.Errorf("the TalosCluster (preset, CNIHandover): %q %v", out, err)
	}

	if revs := w.ciliumRevisions(t, ctx); len(revs) != 1 {
		t.Errorf("the controller changed the installed release: records %v", revs)
	}
}
