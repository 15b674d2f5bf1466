package cni

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

type dsOpt func(*appsv1.DaemonSet)

func ds(ns, name string, opts ...dsOpt) appsv1.DaemonSet {
	d := appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: name, Image: "registry.example/" + name + ":1.0"}}

	for _, o := range opts {
		o(&d)
	}

	return d
}

func labels(kv ...string) dsOpt {
	return func(d *appsv1.DaemonSet) {
		d.Spec.Template.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			d.Spec.Template.Labels[kv[i]] = kv[i+1]
		}
	}
}

func hostPath(p string) dsOpt {
	return func(d *appsv1.DaemonSet) {
		d.Spec.Template.Spec.Volumes = append(d.Spec.Template.Spec.Volumes,
			corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}}})
	}
}

func containers(cs ...corev1.Container) dsOpt {
	return func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers = cs }
}

func deleting(d *appsv1.DaemonSet) { now := metav1.Now(); d.DeletionTimestamp = &now }

// The DaemonSets every cluster has that are no CNI: kube-proxy (Talos's),
// a log shipper that mounts /var/log.
func background() []appsv1.DaemonSet {
	return []appsv1.DaemonSet{
		ds("kube-system", "kube-proxy", labels("k8s-app", "kube-proxy"), hostPath("/lib/modules"), hostPath("/run/xtables.lock")),
		ds("logging", "fluent-bit", hostPath("/var/log")),
	}
}

// TestDetect reads the CNI from DaemonSet lists as the workload cluster
// returns them.
func TestDetect(t *testing.T) {
	ciliumAgent := ds("kube-system", "cilium", labels("k8s-app", "cilium"), hostPath("/etc/cni/net.d"),
		containers(corev1.Container{Name: "config", Image: "quay.io/cilium/cilium:v1.20.2@sha256:0123"},
			corev1.Container{Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.20.2@sha256:0123"}))

	cases := []struct {
		name      string
		list      []appsv1.DaemonSet
		want, via string
		version   string
	}{
		{name: "nothing", list: nil, want: DetectedNone},
		{name: "only kube-proxy and a log shipper", list: background(), want: DetectedNone},
		{name: "cilium agent", list: append(background(), ciliumAgent), want: DetectedCilium, via: "kube-system/cilium", version: "v1.20.2"},
		{name: "cilium by its label under another name", list: append(background(),
			ds("cni", "agent", labels("k8s-app", "cilium"), containers(corev1.Container{Name: "cilium-agent", Image: "example.org/mirror/cilium:1.19.3"}))),
			want: DetectedCilium, via: "cni/agent", version: "1.19.3"},
		{name: "cilium with an image by digest only", list: []appsv1.DaemonSet{
			ds("kube-system", "cilium", containers(corev1.Container{Name: "cilium-agent", Image: "localhost:5000/cilium@sha256:0123"}))},
			want: DetectedCilium, via: "kube-system/cilium"},
		{name: "cilium-envoy alone is not the agent", list: []appsv1.DaemonSet{ds("kube-system", "cilium-envoy", labels("k8s-app", "cilium-envoy"))},
			want: DetectedNone},
		{name: "talos flannel", list: append(background(), ds("kube-system", "kube-flannel", labels("k8s-app", "flannel"), hostPath("/etc/cni/net.d"))),
			want: DetectedFlannel, via: "kube-system/kube-flannel"},
		{name: "upstream flannel", list: []appsv1.DaemonSet{ds("kube-flannel", "kube-flannel-ds", labels("app", "flannel"))},
			want: DetectedFlannel, via: "kube-flannel/kube-flannel-ds"},
		{name: "flannel by label only", list: []appsv1.DaemonSet{ds("net", "overlay", labels("app", "flannel", "tier", "node"))},
			want: DetectedFlannel, via: "net/overlay"},
		{name: "calico manifest", list: append(background(), ds("kube-system", "calico-node", labels("k8s-app", "calico-node"), hostPath("/opt/cni/bin"))),
			want: DetectedCalico, via: "kube-system/calico-node"},
		{name: "calico operator", list: []appsv1.DaemonSet{ds("calico-system", "calico-node")}, want: DetectedCalico, via: "calico-system/calico-node"},
		{name: "an unnamed CNI by its host configuration directory", list: append(background(), ds("kube-system", "weave-net", hostPath("/etc/cni/net.d/"))),
			want: DetectedOther, via: "kube-system/weave-net"},
		{name: "an unnamed CNI by its binary directory", list: append(background(), ds("kube-system", "kube-router", hostPath("/opt/cni/bin"))),
			want: DetectedOther, via: "kube-system/kube-router"},
		{name: "a known CNI wins over a meta-plugin", list: []appsv1.DaemonSet{ds("kube-system", "multus", hostPath("/etc/cni/net.d")), ciliumAgent},
			want: DetectedCilium, via: "kube-system/cilium", version: "v1.20.2"},
		{name: "cilium first when two known ones run", list: []appsv1.DaemonSet{ds("kube-system", "kube-flannel"), ciliumAgent},
			want: DetectedCilium, via: "kube-system/cilium", version: "v1.20.2"},
		{name: "a DaemonSet being deleted does not count", list: []appsv1.DaemonSet{ds("kube-system", "kube-flannel", deleting), ds("kube-system", "calico-node")},
			want: DetectedCalico, via: "kube-system/calico-node"},
		{name: "only a deleted CNI", list: []appsv1.DaemonSet{ds("kube-system", "cilium", deleting)}, want: DetectedNone},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Detect(c.list)
			if got.Detected != c.want || got.Via != c.via || got.CiliumVersion != c.version {
				t.Errorf("Detect = %+v; want %s via %q, cilium version %q", got, c.want, c.via, c.version)
			}
		})
	}
}

// TestUnsupported: cilium, and unmanaged with the adoption annotation, are
// managed; every other stored preset gets a message naming it, saying that
// nothing changes, and the way out.
func TestUnsupported(t *testing.T) {
	cluster := func(preset string, annotations map[string]string) *ichorv1alpha1.TalosCluster {
		return &ichorv1alpha1.TalosCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "prod", Annotations: annotations},
			Spec:       ichorv1alpha1.TalosClusterSpec{CNI: ichorv1alpha1.CNISpec{Preset: preset}},
		}
	}

	if m := Unsupported(cluster("cilium", nil)); m != "" {
		t.Errorf("cilium is managed, got %q", m)
	}

	if m := Unsupported(cluster("unmanaged", map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"})); m != "" {
		t.Errorf("an adopted unmanaged cluster is allowed, got %q", m)
	}

	for _, c := range []struct {
		preset string
		adds   map[string]string
		want   []string
	}{
		{preset: "flannel", want: []string{`spec.cni.preset is "flannel"`, "does not manage", "changes nothing", "immutable",
			"ichor.maesh.dev/allow-delete", "spec.cni.preset: cilium"}},
		{preset: "", want: []string{`spec.cni.preset is ""`, "changes nothing"}},
		{preset: "unmanaged", want: []string{`spec.cni.preset is "unmanaged"`, "no ichor.maesh.dev/adopted annotation",
			"changes nothing", "set the annotation ichor.maesh.dev/adopted back", "spec.cni.preset: cilium"}},
		{preset: "unmanaged", adds: map[string]string{ichorv1alpha1.AdoptedAnnotation: ""}, want: []string{"no ichor.maesh.dev/adopted annotation"}},
	} {
		m := Unsupported(cluster(c.preset, c.adds))
		for _, w := range c.want {
			if !strings.Contains(m, w) {
				t.Errorf("Unsupported(%q) = %q; want it to say %q", c.preset, m, w)
			}
		}
	}
}

func TestDescribe(t *testing.T) {
	c := &ichorv1alpha1.TalosCluster{}
	c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetCilium

	for _, tc := range []struct{ detected, version, want string }{
		{"", "", "cilium (detected: not read yet)"},
		{DetectedCilium, "v1.20.2", "cilium (detected: cilium v1.20.2)"},
		{DetectedCilium, "", "cilium (detected: cilium)"},
		{DetectedFlannel, "v1.20.2", "cilium (detected: flannel)"},
	} {
		c.Status.CNI.Detected, c.Status.CNI.CiliumVersion = tc.detected, tc.version
		if got := Describe(c); got != tc.want {
			t.Errorf("Describe(%q, %q) = %q, want %q", tc.detected, tc.version, got, tc.want)
		}
	}
}

func TestCheckKubeProxy(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		config map[string]string
		proxy  bool
		want   []string
	}{
		{ichorv1alpha1.KubeProxyReplaced, map[string]string{KubeProxyReplacementKey: "true"}, false, nil},
		{ichorv1alpha1.KubeProxyEnabled, map[string]string{KubeProxyReplacementKey: "false"}, true, nil},
		{ichorv1alpha1.KubeProxyEnabled, map[string]string{KubeProxyReplacementKey: "false"}, false, nil},
		{ichorv1alpha1.KubeProxyReplaced, map[string]string{KubeProxyReplacementKey: "false"}, false, []string{`kube-proxy-replacement "false"`, `wants "true"`}},
		{ichorv1alpha1.KubeProxyEnabled, map[string]string{KubeProxyReplacementKey: "true"}, true, []string{`kube-proxy-replacement "true"`, `wants "false"`}},
		{ichorv1alpha1.KubeProxyReplaced, map[string]string{KubeProxyReplacementKey: "true"}, true, []string{"DaemonSet kube-system/kube-proxy still runs", "two proxies"}},
		{ichorv1alpha1.KubeProxyReplaced, map[string]string{}, true, []string{"has no kube-proxy-replacement", "two proxies"}},
	} {
		got := CheckKubeProxy(tc.mode, tc.config, tc.proxy)
		if (got == "") != (len(tc.want) == 0) {
			t.Errorf("CheckKubeProxy(%s, %v, %t) = %q; want %v", tc.mode, tc.config, tc.proxy, got, tc.want)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("CheckKubeProxy(%s, %v, %t) = %q; does not say %q", tc.mode, tc.config, tc.proxy, got, w)
			}
		}
	}
}
