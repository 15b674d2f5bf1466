package talosemu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubeImageVersion(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.37.2":                     "v1.37.2",
		"ghcr.io/siderolabs/kubelet:v1.36.3":                         "v1.36.3",
		"ghcr.io/siderolabs/kubelet:v1.36.3-fat":                     "v1.36.3",
		"mirror.local:5000/kube-scheduler:1.37.2":                    "v1.37.2",
		"registry.k8s.io/kube-proxy:v1.37.2@sha256:0123456789abcdef": "v1.37.2",
		"registry.k8s.io/kube-proxy@sha256:0123456789abcdef":         "",
		"mirror.local:5000/kube-scheduler":                           "",
		"registry.k8s.io/kube-apiserver:latest":                      "",
	} {
		if got := kubeImageVersion(ref); got != want {
			t.Errorf("kubeImageVersion(%q) = %q, want %q", ref, got, want)
		}
	}

	if got := imageRepository("mirror.local:5000/kube-scheduler:v1.37.2"); got != "mirror.local:5000/kube-scheduler" {
		t.Errorf("imageRepository = %q", got)
	}

	if !isKubeComponentImage("mirror.local:5000/k8s/kube-apiserver:v1.37.2") || isKubeComponentImage("ghcr.io/siderolabs/installer:v1.14.1") {
		t.Error("isKubeComponentImage")
	}
}

// Rule: each component runs the binary of its image's version, found beside the assets
// directory; a version without binaries is an error naming the task that builds them, and an
// image without a version tag runs the default assets.
func TestKubeBinary(t *testing.T) {
	root := t.TempDir()
	cur, prev := filepath.Join(root, "v1.37.2"), filepath.Join(root, "v1.36.3")

	for dir, v := range map[string]string{cur: "v1.37.2", prev: "v1.36.3"} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		// a stand-in that answers --version as the real binaries do
		script := "#!/bin/sh\necho Kubernetes " + v + "\n"
		if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), []byte(script), 0o755); err != nil { //nolint:gosec // an executable test script
			t.Fatal(err)
		}
	}

	w := &World{kubeAssets: cur}

	for image, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.37.2": filepath.Join(cur, "kube-apiserver"),
		"registry.k8s.io/kube-apiserver:v1.36.3": filepath.Join(prev, "kube-apiserver"),
		"registry.k8s.io/kube-apiserver":         filepath.Join(cur, "kube-apiserver"),
	} {
		got, err := w.kubeBinary("kube-apiserver", image)
		if err != nil || got != want {
			t.Errorf("kubeBinary(%s) = %q, %v; want %q", image, got, err, want)
		}
	}

	_, err := w.kubeBinary("kube-apiserver", "registry.k8s.io/kube-apiserver:v1.35.0")
	if err == nil || !strings.Contains(err.Error(), "go tool task assets") || !strings.Contains(err.Error(), "v1.35.0") {
		t.Errorf("a version without binaries: %v", err)
	}

	w.byVersion = map[string]string{"v1.35.0": prev}

	if _, err := w.kubeBinary("kube-apiserver", "registry.k8s.io/kube-apiserver:v1.35.0"); err == nil {
		t.Error("a directory whose binary reports another version must not be used")
	}
}

// Rule: the registry has Kubernetes component images only at the release list's versions.
func TestKubeImageExists(t *testing.T) {
	w := &World{}
	if !w.kubeImageExists("registry.k8s.io/kube-apiserver:v1.36.3") || w.kubeImageExists("ghcr.io/siderolabs/kubelet:v1.38.0") ||
		!w.kubeImageExists("docker.io/library/nginx:1.27") {
		t.Error("default releases")
	}

	w.SetKubernetesReleases([]string{"v1.38.0"})

	if w.kubeImageExists("registry.k8s.io/kube-apiserver:v1.36.3") || !w.kubeImageExists("ghcr.io/siderolabs/kubelet:v1.38.0") {
		t.Error("after SetKubernetesReleases")
	}
}
