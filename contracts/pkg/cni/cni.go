// Package cni holds the CNI decisions the controller, the webhook, the CLI
// and ichor-ui share (architecture, "CNI"): which stored presets Ichor acts
// on (Unsupported, behind the CNIUnsupported condition), and which CNI runs
// in a cluster, read from its DaemonSets (Detect, behind status.cni.detected).
// Both are pure: the caller reads the objects.
package cni

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The values of status.cni.detected.
const (
	DetectedCilium  = "cilium"
	DetectedFlannel = "flannel"
	DetectedCalico  = "calico"
	DetectedOther   = "other"
	DetectedNone    = "none"
)

// Unsupported says why Ichor must leave cluster c alone because of its CNI
// preset, or "" when the preset is one it manages: `cilium`, or `unmanaged`
// on a cluster that carries the adoption annotation (the only place the
// architecture allows that preset). The CRD's enum and the webhook keep other
// presets out of new writes; a cluster stored before them (another release,
// an object restored from a backup, a write while the webhook was away) is
// refused here, not guessed at. The message names the preset found, says
// that Ichor changes nothing, and the ways out that exist: the preset is
// immutable, so the way to a managed cluster is a new TalosCluster.
func Unsupported(c *ichorv1alpha1.TalosCluster) string {
	p := c.Spec.CNI.Preset

	switch {
	case p == ichorv1alpha1.CNIPresetCilium:
		return ""
	case p == ichorv1alpha1.CNIPresetUnmanaged && c.Annotations[ichorv1alpha1.AdoptedAnnotation] != "":
		return ""
	case p == ichorv1alpha1.CNIPresetUnmanaged:
		return fmt.Sprintf("spec.cni.preset is %q but TalosCluster %s carries no %s annotation: the unmanaged preset exists only for adopted clusters, "+
			"so Ichor changes nothing on this cluster (no render, no apply, no operation). If Ichor adopted it, set the annotation %s back; "+
			"otherwise delete this TalosCluster (annotate it %s: \"true\" first; its machines are left running as they are) and create one with spec.cni.preset: %s",
			p, c.Name, ichorv1alpha1.AdoptedAnnotation, ichorv1alpha1.AdoptedAnnotation, ichorv1alpha1.AllowDeleteAnnotation, ichorv1alpha1.CNIPresetCilium)
	default:
		return fmt.Sprintf("spec.cni.preset is %q, a CNI preset Ichor does not manage (it manages %q, and %q for an adopted cluster), "+
			"so Ichor changes nothing on this cluster (no render, no apply, no operation). The preset is immutable: delete this TalosCluster "+
			"(annotate it %s: \"true\" first; its machines are left running as they are) and create one with spec.cni.preset: %s",
			p, ichorv1alpha1.CNIPresetCilium, ichorv1alpha1.CNIPresetUnmanaged, ichorv1alpha1.AllowDeleteAnnotation, ichorv1alpha1.CNIPresetCilium)
	}
}

// Detection is what Detect found.
type Detection struct {
	// Detected is one of the Detected* values.
	Detected string
	// Via names the DaemonSet the answer comes from (namespace/name), "" for none.
	Via string
	// CiliumVersion is the version of the Cilium agent's image tag ("v1.20.2")
	// when Detected is cilium and the tag is a version; "" otherwise.
	CiliumVersion string
}

// cniConfDir and cniBinDir are where a CNI plugin installs its configuration
// and binaries on the host (the CNI specification's conventional paths, which
// the kubelet and containerd read on Talos too). A DaemonSet that mounts
// either is a CNI's node agent (or a meta-plugin such as Multus).
const (
	cniConfDir = "/etc/cni/net.d"
	cniBinDir  = "/opt/cni/bin"
)

// k8sApp is the label the CNIs' manifests name their agents with.
const k8sApp = "k8s-app"

// known are the CNIs Detect names, in the order it prefers them when a
// cluster runs more than one (Cilium first: it is the one Ichor manages).
var known = []struct {
	name   string
	match  func(ds *appsv1.DaemonSet) bool
	labels map[string]string
}{
	// Cilium's agent DaemonSet is `cilium` with k8s-app=cilium (the chart's
	// install/kubernetes/cilium/templates/cilium-agent/daemonset.yaml); its
	// other DaemonSets (cilium-envoy, cilium-node-init) carry other k8s-app values.
	{name: DetectedCilium, match: named("cilium"), labels: map[string]string{k8sApp: "cilium"}},
	// Calico's node agent is `calico-node` (k8s-app=calico-node), in
	// kube-system (manifest install) or calico-system (the Tigera operator).
	{name: DetectedCalico, match: named("calico-node"), labels: map[string]string{k8sApp: "calico-node"}},
	// Flannel is Talos's own `kube-flannel` (k8s-app=flannel) or upstream's
	// `kube-flannel-ds` (app=flannel) in the kube-flannel namespace.
	{name: DetectedFlannel, match: named("kube-flannel", "kube-flannel-ds"), labels: map[string]string{k8sApp: "flannel"}},
	{name: DetectedFlannel, match: named(), labels: map[string]string{"app": "flannel"}},
}

func named(names ...string) func(*appsv1.DaemonSet) bool {
	return func(ds *appsv1.DaemonSet) bool { return slices.Contains(names, ds.Name) }
}

// labelled reports whether the DaemonSet or its pod template carries every label of want.
func labelled(ds *appsv1.DaemonSet, want map[string]string) bool {
	has := func(l map[string]string) bool {
		for k, v := range want {
			if l[k] != v {
				return false
			}
		}

		return len(want) > 0
	}

	return has(ds.Labels) || has(ds.Spec.Template.Labels)
}

// Detect says which CNI runs, from the cluster's DaemonSets (of every
// namespace): a known one by its well-known name or label, `other` for a
// DaemonSet that mounts the host's CNI configuration or binary directory
// but is none of them, `none` when there is neither. A cluster with a known
// CNI and another CNI-like DaemonSet (a meta-plugin, a CNI being replaced)
// is reported as the known one; two known ones as the first of Cilium,
// Calico, Flannel. DaemonSets being deleted do not count.
func Detect(daemonSets []appsv1.DaemonSet) Detection {
	var other string

	for _, k := range known {
		for i := range daemonSets {
			ds := &daemonSets[i]
			if ds.DeletionTimestamp != nil {
				continue
			}

			if k.match(ds) || labelled(ds, k.labels) {
				d := Detection{Detected: k.name, Via: ds.Namespace + "/" + ds.Name}
				if k.name == DetectedCilium {
					d.CiliumVersion = agentVersion(ds)
				}

				return d
			}
		}
	}

	for i := range daemonSets {
		ds := &daemonSets[i]
		if ds.DeletionTimestamp == nil && other == "" && mountsCNIDirs(&ds.Spec.Template.Spec) {
			other = ds.Namespace + "/" + ds.Name
		}
	}

	if other != "" {
		return Detection{Detected: DetectedOther, Via: other}
	}

	return Detection{Detected: DetectedNone}
}

// mountsCNIDirs reports whether a pod mounts the host's CNI configuration
// or binary directory.
func mountsCNIDirs(pod *corev1.PodSpec) bool {
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			continue
		}

		p := path.Clean(v.HostPath.Path)
		if p == cniConfDir || p == cniBinDir || strings.HasPrefix(p, cniConfDir+"/") {
			return true
		}
	}

	return false
}

// agentVersion is the version in the tag of the Cilium agent container's
// image (quay.io/cilium/cilium:v1.20.2@sha256:…), "" when there is no tag
// or it is not a version. The chart and its agent image share the version.
func agentVersion(ds *appsv1.DaemonSet) string {
	containers := ds.Spec.Template.Spec.Containers
	for i := range containers {
		c := &containers[i]
		if c.Name != "cilium-agent" && len(containers) > 1 {
			continue
		}

		ref, _, _ := strings.Cut(c.Image, "@")

		slash := strings.LastIndex(ref, "/")

		colon := strings.LastIndex(ref, ":")
		if colon <= slash {
			return ""
		}

		tag := ref[colon+1:]
		if _, err := semver.ParseTolerant(tag); err != nil {
			return ""
		}

		return tag
	}

	return ""
}

// Describe is the cluster's CNI for people, as `ichor cluster get` and the
// console's Cluster details show it: the preset and what the controller last
// read from the cluster (status.cni.detected, with the Cilium agent's
// version), e.g. "cilium (detected: cilium v1.20.2)".
func Describe(c *ichorv1alpha1.TalosCluster) string {
	d := c.Status.CNI.Detected
	switch {
	case d == "":
		d = "not read yet"
	case d == DetectedCilium && c.Status.CNI.CiliumVersion != "":
		d += " " + c.Status.CNI.CiliumVersion
	}

	return c.Spec.CNI.Preset + " (detected: " + d + ")"
}

// CiliumConfigMap is the ConfigMap in kube-system that holds Cilium's live
// configuration, and KubeProxyReplacementKey its key for kube-proxy
// replacement ("true" or "false"; the chart's cilium-configmap.yaml).
const (
	CiliumConfigMap         = "cilium-config"
	KubeProxyReplacementKey = "kube-proxy-replacement"
	// KubeProxyDaemonSet is the DaemonSet Talos runs kube-proxy as, in kube-system.
	KubeProxyDaemonSet = "kube-proxy"
)

// CheckKubeProxy compares kube-proxy's two owners with mode
// (spec.cni.kubeProxy): Cilium's live kube-proxy-replacement must say what
// mode says, and with mode replaced no kube-proxy DaemonSet may run (two
// proxies would program the same Services). It returns "" when they agree,
// else what disagrees. A kube-proxy missing while mode is enabled is not
// judged here: Talos runs it, and its absence shows in the Services that do
// not answer, not in Cilium's config.
func CheckKubeProxy(mode string, ciliumConfig map[string]string, kubeProxyRuns bool) string {
	want := "false"
	if mode == ichorv1alpha1.KubeProxyReplaced {
		want = "true"
	}

	var out []string

	switch got, ok := ciliumConfig[KubeProxyReplacementKey]; {
	case !ok:
		out = append(out, fmt.Sprintf("Cilium's config (ConfigMap kube-system/%s) has no %s; spec.cni.kubeProxy %s wants %q", CiliumConfigMap, KubeProxyReplacementKey, mode, want))
	case got != want:
		out = append(out, fmt.Sprintf("Cilium runs with %s %q (ConfigMap kube-system/%s) while spec.cni.kubeProxy %s wants %q",
			KubeProxyReplacementKey, got, CiliumConfigMap, mode, want))
	}

	if mode == ichorv1alpha1.KubeProxyReplaced && kubeProxyRuns {
		out = append(out, fmt.Sprintf("DaemonSet kube-system/%s still runs while Cilium replaces kube-proxy: two proxies program the same Services", KubeProxyDaemonSet))
	}

	return strings.Join(out, "; ")
}
