package render_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	talosmachine "github.com/siderolabs/talos/pkg/machinery/config/machine"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// benchInput is one control plane with 20 patches over 5 layers: Ichor's 5
// system patches (CNI, kube-proxy, KubePrism, registry mirrors, volumes) and
// 15 TalosConfigPatches (4 cluster, 4 role, 4 selector, 3 machine).
func benchInput(t testing.TB) render.Input {
	in := input(t)
	in.Machine.Spec.Hostname = ""
	in.Machine.Spec.Labels = nil
	in.Cluster.Spec.Registry.Mirrors = []ichorv1alpha1.RegistryMirror{{Registry: "docker.io", Endpoints: []string{"https://mirror.example.com"}}}

	docFor := func(i int) mirror.PatchDocument {
		switch i % 5 {
		case 0:
			return mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{fmt.Sprintf("net.core.p%d", i): "1", "vm.swappiness": fmt.Sprint(i)}}}
		case 1:
			return mirror.PatchDocument{SysfsConfig: &mirror.SysfsConfig{Params: map[string]string{fmt.Sprintf("devices.system.cpu.c%d", i): "performance"}}}
		case 2:
			return mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{ExtraArgs: map[string]mirror.ArgValue{"max-pods": {Value: fmt.Sprint(100 + i)}}}}
		case 3:
			return mirror.PatchDocument{KubeNodeConfig: &mirror.KubeNodeConfig{Labels: map[string]string{fmt.Sprintf("example.com/l%d", i): "x"}}}
		default:
			return mirror.PatchDocument{KubeControllerManagerConfig: &mirror.KubeControllerManagerConfig{Env: map[string]string{"GOGC": fmt.Sprint(50 + i)}}}
		}
	}

	layers := []struct {
		layer  string
		n      int
		target ichorv1alpha1.PatchTarget
	}{
		{ichorv1alpha1.LayerCluster, 4, ichorv1alpha1.PatchTarget{}},
		{ichorv1alpha1.LayerRole, 4, ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane}},
		{ichorv1alpha1.LayerSelector, 4, ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}}},
		{ichorv1alpha1.LayerMachine, 3, ichorv1alpha1.PatchTarget{MachineName: "cp-1"}},
	}

	i := 0

	for _, l := range layers {
		for j := range l.n {
			in.Patches = append(in.Patches, patch(fmt.Sprintf("%s-%d", l.layer, j), l.layer, int32(j), l.target, docFor(i)))
			i++
		}
	}

	return in
}

// floorPatches are the same 20 patches as YAML, in the order render applies them.
func floorPatches(t testing.TB, in render.Input) []string {
	system := []string{
		"apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n$patch: delete\n",
		"apiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: false\n",
		"apiVersion: v1alpha1\nkind: KubePrismConfig\nport: 7445\n",
		"apiVersion: v1alpha1\nkind: RegistryMirrorConfig\nname: docker.io\nendpoints:\n  - url: https://mirror.example.com\n",
		"apiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nprovisioning:\n  diskSelector:\n    match: disk.wwid == \"naa.5000c500a0b1c2d3\"\n" +
			"---\napiVersion: v1alpha1\nkind: UserVolumeConfig\nname: data\nprovisioning:\n  diskSelector:\n    match: disk.serial == \"S3Z9NB0K\"\n  maxSize: 100GiB\n",
	}

	out := append([]string(nil), system...)

	// User patches are already in render's order (layer, priority, name).
	for _, p := range in.Patches {
		docs := make([]talosconfig.Document, 0, len(p.Spec.Documents))

		for k := range p.Spec.Documents {
			d, err := convert.PatchDocumentToMachinery(&p.Spec.Documents[k])
			if err != nil {
				t.Fatal(err)
			}

			docs = append(docs, d)
		}

		c, err := container.New(docs...)
		if err != nil {
			t.Fatal(err)
		}

		b, err := c.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
		if err != nil {
			t.Fatal(err)
		}

		out = append(out, string(b))
	}

	return out
}

// floor is the same work with machinery alone: generate, load the patches,
// apply them with configpatcher, encode, hash.
func floor(t testing.TB, in render.Input, patches []string) (b []byte, hash string) {
	gen, err := generate.NewInput(in.Cluster.Name, "https://10.0.0.10:6443", "1.37.2",
		generate.WithSecretsBundle(in.Bundle), generate.WithVersionContract(mustContract(t)),
		generate.WithAllowSchedulingOnControlPlanes(false))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := gen.Config(talosmachine.TypeControlPlane)
	if err != nil {
		t.Fatal(err)
	}

	ps, err := configpatcher.LoadPatches(patches)
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithConfig(cfg), ps)
	if err != nil {
		t.Fatal(err)
	}

	c, err := out.Config()
	if err != nil {
		t.Fatal(err)
	}

	b, err = c.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled), encoder.WithOmitEmpty(true))
	if err != nil {
		t.Fatal(err)
	}

	sum := sha256.Sum256(b)

	return b, "sha256:" + hex.EncodeToString(sum[:])
}

// TestBenchmarkFloorIsTheSameWork: the floor and render produce the same
// bytes, so the benchmarks compare the same work.
func TestBenchmarkFloorIsTheSameWork(t *testing.T) {
	t.Parallel()

	in := benchInput(t)

	r, err := render.Render(in)
	if err != nil {
		t.Fatal(err)
	}

	if n := len(r.Steps); n != 20 {
		t.Fatalf("%d patches, want 20", n)
	}

	layers := map[string]bool{}
	for _, s := range r.Steps {
		layers[s.Layer] = true
	}

	if len(layers) != 5 {
		t.Fatalf("patches over %d layers, want 5", len(layers))
	}

	b, hash := floor(t, in, floorPatches(t, in))
	if !bytes.Equal(b, r.Bytes) || hash != r.Hash {
		t.Fatalf("the floor renders different bytes:\n%s", firstDiff(string(b), string(r.Bytes)))
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d: floor %q, render %q", i+1, al[i], bl[i])
		}
	}

	return fmt.Sprintf("lengths %d and %d", len(al), len(bl))
}

func BenchmarkRender(b *testing.B) {
	in := benchInput(b)

	for b.Loop() {
		r, err := render.Render(in)
		if err != nil {
			b.Fatal(err)
		}

		_ = r.Hash
	}
}

func BenchmarkMachineryFloor(b *testing.B) {
	in := benchInput(b)
	patches := floorPatches(b, in)

	for b.Loop() {
		floor(b, in, patches)
	}
}

// BenchmarkRenderWithOrigins adds the per-value origins the UI asks for.
func BenchmarkRenderWithOrigins(b *testing.B) {
	in := benchInput(b)

	for b.Loop() {
		r, err := render.Render(in)
		if err != nil {
			b.Fatal(err)
		}

		if _, err := r.Origins(); err != nil {
			b.Fatal(err)
		}
	}
}
