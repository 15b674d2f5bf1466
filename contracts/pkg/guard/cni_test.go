package guard

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func handedOver(c *ichorv1alpha1.TalosCluster) {
	c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.CNIHandoverCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.CNIHandoverDoneReason,
	})
}

// TestCheckCNIUpgrade: the Cilium chart upgrade moves Ichor's own release to
// an embedded chart, one minor up, never down, on a Kubernetes the chart
// supports, one at a time.
func TestCheckCNIUpgrade(t *testing.T) {
	owned := cluster(handedOver)
	running := CNIFacts{Running: "v1.19.3"}

	expect(t, CheckCNIUpgrade(owned, running, "v1.20.2"), nil)
	expect(t, CheckCNIUpgrade(owned, running, "1.20.2"), nil)
	expect(t, CheckCNIUpgrade(owned, CNIFacts{Running: "v1.20.2"}, "v1.20.2"), map[string][]string{fieldOperationCNIVersion: {"already runs v1.20.2", "no newer chart"}})
	expect(t, CheckCNIUpgrade(owned, CNIFacts{Running: "v1.20.2"}, "v1.19.3"), map[string][]string{fieldOperationCNIVersion: {"older than the running", "never moves Cilium down"}})
	expect(t, CheckCNIUpgrade(owned, CNIFacts{Running: "v1.18.6"}, "v1.20.2"), map[string][]string{fieldOperationCNIVersion: {"skips a minor", "`ichor cni upgrade v1.19.3`"}})
	expect(t, CheckCNIUpgrade(owned, running, "v1.21.0"), map[string][]string{fieldOperationCNIVersion: {"not a chart this Ichor embeds", "v1.19.3, v1.20.2"}})
	expect(t, CheckCNIUpgrade(owned, CNIFacts{}, "v1.20.2"), map[string][]string{fieldOperationCNIVersion: {"not known yet"}})
	expect(t, CheckCNIUpgrade(cluster(), running, "v1.20.2"), map[string][]string{fieldSpecType: {"not Ichor's Helm release yet", "CNIHandover"}})
	expect(t, CheckCNIUpgrade(owned, CNIFacts{Running: "v1.19.3", Unfinished: []string{"cni-a"}}, "v1.20.2"),
		map[string][]string{fieldSpecType: {"operation cni-a", "has not finished"}})
	// Cilium 1.20 is tested from Kubernetes 1.33: an older one is refused, overridable.
	old := cluster(handedOver, func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.32.3" })
	r := CheckCNIUpgrade(old, running, "v1.20.2")
	expect(t, r, map[string][]string{fieldOperationCNIVersion: {"incompatible pair", "override"}})
	if !r[0].Overridable {
		t.Fatalf("an incompatible pair is not overridable: %+v", r[0])
	}
	unmanaged := cluster(handedOver, func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Preset = ichorv1alpha1.CNIPresetUnmanaged })
	expect(t, CheckCNIUpgrade(unmanaged, running, "v1.20.2"), map[string][]string{fieldSpecType: {"unmanaged CNI"}})

	// At admission the running version is status.cni.ciliumVersion.
	o := op(ichorv1alpha1.OperationCNI, func(o *ichorv1alpha1.TalosOperation) { o.Spec.CNI = &ichorv1alpha1.CNIUpgrade{Version: "v1.20.2"} })
	owned.Status.CNI.CiliumVersion = "v1.19.3"
	expect(t, ValidateOperation(o, OperationFacts{Cluster: owned}), nil)
	expect(t, ValidateOperation(o, OperationFacts{Cluster: owned, UnfinishedCNI: []string{"cni-b"}}), map[string][]string{fieldSpecType: {"cni-b"}})
}

func TestCNIUpgradeTarget(t *testing.T) {
	for running, want := range map[string]string{"v1.19.3": "v1.20.2", "1.19.0": "v1.20.2", "v1.20.2": "", "v1.18.6": "v1.19.3", "v1.20.0": "v1.20.2", "": "", "x": ""} {
		if got := CNIUpgradeTarget(running); got != want {
			t.Errorf("CNIUpgradeTarget(%q) = %q, want %q", running, got, want)
		}
	}
}

func TestUnfinishedCNI(t *testing.T) {
	mk := func(name, typ, cluster, phase string) ichorv1alpha1.TalosOperation {
		o := op(typ)
		o.Name, o.Spec.ClusterName, o.Status.Phase = name, cluster, phase
		return *o
	}
	ops := []ichorv1alpha1.TalosOperation{
		mk("a", ichorv1alpha1.OperationCNI, "prod", ichorv1alpha1.OperationRunning),
		mk("b", ichorv1alpha1.OperationCNI, "prod", ichorv1alpha1.OperationSucceeded),
		mk("c", ichorv1alpha1.OperationKubeProxy, "prod", ichorv1alpha1.OperationPaused),
		mk("d", ichorv1alpha1.OperationCNI, "other", ""),
		mk("e", ichorv1alpha1.OperationTalos, "prod", ""),
		mk("self", ichorv1alpha1.OperationCNI, "prod", ""),
	}
	if got := UnfinishedCNI("prod", "self", ops); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("UnfinishedCNI = %v, want [a c]", got)
	}
}

// TestBootstrapChartAnnotation: init's record of the bootstrap chart names an
// embedded chart and never changes.
func TestBootstrapChartAnnotation(t *testing.T) {
	const key = ichorv1alpha1.CNIBootstrapChartAnnotation
	field := "metadata.annotations[" + key + "]"
	with := func(v string) *ichorv1alpha1.TalosCluster {
		return cluster(func(c *ichorv1alpha1.TalosCluster) { c.Annotations = map[string]string{key: v} })
	}

	expect(t, checkCNI(nil, with("v1.19.3"), ClusterFacts{}), nil)
	expect(t, checkCNI(nil, cluster(), ClusterFacts{}), nil)
	expect(t, checkCNI(nil, with("v1.18.0"), ClusterFacts{}), map[string][]string{field: {"not a Cilium chart this Ichor embeds", "v1.19.3, v1.20.2"}})
	expect(t, checkCNI(with("v1.19.3"), with("v1.19.3"), ClusterFacts{}), nil)
	expect(t, checkCNI(with("v1.19.3"), with("v1.20.2"), ClusterFacts{}), map[string][]string{field: {"cannot change", "ichor cni upgrade"}})
	expect(t, checkCNI(cluster(), with("v1.20.2"), ClusterFacts{}), map[string][]string{field: {"cannot change"}})
	expect(t, checkCNI(with("v1.19.3"), cluster(), ClusterFacts{}), map[string][]string{field: {"cannot change"}})
}
