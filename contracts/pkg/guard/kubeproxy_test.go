package guard

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// TestCheckKubeProxySwitch: a switch needs Ichor's Cilium release, the other
// mode, and no other unfinished Cilium operation; the operation's admission
// says the same.
func TestCheckKubeProxySwitch(t *testing.T) {
	owned := cluster(handedOver) // kube-proxy enabled

	expect(t, CheckKubeProxySwitch(owned, CNIFacts{}, ichorv1alpha1.KubeProxyReplaced), nil)
	expect(t, CheckKubeProxySwitch(owned, CNIFacts{}, ichorv1alpha1.KubeProxyEnabled),
		map[string][]string{fieldOperationKubeProxyMode: {"already has kube-proxy enabled", "the other mode"}})
	unset := cluster(handedOver, func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.KubeProxy = "" })
	expect(t, CheckKubeProxySwitch(unset, CNIFacts{}, ichorv1alpha1.KubeProxyEnabled),
		map[string][]string{fieldOperationKubeProxyMode: {"already has kube-proxy enabled"}})
	expect(t, CheckKubeProxySwitch(owned, CNIFacts{}, "off"),
		map[string][]string{fieldOperationKubeProxyMode: {`"off" is not one Ichor knows`, "enabled (Talos runs kube-proxy) or replaced"}})
	expect(t, CheckKubeProxySwitch(cluster(), CNIFacts{}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldSpecType: {"not Ichor's Helm release yet", "CNIHandover"}})
	expect(t, CheckKubeProxySwitch(owned, CNIFacts{Unfinished: []string{"cni-a"}}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldSpecType: {"operation cni-a", "ichor operation get cni-a --watch"}})
	unmanaged := cluster(handedOver, func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetUnmanaged })
	expect(t, CheckKubeProxySwitch(unmanaged, CNIFacts{}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldSpecType: {"unmanaged CNI"}})

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kp"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationKubeProxy,
			KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: ichorv1alpha1.KubeProxyReplaced}},
	}
	expect(t, ValidateOperation(op, OperationFacts{Cluster: owned}), nil)
	expect(t, ValidateOperation(op, OperationFacts{Cluster: owned, UnfinishedCNI: []string{"cni-b"}}),
		map[string][]string{fieldSpecType: {"operation cni-b"}})
}

// TestUnfinishedKubeProxy: only the cluster's kube-proxy operations that have
// not ended, with their target and step.
func TestUnfinishedKubeProxy(t *testing.T) {
	mk := func(name, typ, cluster, phase, step string) ichorv1alpha1.TalosOperation {
		o := ichorv1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   ichorv1alpha1.TalosOperationSpec{Type: typ, ClusterName: cluster},
			Status: ichorv1alpha1.TalosOperationStatus{Phase: phase, Step: step}}
		if typ == ichorv1alpha1.OperationKubeProxy {
			o.Spec.KubeProxy = &ichorv1alpha1.KubeProxySwitch{Mode: ichorv1alpha1.KubeProxyReplaced}
		}
		return o
	}
	got := UnfinishedKubeProxy("prod", []ichorv1alpha1.TalosOperation{
		mk("a", ichorv1alpha1.OperationKubeProxy, "prod", ichorv1alpha1.OperationRunning, KubeProxyStepTalos),
		mk("b", ichorv1alpha1.OperationKubeProxy, "prod", ichorv1alpha1.OperationSucceeded, KubeProxyStepTalos),
		mk("c", ichorv1alpha1.OperationKubeProxy, "other", ichorv1alpha1.OperationRunning, ""),
		mk("d", ichorv1alpha1.OperationCNI, "prod", ichorv1alpha1.OperationRunning, ""),
		mk("e", ichorv1alpha1.OperationKubeProxy, "prod", ichorv1alpha1.OperationPaused, KubeProxyStepCilium),
	})
	want := []KubeProxySwitching{{Name: "a", Mode: ichorv1alpha1.KubeProxyReplaced, Step: KubeProxyStepTalos},
		{Name: "e", Mode: ichorv1alpha1.KubeProxyReplaced, Step: KubeProxyStepCilium}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
