package guard

import (
	"slices"
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// TestKubeProxySwitchPlan: the switch never leaves Services without a proxy.
// To replaced, Cilium's replacement is on and verified before Talos's
// kube-proxy goes off and its objects are deleted; to enabled, Talos's
// kube-proxy runs before Cilium's replacement goes off. An unknown mode has
// no plan.
func TestKubeProxySwitchPlan(t *testing.T) {
	steps := func(p []KubeProxyPlanStep) []string {
		out := make([]string, 0, len(p))
		for _, s := range p {
			out = append(out, s.Step)
		}
		return out
	}
	toReplaced := KubeProxySwitchPlan("prod", ichorv1alpha1.KubeProxyReplaced)
	if got := steps(toReplaced); !slices.Equal(got, []string{KubeProxyStepCheck, KubeProxyStepCilium, KubeProxyStepVerify, KubeProxyStepTalos, KubeProxyStepCleanup}) {
		t.Fatalf("to replaced: %v", got)
	}
	if !strings.Contains(toReplaced[1].Action, "kubeProxyReplacement: true") || !strings.Contains(toReplaced[3].Action, "turns kube-proxy off") ||
		!strings.Contains(toReplaced[4].Action, "DaemonSet, ServiceAccount, ClusterRoleBinding and ConfigMap") || !strings.Contains(toReplaced[0].Action, "cluster prod's lock") {
		t.Fatalf("to replaced: %+v", toReplaced)
	}
	toEnabled := KubeProxySwitchPlan("prod", ichorv1alpha1.KubeProxyEnabled)
	if got := steps(toEnabled); !slices.Equal(got, []string{KubeProxyStepCheck, KubeProxyStepTalos, KubeProxyStepCilium, KubeProxyStepVerify}) {
		t.Fatalf("to enabled: %v", got)
	}
	if !strings.Contains(toEnabled[1].Action, "turns kube-proxy on") || !strings.Contains(toEnabled[1].Action, "runs on every node") ||
		!strings.Contains(toEnabled[2].Action, "kubeProxyReplacement: false") {
		t.Fatalf("to enabled: %+v", toEnabled)
	}
	if KubeProxyOtherMode(ichorv1alpha1.KubeProxyReplaced) != ichorv1alpha1.KubeProxyEnabled || KubeProxyOtherMode("") != ichorv1alpha1.KubeProxyReplaced ||
		KubeProxyOtherMode(ichorv1alpha1.KubeProxyEnabled) != ichorv1alpha1.KubeProxyReplaced {
		t.Fatal("KubeProxyOtherMode: the other of replaced is enabled, of enabled (or unset) replaced")
	}
	// The plan a person reads is the steps the controller runs.
	for _, mode := range []string{ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced} {
		if got := steps(KubeProxySwitchPlan("prod", mode)); !slices.Equal(got, KubeProxySteps(mode)) {
			t.Fatalf("to %s: the plan says %v, the controller runs %v", mode, got, KubeProxySteps(mode))
		}
	}
	if p := KubeProxySwitchPlan("prod", "strict"); p != nil {
		t.Fatalf("an unknown mode has a plan: %+v", p)
	}
}
