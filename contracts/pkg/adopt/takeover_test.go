package adopt_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	helmrelease "helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// running is a Cilium installed from the chart's render with choices, as a
// Talos inline manifest or an applied `helm template` leaves it: its objects
// by "Kind namespace/name", the DaemonSet healthy on nodes Nodes and
// cilium-config as rendered.
type running struct {
	objects map[string]*unstructured.Unstructured
	live    *adopt.CiliumLive
}

func runCilium(t *testing.T, choices ciliumvalues.Choices, nodes int) *running {
	t.Helper()

	r, err := cilium.Render(context.Background(), cilium.Options{Version: release.DefaultCiliumVersion, Choices: choices})
	if err != nil {
		t.Fatal(err)
	}

	out := &running{objects: map[string]*unstructured.Unstructured{}, live: &adopt.CiliumLive{Nodes: nodes}}

	dec := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(r.Manifest), 4096)

	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}

			t.Fatal(err)
		}

		if len(obj) == 0 {
			continue
		}

		u := &unstructured.Unstructured{Object: obj}
		out.objects[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] = u

		switch {
		case u.GetKind() == "DaemonSet" && u.GetName() == "cilium":
			ds := &appsv1.DaemonSet{}
			data, _ := yaml.Marshal(obj)
			if err := yaml.Unmarshal(data, ds); err != nil {
				t.Fatal(err)
			}

			n := int32(nodes) //nolint:gosec // a test's small count
			ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: n, NumberReady: n, UpdatedNumberScheduled: n}
			out.live.DaemonSet = ds
		case u.GetKind() == "ConfigMap" && u.GetName() == "cilium-config":
			cm := &corev1.ConfigMap{}
			data, _ := yaml.Marshal(obj)
			if err := yaml.Unmarshal(data, cm); err != nil {
				t.Fatal(err)
			}

			out.live.Config = cm.Data
		}
	}

	return out
}

func (r *running) get(_ context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return r.objects[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()], nil
}

func prism(port int) map[string]adopt.KubePrism {
	return map[string]adopt.KubePrism{"10.5.0.2": {Port: port, Healthy: port != 0}, "10.5.0.3": {Port: port, Healthy: port != 0}}
}

func rules(t *adopt.Takeover) string {
	out := make([]string, 0, len(t.Refusals))
	for _, r := range t.Refusals {
		out = append(out, r.Rule+" → "+r.WayOut)
	}

	return strings.Join(out, "\n")
}

// TestCiliumTakeoverSameRender: a Cilium applied from the very render Ichor
// would install (the pinned chart, Ichor's values, the cluster's Node count)
// has no difference and is taken over without a flag; the tunnel is carried
// over from cilium-config.
func TestCiliumTakeoverSameRender(t *testing.T) {
	ch := ciliumvalues.Choices{Tunnel: ciliumvalues.TunnelGeneve, Nodes: 2}
	r := runCilium(t, ch, 2)

	tk, err := adopt.CheckCiliumTakeover(context.Background(), r.live, adopt.TakeoverInput{KubeProxy: ichorv1alpha1.KubeProxyEnabled, KubePrism: prism(7445)}, r.get)
	if err != nil {
		t.Fatal(err)
	}

	if len(tk.Refusals) > 0 || len(tk.Differences) > 0 {
		t.Fatalf("the same render: refusals %s, differences %+v", rules(tk), tk.Differences)
	}

	if tk.Chart != release.DefaultCiliumVersion || tk.Running != release.DefaultCiliumVersion || tk.Tunnel != ciliumvalues.TunnelGeneve || tk.IPAM != "kubernetes" {
		t.Errorf("the takeover: %+v", tk)
	}
}

// TestCiliumTakeoverDiffNeedsConsent: a Cilium applied for one Node in a
// cluster of three differs in the operator's replicas (Ichor's default, not
// an Ichor-owned value): refused without --accept-cilium-diff, accepted with
// it; a kube-proxy replacement Cilium on a cluster whose Talos runs
// kube-proxy differs in an Ichor-owned value and needs
// --accept-cilium-changes too.
func TestCiliumTakeoverDiffNeedsConsent(t *testing.T) {
	ctx := context.Background()
	r := runCilium(t, ciliumvalues.Choices{Nodes: 1}, 3)
	in := adopt.TakeoverInput{KubeProxy: ichorv1alpha1.KubeProxyEnabled, KubePrism: prism(7445)}

	tk, err := adopt.CheckCiliumTakeover(ctx, r.live, in, r.get)
	if err != nil {
		t.Fatal(err)
	}

	var replicas bool

	for _, d := range tk.Differences {
		if d.Object == "Deployment kube-system/cilium-operator" && slices.Contains(d.Paths, "spec.replicas") && len(d.Owned) == 0 {
			replicas = true
		}
	}

	if !replicas || !strings.Contains(rules(tk), "--accept-cilium-diff") || strings.Contains(rules(tk), "--accept-cilium-changes") {
		t.Fatalf("one Node's Cilium in three: differences %+v, refusals %s", tk.Differences, rules(tk))
	}

	in.AcceptDiff = true

	if tk, err = adopt.CheckCiliumTakeover(ctx, r.live, in, r.get); err != nil || len(tk.Refusals) > 0 {
		t.Fatalf("with --accept-cilium-diff: %v %s", err, rules(tk))
	}

	kpr := runCilium(t, ciliumvalues.Choices{Nodes: 3, KubeProxy: ichorv1alpha1.KubeProxyReplaced}, 3)

	tk, err = adopt.CheckCiliumTakeover(ctx, kpr.live, in, kpr.get)
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(rules(tk), "--accept-cilium-changes") {
		t.Fatalf("kube-proxy replacement against Talos's kube-proxy: differences %+v, refusals %s", tk.Differences, rules(tk))
	}

	var owned []string
	for _, d := range tk.Differences {
		owned = append(owned, d.Owned...)
	}

	if !slices.Contains(owned, "data.kube-proxy-replacement") {
		t.Errorf("owned changes %v do not name cilium-config's kube-proxy-replacement", owned)
	}

	in.AcceptChanges = true

	if tk, err = adopt.CheckCiliumTakeover(ctx, kpr.live, in, kpr.get); err != nil || len(tk.Refusals) > 0 {
		t.Fatalf("with both flags: %v %s", err, rules(tk))
	}
}

// TestCiliumTakeoverRefusals: what no flag accepts, each refused before a
// render with a way out.
func TestCiliumTakeoverRefusals(t *testing.T) {
	ctx := context.Background()
	in := adopt.TakeoverInput{KubeProxy: ichorv1alpha1.KubeProxyEnabled, KubePrism: prism(7445), AcceptDiff: true, AcceptChanges: true}

	cases := []struct {
		name   string
		mutate func(r *running, in *adopt.TakeoverInput)
		want   string
	}{
		{"cluster-pool IPAM", func(r *running, _ *adopt.TakeoverInput) { r.live.Config["ipam"] = "cluster-pool" }, `ipam "cluster-pool"`},
		{"native routing", func(r *running, _ *adopt.TakeoverInput) { r.live.Config["routing-mode"] = "native" }, `routes in "native" mode`},
		{"not ready everywhere", func(r *running, _ *adopt.TakeoverInput) { r.live.DaemonSet.Status.NumberReady = 1 }, "not healthy on every Node"},
		{"KubePrism off", func(_ *running, in *adopt.TakeoverInput) { in.KubePrism = prism(0) }, "KubePrism is not on port 7445 on 10.5.0.2 (off)"},
		{"KubePrism unhealthy", func(_ *running, in *adopt.TakeoverInput) {
			in.KubePrism = map[string]adopt.KubePrism{"10.5.0.2": {Port: 7445, Healthy: true}, "10.5.0.3": {Port: 7445}}
		}, "KubePrism is not healthy on 10.5.0.3"},
		{"a Helm release of another name", func(r *running, _ *adopt.TakeoverInput) {
			r.live.DaemonSet.Annotations = map[string]string{"meta.helm.sh/release-name": "cni", "meta.helm.sh/release-namespace": "kube-system"}
		}, "runs as Helm release kube-system/cni"},
		{"a Helm release not at rest", func(r *running, _ *adopt.TakeoverInput) {
			r.live.HelmRecords = []corev1.Secret{helmRecord(t, 1, "deployed", nil), helmRecord(t, 2, "pending-upgrade", nil)}
		}, `(sh.helm.release.v1.cilium.v2) is "pending-upgrade", not deployed`},
		{"an old minor", func(r *running, _ *adopt.TakeoverInput) {
			r.live.DaemonSet.Spec.Template.Spec.Containers[0].Image = "quay.io/cilium/cilium:v1.17.4"
		}, "the Cilium that runs is v1.17.4"},
		{"no DaemonSet", func(r *running, _ *adopt.TakeoverInput) { r.live.DaemonSet = nil }, "is not in the cluster"},
		{"another CNI beside it", func(r *running, _ *adopt.TakeoverInput) {
			r.live.OtherCNIs = []string{"flannel (kube-system/kube-flannel)"}
		}, "runs flannel (kube-system/kube-flannel), installed outside the machine configuration"},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCilium(t, ciliumvalues.Choices{Nodes: 2}, 2)
			in := in
			c.mutate(r, &in)

			tk, err := adopt.CheckCiliumTakeover(ctx, r.live, in, r.get)
			if err != nil {
				t.Fatal(err)
			}

			if !strings.Contains(rules(tk), c.want) || tk.Refusals[0].WayOut == "" {
				t.Errorf("refusals %s, want one saying %q", rules(tk), c.want)
			}
		})
	}
}

// TestTakeoverChart: the running version when embedded, else the embedded
// chart of its minor; a minor other than the pinned one or the one below is
// refused.
func TestTakeoverChart(t *testing.T) {
	for running, want := range map[string]string{
		"v1.20.2": "v1.20.2", "v1.19.3": "v1.19.3", "v1.20.0": "v1.20.2", "v1.19.1": "v1.19.3", "v1.18.5": "", "v1.21.0": "", "": "",
	} {
		got, err := cilium.TakeoverChart(running)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("TakeoverChart(%q) = %q, %v; want %q", running, got, err, want)
		}
	}
}

// TestDiffObject: leaves of the render only; the API server's defaults and
// status are not differences, a changed or missing leaf and a list of
// another length are, a Secret's stringData is compared as data.
func TestDiffObject(t *testing.T) {
	want := map[string]any{
		"kind": "Deployment", "metadata": map[string]any{"name": "x", "labels": map[string]any{"a": "1"}},
		"spec": map[string]any{"replicas": 2, "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i:1"}}}}},
	}
	cur := map[string]any{
		"kind": "Deployment", "metadata": map[string]any{"name": "x", "uid": "u", "labels": map[string]any{"a": "1", "b": "2"}},
		"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent",
		}}}}},
		"status": map[string]any{"replicas": 2},
	}

	if d := adopt.DiffObject(want, cur); len(d) != 0 {
		t.Errorf("defaults and status: %v", d)
	}

	cur["spec"].(map[string]any)["replicas"] = int64(1)
	cur["metadata"].(map[string]any)["labels"] = map[string]any{"a": "2"}

	if d := adopt.DiffObject(want, cur); !slices.Equal(d, []string{"metadata.labels.a", "spec.replicas"}) {
		t.Errorf("changed leaves: %v", d)
	}

	cur["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"] = []any{}
	if d := adopt.DiffObject(want, cur); !slices.Contains(d, "spec.template.spec.containers") {
		t.Errorf("a shorter list: %v", d)
	}

	// The API server drops zero values and writes quantities canonically.
	zero := map[string]any{"kind": "Pod", "spec": map[string]any{"hostNetwork": false, "delay": 0, "limits": map[string]any{"cpu": "1000m", "memory": 1}}}
	if d := adopt.DiffObject(zero, map[string]any{"kind": "Pod", "spec": map[string]any{"limits": map[string]any{"cpu": "1", "memory": "1"}}}); len(d) != 0 {
		t.Errorf("zero values and quantities: %v", d)
	}

	if d := adopt.DiffObject(zero, map[string]any{"kind": "Pod", "spec": map[string]any{"hostNetwork": true, "limits": map[string]any{"cpu": "2", "memory": "1"}}}); len(d) != 2 {
		t.Errorf("a changed boolean and quantity: %v", d)
	}

	secret := map[string]any{"kind": "Secret", "stringData": map[string]any{"k": "v"}}
	if d := adopt.DiffObject(secret, map[string]any{"kind": "Secret", "data": map[string]any{"k": "dg=="}}); len(d) != 0 {
		t.Errorf("stringData against data: %v", d)
	}
}

// helmRecord is a record of release cilium as Helm's Secrets driver stores
// it: the release as JSON, gzipped, base64-encoded, labelled.
func helmRecord(t *testing.T, version int, status string, values map[string]any) corev1.Secret {
	t.Helper()

	data, err := json.Marshal(&helmrelease.Release{Name: "cilium", Namespace: "kube-system", Version: version, Config: values})
	if err != nil {
		t.Fatal(err)
	}

	var gz bytes.Buffer

	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(data)
	_ = zw.Close()

	s := corev1.Secret{Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(gz.Bytes()))}}
	s.Name = fmt.Sprintf("sh.helm.release.v1.cilium.v%d", version)
	s.Labels = map[string]string{"owner": "helm", "name": "cilium", "version": strconv.Itoa(version), "status": status}

	return s
}

// TestCiliumTakeoverHelmRelease: a Cilium installed as Helm release cilium
// keeps the values of its newest record (the older ones are not read)
// without the Ichor-owned keys, which are listed; every record is named for
// the copy the write makes.
func TestCiliumTakeoverHelmRelease(t *testing.T) {
	r := runCilium(t, ciliumvalues.Choices{Nodes: 2}, 2)
	r.live.HelmRecords = []corev1.Secret{
		helmRecord(t, 1, "superseded", map[string]any{"debug": map[string]any{"enabled": false}}),
		helmRecord(t, 2, "deployed", map[string]any{
			"debug": map[string]any{"enabled": true}, "ipam": map[string]any{"mode": "kubernetes"}, "k8sServiceHost": "localhost",
		}),
	}

	tk, err := adopt.CheckCiliumTakeover(context.Background(), r.live,
		adopt.TakeoverInput{KubeProxy: ichorv1alpha1.KubeProxyEnabled, KubePrism: prism(7445), AcceptDiff: true}, r.get)
	if err != nil {
		t.Fatal(err)
	}

	if len(tk.Refusals) > 0 {
		t.Fatalf("refusals: %s", rules(tk))
	}

	if dbg, _ := tk.UserValues["debug"].(map[string]any); dbg["enabled"] != true || len(tk.UserValues) != 1 {
		t.Errorf("the user's layer from the newest record: %v", tk.UserValues)
	}

	if !slices.Equal(tk.DroppedOwned, []string{"ipam.mode", "k8sServiceHost"}) {
		t.Errorf("the owned keys dropped: %v", tk.DroppedOwned)
	}

	if !slices.Equal(tk.PriorRelease, []string{"sh.helm.release.v1.cilium.v1", "sh.helm.release.v1.cilium.v2"}) {
		t.Errorf("the records to keep: %v", tk.PriorRelease)
	}

	var debug bool

	for _, d := range tk.Differences {
		debug = debug || (d.Object == "ConfigMap kube-system/cilium-config" && slices.Contains(d.Paths, "data.debug"))
	}

	if !debug {
		t.Errorf("the user's debug value is not rendered: %+v", tk.Differences)
	}
}

// TestCheckCiliumInstall: a cluster with no CNI gets the pinned chart for
// its Node count, unless another CNI runs as a DaemonSet (installed outside
// the machine configuration), a machine's KubePrism is off 7445 or a Node
// has no pod CIDR, each refused with the way out.
func TestCheckCiliumInstall(t *testing.T) {
	live := &adopt.CiliumLive{Nodes: 2}

	ci := adopt.CheckCiliumInstall(live, prism(7445))
	if len(ci.Refusals) > 0 || ci.Chart != release.DefaultCiliumVersion || ci.Nodes != 2 {
		t.Fatalf("a ready cluster: %+v", ci)
	}

	live.OtherCNIs = []string{"calico (kube-system/calico-node)"}
	if ci = adopt.CheckCiliumInstall(live, prism(7445)); len(ci.Refusals) != 1 || !strings.Contains(ci.Refusals[0].Rule, "runs calico") {
		t.Fatalf("a Calico applied with kubectl: %+v", ci.Refusals)
	}

	live.OtherCNIs = nil
	live.NoPodCIDR = []string{"w-1"}

	ci = adopt.CheckCiliumInstall(live, map[string]adopt.KubePrism{"10.5.0.2": {Port: 7445, Healthy: true}, "10.5.0.3": {Port: 7000, Healthy: true}})
	if len(ci.Refusals) != 2 || !strings.Contains(ci.Refusals[0].Rule, "10.5.0.3 (port 7000)") ||
		!strings.Contains(ci.Refusals[1].Rule, "w-1 have no pod CIDR") || ci.Refusals[1].WayOut == "" {
		t.Fatalf("KubePrism elsewhere and a Node without a pod CIDR: %+v", ci.Refusals)
	}

	for _, rf := range ci.Refusals {
		if !strings.Contains(rf.WayOut, "`ichor adopt --plan`") {
			t.Errorf("the adoption's way out does not name its plan: %q", rf.WayOut)
		}
	}
}

// TestCheckCiliumBootstrap: `ichor cni bootstrap` checks what the adoption
// checks for a cluster with no CNI, and each way out names its own plan;
// another CNI is refused as a pod network that exists already.
func TestCheckCiliumBootstrap(t *testing.T) {
	live := &adopt.CiliumLive{Nodes: 2}

	if ci := adopt.CheckCiliumBootstrap(live, prism(7445)); len(ci.Refusals) > 0 || ci.Chart != release.DefaultCiliumVersion || ci.Nodes != 2 {
		t.Fatalf("a cluster with no CNI: %+v", ci)
	}

	live.OtherCNIs = []string{"calico (kube-system/calico-node)"}
	live.NoPodCIDR = []string{"w-1"}

	ci := adopt.CheckCiliumBootstrap(live, map[string]adopt.KubePrism{"10.5.0.2": {Port: 7445}, "10.5.0.3": {Port: 0, Healthy: true}})
	if len(ci.Refusals) != 4 || !strings.Contains(ci.Refusals[0].WayOut, "gives the cluster a pod network already") ||
		!strings.Contains(ci.Refusals[1].Rule, "10.5.0.3 (off)") || !strings.Contains(ci.Refusals[2].Rule, "not healthy on 10.5.0.2") ||
		!strings.Contains(ci.Refusals[3].Rule, "w-1 have no pod CIDR") {
		t.Fatalf("another CNI, KubePrism off and unhealthy, no pod CIDR: %+v", ci.Refusals)
	}

	for _, rf := range ci.Refusals {
		if !strings.Contains(rf.WayOut, "`ichor cni bootstrap --plan`") || strings.Contains(rf.WayOut, "adopt") {
			t.Errorf("the bootstrap's way out names another command: %q", rf.WayOut)
		}
	}
}
