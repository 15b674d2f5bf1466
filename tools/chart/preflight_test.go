package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// notReadyCNI is the Ready condition a kubelet posts while no CNI is
// installed (what a Talos node with cni: none reports).
var notReadyCNI = corev1.NodeCondition{
	Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
	Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
}

// TestPreflightCNI renders the chart as `helm install` does, its lookup
// reading the Nodes of a real API server (envtest): with no node, or one
// Ready node, it passes; when every node is NotReady and a kubelet says the
// network plugin is not ready, it fails naming the node, the value and the
// way out; preflight.cni=false passes; nodes NotReady for another reason
// are not this check's to refuse. Without a cluster (helm template) lookup
// finds nothing and the check passes (TestRendersWithDefaults).
func TestPreflightCNI(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("no kube-apiserver in KUBEBUILDER_ASSETS=%q: run `go tool task assets` and export KUBEBUILDER_ASSETS=$(go tool task assets:dir)", assets)
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	node := func(name string, ready corev1.NodeCondition) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		ready.LastHeartbeatTime, ready.LastTransitionTime = metav1.Now(), metav1.Now()
		n.Status.Conditions = []corev1.NodeCondition{ready}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	off := map[string]any{"preflight": map[string]any{"cni": false}}

	if err := renderAgainst(cfg, nil); err != nil {
		t.Fatalf("a cluster with no nodes: %v", err)
	}

	node("cp-1", notReadyCNI)
	err = renderAgainst(cfg, nil)
	for _, want := range []string{"preflight.cni", "no pod network", "node cp-1", "cni plugin not initialized", "`ichor cni bootstrap --talosconfig FILE --node CONTROL-PLANE-ADDRESS`", "preflight.cni=false", "No release was installed or upgraded"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a cluster whose only node has no network plugin: %v; want %q", err, want)
		}
	}
	if err := renderAgainst(cfg, off); err != nil {
		t.Fatalf("preflight.cni=false: %v", err)
	}

	node("cp-2", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"})
	if err := renderAgainst(cfg, nil); err != nil {
		t.Fatalf("one Ready node: %v", err)
	}
	remove("cp-2")
	if err := renderAgainst(cfg, nil); err == nil {
		t.Fatal("the Ready node removed: the check passes again")
	}

	remove("cp-1")
	node("cp-3", corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "PLEG is not healthy: pleg was last seen active 3m0s ago"})
	if err := renderAgainst(cfg, nil); err != nil {
		t.Fatalf("a node NotReady for another reason than its network: %v", err)
	}
}

// renderAgainst renders the chart as an install does, lookup reaching cfg's API server.
func renderAgainst(cfg *rest.Config, values map[string]any) error {
	ch, err := loader.Load(filepath.Join(repoRoot, chartDir))
	if err != nil {
		return err
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: "ichor", Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return err
	}
	_, err = engine.New(cfg).Render(ch, vals)
	return err
}
