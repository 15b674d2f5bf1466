package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// env is the API server shared by the tests of this package.
var env *Env

func TestMain(m *testing.M) {
	var err error
	env, err = Start(Options{})
	if err != nil {
		// Fail loudly: a missing API server is never a pass or a skip.
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test API server: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the test API server: %v\n", err)
	}
	os.Exit(code)
}

func TestAssetsDirExplainsWhatToRun(t *testing.T) {
	t.Run("unset", func(t *testing.T) {
		t.Setenv(AssetsEnv, "")
		_, err := AssetsDir()
		if !errors.Is(err, ErrAssetsMissing) {
			t.Fatalf("want ErrAssetsMissing, got %v", err)
		}
		for _, want := range []string{"KUBEBUILDER_ASSETS is not set", "go tool task test", "go tool task assets"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})
	t.Run("directory without binaries", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv(AssetsEnv, dir)
		_, err := AssetsDir()
		if !errors.Is(err, ErrAssetsMissing) || !strings.Contains(err.Error(), `no executable "kube-apiserver"`) ||
			!strings.Contains(err.Error(), "go tool task assets") {
			t.Fatalf("want a missing kube-apiserver error naming the task, got %v", err)
		}
	})
	t.Run("Start refuses too", func(t *testing.T) {
		t.Setenv(AssetsEnv, "")
		if _, err := Start(Options{}); !errors.Is(err, ErrAssetsMissing) {
			t.Fatalf("Start without assets: want ErrAssetsMissing, got %v", err)
		}
	})
}

// TestAPIServerIsTheBuiltBinary shows that the server under test is a real
// kube-apiserver process started from KUBEBUILDER_ASSETS, at the pinned version.
func TestAPIServerIsTheBuiltBinary(t *testing.T) {
	assets, err := AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(assets, "kube-apiserver")
	if pids := processesOf(t, want); len(pids) == 0 {
		t.Fatalf("no running process executes %s", want)
	}

	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.2" || v.Major != "1" || v.Minor != "37" {
		t.Fatalf("server version: got %s (major %q minor %q), want v1.37.2 (1, 37)", v.GitVersion, v.Major, v.Minor)
	}
}

var talosClusterGVK = schema.GroupVersionKind{Group: "ichor.maesh.dev", Version: "v1alpha1", Kind: "TalosCluster"}

// newTalosCluster returns a minimal valid TalosCluster as an unstructured object,
// so this package does not depend on the contracts module.
func newTalosCluster(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"talosVersion":      "v1.14.1",
			"versionContract":   "v1.14",
			"kubernetesVersion": "1.37.2",
			"endpoint":          map[string]any{"type": "vip", "host": "192.168.10.100"},
			"secretsBundleRef":  map[string]any{"name": "demo-secrets"},
			"controlPlane":      map[string]any{"count": int64(1), "schedulable": true},
			"cni":               map[string]any{"preset": "cilium"},
		},
	}}
	obj.SetGroupVersionKind(talosClusterGVK)
	obj.SetNamespace("default")
	obj.SetName(name)
	return obj
}

func TestCRDFromKustomizeRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if len(env.CRDs) == 0 {
		t.Fatalf("no CRD was installed from %s", DefaultCRDDir)
	}

	if err := env.Client.Create(ctx, newTalosCluster(t, "hello")); err != nil {
		t.Fatalf("create: %v", err)
	}

	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(talosClusterGVK)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "hello"}, got); err != nil {
		t.Fatalf("get: %v", err)
	}
	host, _, _ := unstructured.NestedString(got.Object, "spec", "endpoint", "host")
	if host != "192.168.10.100" {
		t.Fatalf("spec.endpoint.host: got %q", host)
	}
	if got.GetUID() == "" || got.GetCreationTimestamp().Time.IsZero() {
		t.Fatalf("the server did not fill uid and creationTimestamp: %v", got.Object["metadata"])
	}
}

// TestCRDSchemaIsEnforced shows that the API server validates against the
// installed schema: the server, not the test, refuses a bad object.
func TestCRDSchemaIsEnforced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	obj := newTalosCluster(t, "too-many")
	if err := unstructured.SetNestedField(obj.Object, int64(7), "spec", "controlPlane", "count"); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Create(ctx, obj)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.controlPlane.count") {
		t.Fatalf("want Invalid naming spec.controlPlane.count, got %v", err)
	}
}

// TestKubectlExplainShowsFieldDocs runs the built kubectl against the server:
// the generated CRDs carry the field docs, so `kubectl explain` shows them.
func TestKubectlExplainShowsFieldDocs(t *testing.T) {
	assets, err := AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.KubeconfigYAML()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "--kubeconfig", path, //nolint:gosec // the built kubectl from KUBEBUILDER_ASSETS
		"explain", "talosmachine.spec").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl explain: %v\n%s", err, out)
	}
	for _, want := range []string{
		"KIND:       TalosMachine",
		"approval is the person's decision",
		"identity is the hardware identity",
		"disks give the other disks their roles",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl explain talosmachine.spec does not show %q:\n%s", want, out)
		}
	}
}

// TestKustomizeBaseBuildsAndApplies builds kustomize/base with the built
// kubectl and sends every object to the real API server as a server-side dry
// run, then checks the shape the architecture asks for: two controller
// replicas spread by anti-affinity, a PodDisruptionBudget, and a webhook
// configuration that calls the controller's Service in ichor-system.
func TestKustomizeBaseBuildsAndApplies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	assets, err := AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "kustomize", //nolint:gosec // the built kubectl from KUBEBUILDER_ASSETS
		filepath.Join(root, "kustomize", "base")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize kustomize/base: %v", err)
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		objs[obj.GetKind()+"/"+obj.GetName()] = obj
	}

	// The namespace is created for real; everything else is a server-side dry run.
	if err := env.Client.Create(ctx, objs["Namespace/ichor-system"]); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for key, obj := range objs {
		if obj.GetKind() == "Namespace" || obj.GetKind() == "CustomResourceDefinition" {
			continue // already installed by Start
		}
		if err := env.Client.Create(ctx, obj.DeepCopy(), client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s: the API server refuses it: %v", key, err)
		}
	}

	dep := objs["Deployment/ichor-controller"]
	if dep == nil {
		t.Fatal("no Deployment ichor-controller")
	}
	// The YAML decoder reads numbers as float64.
	if r, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas"); r != float64(2) {
		t.Errorf("controller replicas: got %v, want 2", r)
	}
	if terms, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "affinity", "podAntiAffinity",
		"preferredDuringSchedulingIgnoredDuringExecution"); len(terms) == 0 {
		t.Error("the controller has no pod anti-affinity")
	}
	if dep.GetNamespace() != "ichor-system" {
		t.Errorf("Deployment namespace: %q", dep.GetNamespace())
	}
	if objs["PodDisruptionBudget/ichor-controller"] == nil {
		t.Error("no PodDisruptionBudget for the controller")
	}
	svc := objs["Service/ichor-webhook"]
	if svc == nil {
		t.Fatal("no webhook Service")
	}
	wh := objs["ValidatingWebhookConfiguration/ichor-validating-webhook"]
	if wh == nil {
		t.Fatal("no ValidatingWebhookConfiguration ichor-validating-webhook")
	}
	hooks, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
	if len(hooks) < 7 {
		t.Errorf("want a webhook per guarded kind, got %d", len(hooks))
	}
	mwh := objs["MutatingWebhookConfiguration/ichor-mutating-webhook"]
	if mwh == nil {
		t.Fatal("no MutatingWebhookConfiguration ichor-mutating-webhook")
	}
	mhooks, _, _ := unstructured.NestedSlice(mwh.Object, "webhooks")
	if len(mhooks) < 2 {
		t.Errorf("want the requester stamp on TalosCredentialRequests and MachineReclaims, got %d mutating webhooks", len(mhooks))
	}
	for _, h := range append(hooks, mhooks...) {
		name, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
		ns, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "namespace")
		if name != "ichor-webhook" || ns != "ichor-system" {
			t.Errorf("a webhook calls %s/%s, want ichor-system/ichor-webhook", ns, name)
		}
	}
}

// processesOf lists the pids whose executable is path.
func processesOf(t *testing.T, path string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && exe == path {
			pids = append(pids, pid)
		}
	}
	return pids
}
