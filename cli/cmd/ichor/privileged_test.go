package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
)

const kubeletImagePatch = `apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosConfigPatch
metadata:
  name: kubelet-image
spec:
  clusterName: prod
  layer: cluster
  documents:
  - kubeletConfig:
      image: registry.example.com/kubelet:custom
`

// TestPrivilegedPatchShownByTheCLI: `config effective` marks the privileged
// values, `config diff --with` names a proposed patch's privileged write and
// the verb, and the rollout plan of `config apply` names the cluster's
// privileged patches; plain values and patches are not marked.
func TestPrivilegedPatchShownByTheCLI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "privileged")
	renderFixture(t, ns)

	// The effective configuration: Ichor's own render sets privileged values
	// (the kubelet's and the control plane's images among them).
	var doc struct {
		Values []struct {
			Path       string `json:"path"`
			Privileged bool   `json:"privileged"`
		} `json:"values"`
	}
	js := mustSucceed(t, ichor(t, "config", "effective", "cp-1", "-n", ns, "-o", "json"))
	must(t, json.Unmarshal([]byte(js.stdout), &doc))
	marked := map[string]bool{}
	for _, v := range doc.Values {
		marked[v.Path] = v.Privileged
	}
	var privilegedImage, plain bool
	for path, priv := range marked {
		if path == "KubeletConfig:image" || path == "KubeAPIServerConfig:image" {
			privilegedImage = privilegedImage || priv
			if !priv {
				t.Errorf("%s is not marked privileged", path)
			}
		}
		if path == "KubeletConfig:defaultRuntimeSeccompProfileEnabled" || strings.Contains(path, "hostname") {
			plain = true
			if priv {
				t.Errorf("%s is marked privileged", path)
			}
		}
	}
	if !privilegedImage || !plain {
		t.Fatalf("the fixture's render must set a component image and a plain value: %v", marked)
	}
	table := mustSucceed(t, ichor(t, "config", "effective", "cp-1", "-n", ns))
	if !strings.Contains(table.stdout, "PRIVILEGED") || !strings.Contains(table.stdout, "`update` on `talosconfigpatches/privileged`") {
		t.Fatalf("the table must mark privileged values and name the verb:\n%.3000s", table.stdout)
	}

	// config diff --with: the proposed patch's privileged write, and the verb.
	file := filepath.Join(t.TempDir(), "kubelet.yaml")
	must(t, os.WriteFile(file, []byte(kubeletImagePatch), 0o600))
	r := mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns, "--with", file))
	for _, want := range []string{"Privileged:", `creating TalosConfigPatch "kubelet-image"`, "KubeletConfig:image",
		"`update` on `talosconfigpatches/privileged`", "spec.documents[0].kubeletConfig.image"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("config diff --with must say %q:\n%s", want, r.stdout)
		}
	}
	plainFile := filepath.Join(t.TempDir(), "tuning.yaml")
	must(t, os.WriteFile(plainFile, []byte(sysctlPatch), 0o600))
	if r := mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns, "--with", plainFile)); strings.Contains(r.stdout, "Privileged:") {
		t.Fatalf("a plain patch is not privileged:\n%s", r.stdout)
	}

	// The rollout plan names the cluster's privileged patches.
	m := waitingReboot(configuredMachine(ns, "w-1", ichorv1alpha1.RoleWorker), "machine.kernel.modules")
	createMachine(t, m)
	must(t, k8s.Create(ctx, &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tuning"},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{ClusterName: "prod", Layer: ichorv1alpha1.LayerCluster, Documents: []mirror.PatchDocument{
			{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}},
		}},
	}))
	r = mustFail(t, ichor(t, "config", "apply", "-n", ns, "--cluster", "prod"), "not confirmed")
	if strings.Contains(r.stdout, "Privileged patches") {
		t.Fatalf("no privileged patch yet, the plan must not name any:\n%s", r.stdout)
	}
	must(t, k8s.Create(ctx, &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubelet-image"},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{ClusterName: "prod", Layer: ichorv1alpha1.LayerCluster, Documents: []mirror.PatchDocument{
			{KubeletConfig: &mirror.KubeletConfig{Image: "registry.example.com/kubelet:custom"}},
		}},
	}))
	r = mustFail(t, ichor(t, "config", "apply", "-n", ns, "--cluster", "prod"), "not confirmed")
	for _, want := range []string{"Privileged patches of cluster prod", "`update` on `talosconfigpatches/privileged`", "kubelet-image: KubeletConfig:image"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("the plan must say %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "tuning:") {
		t.Fatalf("the plain patch is not privileged:\n%s", r.stdout)
	}
}
