package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster:
    server: https://127.0.0.1:6443
contexts:
- name: with-ns
  context:
    cluster: a
    user: u
    namespace: ichor-system
- name: without-ns
  context:
    cluster: a
    user: u
current-context: with-ns
users:
- name: u
  user:
    token: abc
`

func write(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(p, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNamespaceDefaults(t *testing.T) {
	p := write(t)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Kubeconfig: p}, "ichor-system"},
		{Options{Kubeconfig: p, Context: "without-ns"}, "default"},
		{Options{Kubeconfig: p, Namespace: "prod"}, "prod"},
	} {
		c, err := Connect(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if c.Namespace != tc.want {
			t.Fatalf("%+v: namespace %q, want %q", tc.opts, c.Namespace, tc.want)
		}
	}
}

func TestKubeconfigFromEnvironment(t *testing.T) {
	t.Setenv("KUBECONFIG", write(t))
	c, err := Connect(Options{Context: "without-ns"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.Host != "https://127.0.0.1:6443" {
		t.Fatalf("host %q", c.Config.Host)
	}
}

func TestConnectErrors(t *testing.T) {
	p := write(t)
	if _, err := Connect(Options{Kubeconfig: p, Context: "nope"}); err == nil || !strings.Contains(err.Error(), "with-ns, without-ns") {
		t.Fatalf("an unknown context must list the known ones: %v", err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	if _, err := Connect(Options{}); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("no kubeconfig must say how to give one: %v", err)
	}
}
