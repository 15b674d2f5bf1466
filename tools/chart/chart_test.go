package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

const repoRoot = "../.."

// manifests parses every rendered document into objects keyed by kind/name.
func manifests(t *testing.T, rendered map[string]string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for file, text := range rendered {
		for _, doc := range strings.Split(text, "\n---\n") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s does not render to YAML: %v\n%s", file, err, doc)
			}
			if obj == nil {
				continue
			}
			meta, _ := obj["metadata"].(map[string]any)
			out[obj["kind"].(string)+"/"+meta["name"].(string)] = obj
		}
	}
	return out
}

func TestCommittedChartIsCurrent(t *testing.T) {
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare(filepath.Join(repoRoot, chartDir), files); err != nil {
		t.Fatal(err)
	}
}

func TestHelmLintPasses(t *testing.T) {
	result := lint.All(filepath.Join(repoRoot, chartDir), nil, namespace, false)
	for _, m := range result.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m.Error())
		}
	}
	if err := Lint(filepath.Join(repoRoot, chartDir)); err != nil {
		t.Fatal(err)
	}
}

// A broken chart fails Lint: the check is not vacuous.
func TestLintRefusesABrokenChart(t *testing.T) {
	dir := t.TempDir()
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files["templates/broken.yaml"] = []byte("kind: ConfigMap\nmetadata:\n  name: {{ .Values.nope.missing }\n")
	if err := Write(dir, files); err != nil {
		t.Fatal(err)
	}
	if err := Lint(dir); err == nil {
		t.Fatal("a template that does not parse must fail the lint")
	}
}

func TestRendersWithDefaults(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	dep := objs["Deployment/ichor-controller"]
	if dep == nil {
		t.Fatalf("no controller Deployment among %d objects", len(objs))
	}
	spec := dep["spec"].(map[string]any)
	if spec["replicas"] != float64(2) {
		t.Errorf("replicas: %v", spec["replicas"])
	}
	if dep["metadata"].(map[string]any)["namespace"] != namespace {
		t.Errorf("namespace: %v", dep["metadata"])
	}
	container := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if container["image"] != "ghcr.io/maeshinshin/ichor-controller:v0.0.0-dev" {
		t.Errorf("image: %v", container["image"])
	}
	if objs["PodDisruptionBudget/ichor-controller"] == nil {
		t.Error("two replicas need a PodDisruptionBudget")
	}
	if objs["CiliumNetworkPolicy/ichor-default-deny"] != nil {
		t.Error("network policies are off by default")
	}
	for _, role := range []string{"ichor-viewer", "ichor-operator", "ichor-admin", "ichor-machine-reclaimer"} {
		if objs["ClusterRole/"+role] == nil {
			t.Errorf("no ClusterRole %s", role)
		}
	}
	if objs["ValidatingWebhookConfiguration/ichor-validating-webhook"] == nil {
		t.Error("no webhook configuration")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, chartDir, "crds", "talosclusters.ichor.maesh.dev.yaml")); err != nil {
		t.Errorf("the CRDs ship in crds/: %v", err)
	}
}

func TestValuesChangeTheRender(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), map[string]any{
		"controller":    map[string]any{"replicas": 1, "image": map[string]any{"repository": "registry.example/ichor", "tag": "v9.9.9"}},
		"networkPolicy": map[string]any{"cilium": map[string]any{"enabled": true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	spec := objs["Deployment/ichor-controller"]["spec"].(map[string]any)
	if spec["replicas"] != float64(1) {
		t.Errorf("replicas: %v", spec["replicas"])
	}
	if objs["PodDisruptionBudget/ichor-controller"] != nil {
		t.Error("one replica must have no PodDisruptionBudget, or a drain never finishes")
	}
	container := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if container["image"] != "registry.example/ichor:v9.9.9" {
		t.Errorf("image: %v", container["image"])
	}
	for _, p := range []string{"ichor-default-deny", "ichor-controller"} {
		if objs["CiliumNetworkPolicy/"+p] == nil {
			t.Errorf("networkPolicy.cilium.enabled must render %s", p)
		}
	}
}
