package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

var placeholderGVK = schema.GroupVersionKind{Group: "ichor.maesh.dev", Version: "v1alpha1", Kind: "Placeholder"}

func TestCRDFromKustomizeRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if len(env.CRDs) == 0 {
		t.Fatalf("no CRD was installed from %s", DefaultCRDDir)
	}

	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(placeholderGVK)
	obj.SetNamespace("default")
	obj.SetName("hello")
	if err := unstructured.SetNestedField(obj.Object, "written through the real API server", "spec", "message"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create: %v", err)
	}

	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(placeholderGVK)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "hello"}, got); err != nil {
		t.Fatalf("get: %v", err)
	}
	msg, _, _ := unstructured.NestedString(got.Object, "spec", "message")
	if msg != "written through the real API server" {
		t.Fatalf("spec.message: got %q", msg)
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

	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(placeholderGVK)
	obj.SetNamespace("default")
	obj.SetName("too-long")
	if err := unstructured.SetNestedField(obj.Object, strings.Repeat("x", 65), "spec", "message"); err != nil {
		t.Fatal(err)
	}
	err := env.Client.Create(ctx, obj)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.message") {
		t.Fatalf("want Invalid naming spec.message, got %v", err)
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
