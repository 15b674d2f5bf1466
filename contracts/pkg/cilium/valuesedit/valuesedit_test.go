package valuesedit

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

func cluster(values string) *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns"}}
	c.Spec.KubernetesVersion = "1.37.2"
	c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "geneve", KubeProxy: ichorv1alpha1.KubeProxyReplaced}
	if values != "" {
		c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(values)}}
	}
	return c
}

func refusals(t *testing.T, err error) string {
	t.Helper()
	var rf *Refused
	if !errors.As(err, &rf) {
		t.Fatalf("want a *Refused, got %v", err)
	}
	return rf.Error()
}

// TestCompute: a proposed layer is checked with the webhook's rule, and its
// effect is the diff of the rendered objects, object by object.
func TestCompute(t *testing.T) {
	ctx := context.Background()
	c := cluster(`{"debug":{"enabled":true}}`)

	// A new key shows as the objects it adds; the stored key stays.
	p, err := Compute(ctx, c, []byte("debug:\n  enabled: true\nhubble:\n  relay:\n    enabled: true\n"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != release.DefaultCiliumVersion {
		t.Fatalf("version %s, want the default %s", p.Version, release.DefaultCiliumVersion)
	}
	var relay *ObjectChange
	for i := range p.Objects {
		if p.Objects[i].Object == "Deployment kube-system/hubble-relay" {
			relay = &p.Objects[i]
		}
	}
	if relay == nil || relay.Change != Added || !strings.Contains(relay.Diff, "+++ b/Deployment kube-system/hubble-relay") {
		t.Fatalf("enabling hubble.relay must add its Deployment; objects: %+v", names(p.Objects))
	}
	if !strings.Contains(p.Diff, relay.Diff) || !strings.Contains(p.UserYAML, "relay:") || !strings.Contains(string(p.UserJSON), `"relay":{"enabled":true}`) {
		t.Fatalf("the preview: diff %d bytes, user YAML %q, JSON %s", len(p.Diff), p.UserYAML, p.UserJSON)
	}
	// The effective values carry the cluster's choices over the user's layer.
	if !strings.Contains(p.EffectiveYAML, "tunnelProtocol: geneve") || !strings.Contains(p.EffectiveYAML, "kubeProxyReplacement: true") {
		t.Fatalf("effective values:\n%s", p.EffectiveYAML)
	}

	// Dropping a key changes the ConfigMap line by line.
	p, err = Compute(ctx, c, []byte(""), 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Objects) == 0 || p.UserJSON != nil || p.UserYAML != "{}\n" {
		t.Fatalf("an empty layer: objects %v, JSON %q, YAML %q", names(p.Objects), p.UserJSON, p.UserYAML)
	}
	if !strings.Contains(p.Diff, "--- a/ConfigMap kube-system/cilium-config") || !strings.Contains(p.Diff, `-  debug: "true"`) {
		t.Fatalf("turning debug off must show in cilium-config:\n%s", p.Diff)
	}

	// The stored layer itself, in YAML, changes nothing.
	p, err = Compute(ctx, c, []byte("debug: {enabled: true}\n"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if p.Changed() || p.Diff != "" {
		t.Fatalf("the stored layer changes nothing, got %v", names(p.Objects))
	}

	// Ichor-owned keys are refused by name, with the list of what Ichor owns.
	_, err = Compute(ctx, c, []byte("ipam:\n  mode: cluster-pool\ntunnelProtocol: vxlan\nhubble: {enabled: true}\n"), 3)
	msg := refusals(t, err)
	for _, want := range []string{`"ipam.mode"`, `"tunnelProtocol"`, "spec.cni.cilium.values", "remove these keys", "Ichor owns cgroup.autoMount.enabled"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the refusal must contain %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, `"hubble.enabled"`) {
		t.Fatalf("a user key is not refused: %s", msg)
	}
	// Not a map, not YAML.
	for _, bad := range []string{"- a\n- b\n", "a: [", "just a string"} {
		if msg := refusals(t, func() error { _, err := Compute(ctx, c, []byte(bad), 3); return err }()); !strings.Contains(msg, "map of Helm values") {
			t.Fatalf("%q: %s", bad, msg)
		}
	}

	// An unmanaged CNI has no values.
	u := cluster("")
	u.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged}
	if _, err := Compute(ctx, u, nil, 0); !errors.Is(err, ErrUnmanaged) {
		t.Fatalf("unmanaged: %v", err)
	}
}

func names(objs []ObjectChange) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.Change+" "+o.Object)
	}
	return out
}

// TestShow: the stored layer, the effective values and whether they are applied.
func TestShow(t *testing.T) {
	c := cluster(`{"debug":{"enabled":true}}`)
	v, err := Show(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.UserYAML != "debug:\n  enabled: true\n" || !strings.Contains(v.EffectiveYAML, "k8sServicePort: 7445") || !strings.Contains(v.EffectiveYAML, "replicas: 1") {
		t.Fatalf("view: user %q effective:\n%s", v.UserYAML, v.EffectiveYAML)
	}
	if v.Applied || v.Version != release.DefaultCiliumVersion {
		t.Fatalf("nothing is applied yet; version %s", v.Version)
	}
	eff, err := ciliumvalues.Effective(map[string]any{"debug": map[string]any{"enabled": true}}, Choices(c, 1))
	if err != nil {
		t.Fatal(err)
	}
	c.Status.CNI.ValuesHash = cilium.ValuesSHA256(eff)
	c.Status.CNI.CiliumVersion = "v1.19.3"
	if v, err = Show(c, 1); err != nil || !v.Applied || v.Version != "v1.19.3" {
		t.Fatalf("the recorded hash is the effective values': %+v %v", v, err)
	}
}

// TestDiffManifestsHidesSecrets: a Secret's values never reach the diff.
func TestDiffManifestsHidesSecrets(t *testing.T) {
	a := "---\n# Source: x\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: kube-system\ndata:\n  key: c2VjcmV0LW9uZQ==\n"
	b := strings.ReplaceAll(a, "c2VjcmV0LW9uZQ==", "c2VjcmV0LXR3bw==") + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\n"
	objs, err := DiffManifests(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(objs); len(got) != 2 || got[0] != "changed Secret kube-system/s" || got[1] != "added ConfigMap m" {
		t.Fatalf("objects: %v", got)
	}
	if strings.Contains(objs[0].Diff, "c2VjcmV0") || !strings.Contains(objs[0].Diff, "hidden; sha256") {
		t.Fatalf("the Secret's data must be hidden:\n%s", objs[0].Diff)
	}
	if objs, err = DiffManifests(b, a); err != nil || len(objs) != 2 || objs[1].Change != Removed || !strings.Contains(objs[1].Diff, "+++ /dev/null") {
		t.Fatalf("removed: %v %v", names(objs), err)
	}
}
