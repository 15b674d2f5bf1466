package cnijob

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

func agent(image string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{}
	ds.Name, ds.Namespace = "cilium", "kube-system"
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "cilium-agent", Image: image}}

	return ds
}

// TestRequestKeepsTheChartThatRuns: the hand-over adopts with the chart of
// the Cilium that runs (no pod may restart), a handed-over cluster keeps its
// release's chart, and a Cilium this build has no chart of is refused with
// what to do.
func TestRequestKeepsTheChartThatRuns(t *testing.T) {
	versions := cilium.Versions()
	if len(versions) < 2 {
		t.Fatalf("the test needs two embedded charts, has %v", versions)
	}

	older := versions[0]

	c := &ichorv1alpha1.TalosCluster{}
	c.Spec.KubernetesVersion = "1.36.1"
	c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "geneve", KubeProxy: ichorv1alpha1.KubeProxyReplaced,
		Cilium: &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"debug":{"enabled":true}}`)}}}

	req, err := Request(c, agent("quay.io/cilium/cilium:"+older+"@sha256:abc"), nil, 3)
	if err != nil {
		t.Fatal(err)
	}

	if req.Version != older || req.KubernetesVersion != "1.36.1" || req.Choices.Tunnel != "geneve" ||
		req.Choices.KubeProxy != ichorv1alpha1.KubeProxyReplaced || req.Choices.Nodes != 3 {
		t.Fatalf("request before the hand-over: %+v", req)
	}

	if dbg, _ := req.UserValues["debug"].(map[string]any); dbg["enabled"] != true {
		t.Fatalf("the user's layer is not in the request: %v", req.UserValues)
	}

	// A deployed release's chart wins over the agent's image (an upgrade
	// rolling out runs two images for a while).
	req, err = Request(c, agent("quay.io/cilium/cilium:"+older), &cilium.ReleaseState{Version: release.DefaultCiliumVersion}, 1)
	if err != nil || req.Version != release.DefaultCiliumVersion {
		t.Fatalf("request of a handed-over cluster: %+v, %v", req, err)
	}

	_, err = Request(c, agent("quay.io/cilium/cilium:v1.2.3"), nil, 1)
	if err == nil || !strings.Contains(err.Error(), "v1.2.3") || !strings.Contains(err.Error(), older) {
		t.Fatalf("a Cilium without an embedded chart: %v", err)
	}
}

// TestRequestTakesOverAnAdoptedMinor: an adopted Cilium (annotation
// adopt-takeover) whose exact version Ichor does not embed is taken over with
// the embedded chart of its minor, which the person accepted at adoption; a
// Cilium `ichor init` booted is not (nothing may restart in its hand-over),
// and an adopted minor Ichor does not take is refused.
func TestRequestTakesOverAnAdoptedMinor(t *testing.T) {
	c := &ichorv1alpha1.TalosCluster{}
	c.Annotations = map[string]string{ichorv1alpha1.CNIBootstrapAnnotation: ichorv1alpha1.CNIBootstrapTakeover}
	c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium}

	req, err := Request(c, agent("quay.io/cilium/cilium:v1.19.1"), nil, 3)
	if err != nil || req.Version != "v1.19.3" {
		t.Fatalf("an adopted v1.19.1: %+v, %v; want the embedded v1.19.3", req, err)
	}

	if _, err := Request(c, agent("quay.io/cilium/cilium:v1.17.0"), nil, 3); err == nil || !strings.Contains(err.Error(), "v1.17.0") {
		t.Fatalf("an adopted v1.17.0: %v", err)
	}

	c.Annotations[ichorv1alpha1.CNIBootstrapAnnotation] = ichorv1alpha1.CNIBootstrapInline
	if _, err := Request(c, agent("quay.io/cilium/cilium:v1.19.1"), nil, 3); err == nil {
		t.Fatal("init's bootstrapped v1.19.1 was given another chart")
	}
}
