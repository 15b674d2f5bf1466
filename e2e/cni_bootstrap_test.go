package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"

	"github.com/maeshinshin/ichor/tools/testenv"
)

const (
	// cniBootstrapSubnet and cniBootstrapPods are this test's loopback ranges.
	cniBootstrapSubnet = "127.0.215.0/24"
	cniBootstrapPods   = "127.215.0.0/24"
)

// TestCNIBootstrap (issue 27, item 3): a Talos cluster made with the real
// talosctl and Talos's CNI off has no pod network; its emulated kubelets
// say so as real ones do (talosemu --network-needs-cni: NotReady, "cni
// plugin not initialized", until a CNI agent pod is Ready on the Node).
// `helm install` of Ichor's chart is refused there by preflight.cni, which
// names `ichor cni bootstrap`. `ichor cni bootstrap --plan` writes nothing;
// `ichor cni bootstrap` installs Ichor's pinned Cilium as Helm release
// kube-system/cilium and waits for every Node to be Ready; a second run
// finds it deployed and changes nothing; the chart then installs with
// preflight.cni on.
func TestCNIBootstrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	const name = "bare-helm"

	w, tc, _ := bareTalosctlCluster(ctx, t, name, cniBootstrapSubnet, cniBootstrapPods, "--network-needs-cni")
	cp := w.machines[0].ip()
	flags := []string{"--talosconfig", tc, "--node", cp}

	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "talosctl kubeconfig", func() (bool, string) {
		out, err := talosctl(ctx, t, tc, "--endpoints", cp, "--nodes", cp, "kubeconfig", "--force", w.kubeconfig)

		return err == nil, out
	})

	const notReady = "cni plugin not initialized"

	testenv.EventuallyEvery(t, 5*time.Minute, 3*time.Second, "two Nodes, NotReady for want of a pod network", func() (bool, string) {
		out, err := w.kubectl(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}{"\n"}{end}`)

		return err == nil && strings.Count(out, " False ") == 2 && strings.Count(out, notReady) == 2, out
	})

	cfg := helmConfig(t, w.kubeconfig)

	_, err := helmInstall(ctx, cfg, nil, false)
	for _, want := range []string{"preflight.cni", "no pod network", notReady, "`ichor cni bootstrap --talosconfig FILE --node CONTROL-PLANE-ADDRESS`"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("helm install onto the cluster without a pod network: %v; want %q", err, want)
		}
	}

	if rels := helmReleases(t, cfg); len(rels) != 0 {
		t.Fatalf("the refused install left releases: %v", rels)
	}

	// Wrong input is refused before anything is read.
	if out, err := w.ichor(ctx, "cni", "bootstrap", "--talosconfig", tc); err == nil || !strings.Contains(out, "--node is required") {
		t.Errorf("cni bootstrap without --node: %v\n%s", err, out)
	}

	if out, err := w.ichor(ctx, "cni", "bootstrap", "--talosconfig", tc, "--node", cp, "--cni-tunnel", "gre"); err == nil || !strings.Contains(out, "give vxlan or geneve") {
		t.Errorf("cni bootstrap --cni-tunnel gre: %v\n%s", err, out)
	}

	if out, err := w.ichor(ctx, "cni", "bootstrap", "--talosconfig", tc, "--node", w.machines[1].ip(), "--plan"); err == nil || !strings.Contains(out, "is a worker") {
		t.Errorf("cni bootstrap --node WORKER: %v\n%s", err, out)
	}

	testenv.EventuallyEvery(t, 3*time.Minute, 3*time.Second, "the plan of the install on two Nodes", func() (bool, string) {
		out, err := w.ichor(ctx, append([]string{"cni", "bootstrap", "--plan"}, flags...)...)

		return err == nil && strings.Contains(out, "Cilium bootstrap plan for cluster "+name) &&
			strings.Contains(out, "the cluster runs no CNI") && strings.Contains(out, "(for 2 Node(s))") &&
			strings.Count(out, "KubePrism port 7445, healthy") == 2 && strings.Contains(out, "Nothing was written"), out
	})

	if revs := w.ciliumRevisions(t, ctx); len(revs) != 0 {
		t.Fatalf("--plan wrote Cilium's release: records %v", revs)
	}

	// Without --yes and nothing on standard input nothing is installed.
	if out, err := w.ichor(ctx, append([]string{"cni", "bootstrap"}, flags...)...); err == nil || !strings.Contains(out, "not confirmed") {
		t.Errorf("cni bootstrap without confirmation: %v\n%s", err, out)
	}

	if revs := w.ciliumRevisions(t, ctx); len(revs) != 0 {
		t.Fatalf("the unconfirmed run wrote Cilium's release: records %v", revs)
	}

	out := w.mustIchor(t, ctx, append([]string{"cni", "bootstrap", "--yes"}, flags...)...)
	for _, want := range []string{"installed in process as Helm release kube-system/cilium", "2 Node(s) Ready", "Cluster " + name + " has a pod network"} {
		if !strings.Contains(out, want) {
			t.Errorf("cni bootstrap printed:\n%s\nwant %q", out, want)
		}
	}

	if revs := w.ciliumRevisions(t, ctx); len(revs) != 1 || revs[0] != "deployed" {
		t.Fatalf("the installed release's records: %v, want one deployed", revs)
	}

	if out, err := w.kubectl(ctx, "get", "nodes", "-o", `jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`); err != nil || strings.Count(out, "True") != 2 || strings.Contains(out, "False") {
		t.Fatalf("the Nodes after the bootstrap: %v\n%s", err, out)
	}

	// A second run finds the release deployed and installs nothing.
	out = w.mustIchor(t, ctx, append([]string{"cni", "bootstrap", "--yes"}, flags...)...)
	if !strings.Contains(out, "Cilium runs already (Helm release kube-system/cilium, revision 1 deployed") {
		t.Errorf("the second run printed:\n%s", out)
	}

	if revs := w.ciliumRevisions(t, ctx); len(revs) != 1 {
		t.Fatalf("the second run changed the release: records %v", revs)
	}

	// The chart installs now, preflight.cni on (its default).
	rel, err := helmInstall(ctx, cfg, map[string]any{
		"controller": map[string]any{"replicas": 1},
		"ichorUI":    map[string]any{"replicas": 1},
	}, false)
	if err != nil {
		t.Fatalf("helm install after the bootstrap: %v", err)
	}

	if rel.Info.Status != release.StatusDeployed {
		t.Fatalf("the release is %s", rel.Info.Status)
	}

	if out, err := w.kubectl(ctx, "get", "deployment", "ichor-controller", "-n", icNamespace, "-o", "name"); err != nil {
		t.Fatalf("the installed release's controller Deployment: %v\n%s", err, out)
	}
}
