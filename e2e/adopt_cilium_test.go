package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The loopback subnets of the Cilium takeover's world (no other test uses them).
const (
	adoptCiliumSubnet   = "127.0.209.0/24"
	adoptCiliumPodRange = "127.209.0.0/24"
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
//   - a config rollout then reaches the five machines.
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
	// The documented patch for a CNI of one's own under Talos v1.14's
	// multi-document configuration: the KubeFlannelCNIConfig document deleted.
	testenv.Must(t, os.WriteFile(cniOff, []byte("apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n"), 0o600))

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

	kills, err := k.halt()
	testenv.Must(t, err)

	if kills < 1 {
		t.Errorf("the controller was not killed during the hand-over and the release")
	}

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

	testenv.EventuallyEvery(t, 8*time.Minute, 2*time.Second, "the patch applied to the five machines", func() (bool, string) {
		ms, err := w.heldMachines(ctx)
		if err != nil {
			return false, err.Error()
		}

		var states []string

		ok := len(ms) == 5

		for _, m := range ms {
			ready, reason := m.condition("Ready")
			ok = ok && ready == "True" && m.Status.AppliedConfigHash != hashes[m.Metadata.Name]
			states = append(states, fmt.Sprintf("%s ready=%s(%s)", m.Metadata.Name, ready, reason))
		}

		return ok, strings.Join(states, "; ")
	})
}

func writeYAML(t *testing.T, file string, v any) {
	t.Helper()

	data, err := yaml.Marshal(v)
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(file, data, 0o600))
}
