package guard

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// TestCheckKubeProxySwitch: a switch needs Ichor's Cilium release, a
// recorded Talos side, the other mode, no switch pending and no other
// unfinished Cilium operation.
func TestCheckKubeProxySwitch(t *testing.T) {
	owned := cluster(kubeProxyRecorded) // kube-proxy enabled

	expect(t, CheckKubeProxySwitch(owned, CNIFacts{}, ichorv1alpha1.KubeProxyReplaced), nil)
	expect(t, CheckKubeProxySwitch(owned, CNIFacts{}, ichorv1alpha1.KubeProxyEnabled),
		map[string][]string{fieldKubeProxy: {"already has kube-proxy enabled", "the other mode"}})
	unset := cluster(kubeProxyRecorded, func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.KubeProxy = "" })
	expect(t, CheckKubeProxySwitch(unset, CNIFacts{}, ichorv1alpha1.KubeProxyEnabled),
		map[string][]string{fieldKubeProxy: {"already has kube-proxy enabled"}})
	expect(t, CheckKubeProxySwitch(owned, CNIFacts{}, "off"),
		map[string][]string{fieldKubeProxy: {`"off" is not one Ichor knows`, "enabled (Talos runs kube-proxy) or replaced"}})
	expect(t, CheckKubeProxySwitch(cluster(handedOver), CNIFacts{}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldKubeProxy: {"status.cni.kubeProxy is empty"}})
	// Calling a pending switch off (back to what Talos's side runs) is
	// always possible, even while its operation runs.
	cancel := cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced
		c.Status.CNI.KubeProxy = ichorv1alpha1.KubeProxyEnabled
	})
	expect(t, CheckKubeProxySwitch(cancel, CNIFacts{Unfinished: []string{"kube-proxy-x"}}, ichorv1alpha1.KubeProxyEnabled), nil)
	notOwned := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Status.CNI.KubeProxy = c.Spec.CNI.KubeProxy })
	expect(t, CheckKubeProxySwitch(notOwned, CNIFacts{}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldKubeProxy: {"not Ichor's Helm release yet", "CNIHandover"}})
	expect(t, CheckKubeProxySwitch(owned, CNIFacts{Unfinished: []string{"cni-a"}}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldKubeProxy: {"operation cni-a", "ichor operation get cni-a --watch"}})
	unmanaged := cluster(kubeProxyRecorded, func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetUnmanaged })
	expect(t, CheckKubeProxySwitch(unmanaged, CNIFacts{}, ichorv1alpha1.KubeProxyReplaced),
		map[string][]string{fieldKubeProxy: {"unmanaged CNI"}})
}

// TestKubeProxyOperation: the operation carries out the pending switch of
// spec.cni.kubeProxy, nothing else.
func TestKubeProxyOperation(t *testing.T) {
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kp"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationKubeProxy,
			KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: ichorv1alpha1.KubeProxyReplaced}},
	}
	pending := cluster(kubeProxyRecorded, func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyReplaced })
	pending.Status.CNI.KubeProxy = ichorv1alpha1.KubeProxyEnabled
	expect(t, ValidateOperation(op, OperationFacts{Cluster: pending}), nil)
	expect(t, ValidateOperation(op, OperationFacts{Cluster: pending, UnfinishedCNI: []string{"cni-b"}}),
		map[string][]string{fieldSpecType: {"operation cni-b"}})
	expect(t, ValidateOperation(op, OperationFacts{Cluster: cluster(kubeProxyRecorded)}),
		map[string][]string{fieldOperationKubeProxyMode: {"asks for enabled and its Talos side runs enabled", "ichor cni kube-proxy MODE --cluster prod"}})
}

// TestKubeProxySteps: to replaced Cilium goes first and Talos's objects are
// deleted last; to enabled Talos goes first.
func TestKubeProxySteps(t *testing.T) {
	if !KubeProxyStepDone(ichorv1alpha1.KubeProxyReplaced, KubeProxyStepTalos, KubeProxyStepVerify) ||
		KubeProxyStepDone(ichorv1alpha1.KubeProxyReplaced, KubeProxyStepVerify, KubeProxyStepTalos) {
		t.Fatal("to replaced: Cilium is verified before Talos's side moves")
	}

	if !KubeProxyStepDone(ichorv1alpha1.KubeProxyEnabled, KubeProxyStepCilium, KubeProxyStepTalos) ||
		KubeProxyStepDone(ichorv1alpha1.KubeProxyEnabled, KubeProxyStepTalos, KubeProxyStepCilium) {
		t.Fatal("to enabled: Talos's side moves before Cilium's")
	}

	if KubeProxyStepDone(ichorv1alpha1.KubeProxyEnabled, KubeProxyStepCleanup, KubeProxyStepCheck) {
		t.Fatal("to enabled there is no cleanup step")
	}
}

// TestGoverningKubeProxy: the newest operation of the cluster for the target.
func TestGoverningKubeProxy(t *testing.T) {
	c := cluster()
	mk := func(name, cluster, mode string, sec int64) ichorv1alpha1.TalosOperation {
		return ichorv1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(sec, 0)},
			Spec: ichorv1alpha1.TalosOperationSpec{Type: ichorv1alpha1.OperationKubeProxy, ClusterName: cluster,
				KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: mode}}}
	}
	ops := []ichorv1alpha1.TalosOperation{
		mk("a", "prod", ichorv1alpha1.KubeProxyReplaced, 1), mk("b", "prod", ichorv1alpha1.KubeProxyReplaced, 3),
		mk("c", "prod", ichorv1alpha1.KubeProxyEnabled, 5), mk("d", "other", ichorv1alpha1.KubeProxyReplaced, 9),
	}
	if g := GoverningKubeProxy(c, ichorv1alpha1.KubeProxyReplaced, ops); g == nil || g.Name != "b" {
		t.Fatalf("got %v, want b", g)
	}
	if g := GoverningKubeProxy(c, "x", ops); g != nil {
		t.Fatalf("got %s", g.Name)
	}
}
