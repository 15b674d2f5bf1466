package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// TestMonitoringAppliesToAnAPIServer renders the chart with every
// monitoring part on and creates the ServiceMonitors, the PrometheusRule and
// the dashboard ConfigMaps in a real API server (envtest) that has
// prometheus-operator's CRDs (tools/monitoring/crds, generated from its API
// module): the API server's schema validation accepts them, and refuses a
// ServiceMonitor with a field the CRD does not know.
func TestMonitoringAppliesToAnAPIServer(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		t.Fatalf("no kube-apiserver in KUBEBUILDER_ASSETS=%q: run `go tool task assets` and export KUBEBUILDER_ASSETS=$(go tool task assets:dir)", assets)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(repoRoot, "tools", "monitoring", "crds")},
		ErrorIfCRDPathMissing: true,
	}
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
	for _, ns := range []string{namespace, "grafana"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	rendered, err := Render(filepath.Join(repoRoot, chartDir), monitoringValues)
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]bool{}
	for file, text := range rendered {
		for _, doc := range strings.Split(text, "\n---\n") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			u := &unstructured.Unstructured{Object: obj}
			if obj == nil || (u.GetKind() != "ServiceMonitor" && u.GetKind() != "PrometheusRule" && !strings.HasPrefix(u.GetName(), "ichor-dashboard-")) {
				continue
			}
			if err := c.Create(ctx, u); err != nil {
				t.Errorf("the API server refuses %s %s: %v", u.GetKind(), u.GetName(), err)
				continue
			}
			created[u.GetKind()+"/"+u.GetName()] = true
		}
	}
	for _, o := range monitoringObjects {
		if !created[o] {
			t.Errorf("%s was not created", o)
		}
	}

	// The schema is enforced: not a vacuous create.
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
		"metadata": map[string]any{"name": "bad", "namespace": namespace},
		"spec":     map[string]any{"selector": map[string]any{}, "endpoints": []any{map[string]any{"scheme": "gopher"}}},
	}}
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Errorf("a ServiceMonitor with scheme gopher was accepted (%v)", err)
	}
}
