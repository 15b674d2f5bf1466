package cilium

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// goldenSHA256 is the SHA-256 of the manifest rendered with the default
// options (vxlan, kube-proxy enabled, one Node, no user values, Kubernetes
// release.DefaultKubernetesVersion) per embedded chart. A change here means
// the bytes `ichor init` writes into the inline manifest change: it must come
// from a deliberate change of the chart pin, the values or the Helm SDK.
var goldenSHA256 = map[string]string{
	"v1.19.3": "9b625ae4c6f0b4cb5ffbf4154c2f2d26e56ab50f3debbed36b34e6dcc88c2ef9",
	"v1.20.2": "67019a2b9982b9a72dcf148f071e170026e5f3db710b22db24f3012435500322",
}

func TestGoldenHash(t *testing.T) {
	if got, want := Versions(), release.CiliumVersions(); !slices.Equal(got, want) {
		t.Fatalf("embedded charts %v, release.CiliumVersions() %v: run `go tool task generate`", got, want)
	}
	for _, v := range Versions() {
		r := render(t, Options{Version: v})
		if r.SHA256 != goldenSHA256[v] {
			t.Errorf("cilium %s: manifest sha256 %s, golden %s", v, r.SHA256, goldenSHA256[v])
		}
		if r.Version != v {
			t.Errorf("rendered version %s, asked %s", r.Version, v)
		}
	}
}

func TestRenderTwiceGivesTheSameBytes(t *testing.T) {
	// A user layer with many keys, so that map iteration order would show.
	user := map[string]any{
		"hubble":   map[string]any{"relay": map[string]any{"enabled": true}, "ui": map[string]any{"enabled": true}},
		"debug":    map[string]any{"enabled": true},
		"operator": map[string]any{"prometheus": map[string]any{"enabled": true}},
		"bpf":      map[string]any{"masquerade": true},
	}
	for _, v := range Versions() {
		opts := Options{Version: v, UserValues: user, Choices: ciliumvalues.Choices{Tunnel: ciliumvalues.TunnelGeneve, KubeProxy: ichorv1alpha1.KubeProxyReplaced, Nodes: 3}}
		a, b := render(t, opts), render(t, opts)
		if a.Manifest != b.Manifest || a.SHA256 != b.SHA256 {
			t.Errorf("cilium %s: two renders of the same options differ (%s vs %s)", v, a.SHA256, b.SHA256)
		}
	}
}

func TestDefaultVersion(t *testing.T) {
	r := render(t, Options{})
	if r.Version != release.DefaultCiliumVersion {
		t.Fatalf("an empty version rendered %s, want the default %s", r.Version, release.DefaultCiliumVersion)
	}
}

func TestUnknownVersionIsRefusedWithTheEmbeddedList(t *testing.T) {
	_, err := Render(context.Background(), Options{Version: "v1.17.0"})
	var uv *UnknownVersionError
	if !errors.As(err, &uv) {
		t.Fatalf("want an *UnknownVersionError, got %v", err)
	}
	for _, v := range release.CiliumVersions() {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("the error %q does not list the embedded version %s", err, v)
		}
	}
	if !strings.Contains(err.Error(), "v1.17.0") {
		t.Errorf("the error %q does not name the version asked for", err)
	}
}

func TestTunnelProtocol(t *testing.T) {
	for _, tt := range []struct{ tunnel, want string }{
		{"", "vxlan"},
		{ciliumvalues.TunnelVXLAN, "vxlan"},
		{ciliumvalues.TunnelGeneve, "geneve"},
	} {
		for _, v := range Versions() {
			cfg := config(t, objects(t, render(t, Options{Version: v, Choices: ciliumvalues.Choices{Tunnel: tt.tunnel}}).Manifest))
			if cfg["tunnel-protocol"] != tt.want || cfg["routing-mode"] != "tunnel" {
				t.Errorf("cilium %s, tunnel %q: tunnel-protocol %v, routing-mode %v; want %s over tunnel routing",
					v, tt.tunnel, cfg["tunnel-protocol"], cfg["routing-mode"], tt.want)
			}
		}
	}
	_, err := Render(context.Background(), Options{Choices: ciliumvalues.Choices{Tunnel: "gre"}})
	if !errors.Is(err, ciliumvalues.ErrChoice) || !strings.Contains(err.Error(), "gre") {
		t.Errorf("an unsupported tunnel must be refused naming it, got %v", err)
	}
}

func TestKubeProxyReplacement(t *testing.T) {
	for _, tt := range []struct{ mode, want string }{
		{"", "false"},
		{ichorv1alpha1.KubeProxyEnabled, "false"},
		{ichorv1alpha1.KubeProxyReplaced, "true"},
	} {
		for _, v := range Versions() {
			objs := objects(t, render(t, Options{Version: v, Choices: ciliumvalues.Choices{KubeProxy: tt.mode}}).Manifest)
			if got := config(t, objs)["kube-proxy-replacement"]; got != tt.want {
				t.Errorf("cilium %s, kubeProxy %q: kube-proxy-replacement %v, want %s", v, tt.mode, got, tt.want)
			}
			// Either way the agent reaches the API server through KubePrism,
			// which needs neither kube-proxy nor the Service network.
			agent := container(t, find(t, objs, "DaemonSet", "cilium"), false, "cilium-agent")
			if h, p := env(agent, "KUBERNETES_SERVICE_HOST"), env(agent, "KUBERNETES_SERVICE_PORT"); h != "localhost" || p != "7445" {
				t.Errorf("cilium %s, kubeProxy %q: the agent talks to %s:%s, want KubePrism localhost:7445", v, tt.mode, h, p)
			}
		}
	}
	_, err := Render(context.Background(), Options{Choices: ciliumvalues.Choices{KubeProxy: "off"}})
	if !errors.Is(err, ciliumvalues.ErrChoice) {
		t.Errorf("an unsupported kube-proxy mode must be refused, got %v", err)
	}
}

// The values Talos's guide requires ("Deploying Cilium CNI",
// https://docs.siderolabs.com/kubernetes-guides/cni/deploying-cilium).
func TestTalosRequiredValues(t *testing.T) {
	for _, v := range Versions() {
		objs := objects(t, render(t, Options{Version: v}).Manifest)
		cfg := config(t, objs)
		if cfg["ipam"] != "kubernetes" {
			t.Errorf("cilium %s: ipam %v, want kubernetes", v, cfg["ipam"])
		}
		if cfg["cgroup-root"] != "/sys/fs/cgroup" {
			t.Errorf("cilium %s: cgroup-root %v, want Talos's /sys/fs/cgroup", v, cfg["cgroup-root"])
		}
		ds := find(t, objs, "DaemonSet", "cilium")
		for _, c := range containers(ds, true) {
			if c["name"] == "mount-cgroup" {
				t.Errorf("cilium %s: the mount-cgroup init container is rendered, but cgroup.autoMount must be off on Talos", v)
			}
		}
		caps := strings2(get(container(t, ds, false, "cilium-agent"), "securityContext", "capabilities", "add"))
		if slices.Contains(caps, "SYS_MODULE") || !slices.Equal(caps, ciliumvalues.CiliumAgentCapabilities) {
			t.Errorf("cilium %s: agent capabilities %v, want %v (no SYS_MODULE)", v, caps, ciliumvalues.CiliumAgentCapabilities)
		}
		clean := strings2(get(container(t, ds, true, "clean-cilium-state"), "securityContext", "capabilities", "add"))
		if !slices.Equal(clean, ciliumvalues.CleanCiliumStateCapabilities) {
			t.Errorf("cilium %s: clean-cilium-state capabilities %v, want %v", v, clean, ciliumvalues.CleanCiliumStateCapabilities)
		}
		// Secrets Cilium reads live in cilium-secrets only; the chart creates it.
		if !has(objs, "Namespace", ciliumvalues.SecretsNamespace) {
			t.Errorf("cilium %s: no Namespace %s", v, ciliumvalues.SecretsNamespace)
		}
		secretRoles := 0
		for _, o := range objs {
			if o.kind() == "Role" && strings.Contains(o.name(), "secrets") {
				secretRoles++
				if o.namespace() != ciliumvalues.SecretsNamespace {
					t.Errorf("cilium %s: Role %s in %s, want %s", v, o.name(), o.namespace(), ciliumvalues.SecretsNamespace)
				}
			}
		}
		if secretRoles == 0 {
			t.Errorf("cilium %s: no Role grants access to a secrets namespace", v)
		}
		// No certificate is generated at render time (Hubble's come from the CronJob).
		for _, o := range objs {
			if o.kind() == "Secret" {
				t.Errorf("cilium %s: the render carries Secret %s/%s", v, o.namespace(), o.name())
			}
		}
		if !has(objs, "CronJob", "hubble-generate-certs") {
			t.Errorf("cilium %s: no hubble-generate-certs CronJob", v)
		}
		if r := get(find(t, objs, "Deployment", "cilium-operator"), "spec", "replicas"); r != float64(1) && r != int64(1) {
			t.Errorf("cilium %s: one Node but operator replicas %v, want 1", v, r)
		}
	}
}

func TestOperatorReplicasFollowNodes(t *testing.T) {
	objs := objects(t, render(t, Options{Choices: ciliumvalues.Choices{Nodes: 4}}).Manifest)
	if r := get(find(t, objs, "Deployment", "cilium-operator"), "spec", "replicas"); r != float64(2) && r != int64(2) {
		t.Errorf("four Nodes: operator replicas %v, want the chart's 2", r)
	}
}

func TestUserValuesAreMerged(t *testing.T) {
	user := map[string]any{
		"debug":    map[string]any{"enabled": true},
		"hubble":   map[string]any{"relay": map[string]any{"enabled": true}},
		"operator": map[string]any{"replicas": 3},
	}
	for _, v := range Versions() {
		r := render(t, Options{Version: v, UserValues: user})
		objs := objects(t, r.Manifest)
		if got := config(t, objs)["debug"]; got != "true" {
			t.Errorf("cilium %s: debug %v, want the user's true", v, got)
		}
		if !has(objs, "Deployment", "hubble-relay") {
			t.Errorf("cilium %s: the user enabled hubble.relay but no hubble-relay Deployment is rendered", v)
		}
		// The user's layer is over Ichor's defaults: 3 replicas, not the one-Node default of 1.
		if r := get(find(t, objs, "Deployment", "cilium-operator"), "spec", "replicas"); r != float64(3) && r != int64(3) {
			t.Errorf("cilium %s: operator replicas %v, want the user's 3", v, r)
		}
		// Ichor's default under the user's key survives the merge of the same map.
		if got := get(r.Values, "hubble", "tls", "auto", "method"); got != "cronJob" {
			t.Errorf("cilium %s: hubble.tls.auto.method %v after merging the user's hubble map, want cronJob", v, got)
		}
	}
	if _, ok := user["ipam"]; ok {
		t.Error("Render changed the caller's user values")
	}
}

func TestOwnedKeysAreRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		user map[string]any
		key  string
	}{
		{"kube-proxy replacement", map[string]any{"kubeProxyReplacement": true}, "kubeProxyReplacement"},
		{"tunnel protocol", map[string]any{"tunnelProtocol": "geneve"}, "tunnelProtocol"},
		{"routing mode", map[string]any{"routingMode": "native"}, "routingMode"},
		{"ipam", map[string]any{"ipam": map[string]any{"mode": "cluster-pool"}}, "ipam.mode"},
		{"KubePrism host", map[string]any{"k8sServiceHost": "10.0.0.1"}, "k8sServiceHost"},
		{"KubePrism port", map[string]any{"k8sServicePort": 6443}, "k8sServicePort"},
		{"cgroup replaced by null", map[string]any{"cgroup": nil}, "cgroup"},
		{"capabilities", map[string]any{"securityContext": map[string]any{"capabilities": map[string]any{"ciliumAgent": []any{"SYS_MODULE"}}}}, "securityContext.capabilities.ciliumAgent"},
		{"a secrets namespace", map[string]any{"tls": map[string]any{"secretsNamespace": map[string]any{"name": "kube-system"}}}, "tls.secretsNamespace.name"},
		{"a secrets namespace the chart may add", map[string]any{"clustermesh": map[string]any{"secretsNamespace": map[string]any{"name": "x"}}}, "clustermesh.secretsNamespace.name"},
		{"hubble certificates made by helm", map[string]any{"hubble": map[string]any{"tls": map[string]any{"auto": map[string]any{"method": "helm"}}}}, "hubble.tls.auto.method"},
		{"clustermesh certificates made by helm", map[string]any{"clustermesh": map[string]any{"apiserver": map[string]any{"tls": map[string]any{"auto": map[string]any{"method": "helm"}}}}}, "clustermesh.apiserver.tls.auto.method"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(context.Background(), Options{UserValues: tt.user})
			var owned *ciliumvalues.OwnedKeyError
			if !errors.As(err, &owned) {
				t.Fatalf("want an *ciliumvalues.OwnedKeyError, got %v", err)
			}
			if !slices.Equal(owned.Keys, []string{tt.key}) || !strings.Contains(err.Error(), `"`+tt.key+`"`) {
				t.Errorf("the refusal names %v (%q), want %q", owned.Keys, err, tt.key)
			}
		})
	}
}

func TestKubernetesVersionReachesTheTemplates(t *testing.T) {
	// The agent's AppArmor annotation is rendered only for Kubernetes below 1.30.
	const annotation = "container.apparmor.security.beta.kubernetes.io/cilium-agent"
	annotated := func(kube string) bool {
		objs := objects(t, render(t, Options{KubernetesVersion: kube}).Manifest)
		a, _ := get(find(t, objs, "DaemonSet", "cilium"), "spec", "template", "metadata", "annotations").(map[string]any)
		_, ok := a[annotation]
		return ok
	}
	if !annotated("1.29.4") {
		t.Error("Kubernetes 1.29: no AppArmor annotation, so the version did not reach the templates")
	}
	if annotated("1.37.2") {
		t.Error("Kubernetes 1.37: AppArmor annotation rendered")
	}
	if _, err := Render(context.Background(), Options{KubernetesVersion: "latest"}); err == nil {
		t.Error("a Kubernetes version that does not parse must be refused")
	}
}

func TestChartSchemaChecksUserValues(t *testing.T) {
	_, err := Render(context.Background(), Options{UserValues: map[string]any{"debug": map[string]any{"enabled": "yes"}}})
	if err == nil || !strings.Contains(err.Error(), "debug") {
		t.Fatalf("a user value against the chart's values.schema.json must be refused naming it, got %v", err)
	}
}
