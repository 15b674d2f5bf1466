package guard

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Rule: a Kubernetes upgrade goes one minor up at most from what the machines
// run (not from the spec, which is ahead during an upgrade), to a version the
// cluster's Talos supports, and not while another kubernetes operation runs.
func TestCheckKubernetesUpgrade(t *testing.T) {
	running := func(spec, status string) *ichorv1alpha1.TalosCluster {
		return cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.KubernetesVersion, c.Status.KubernetesUpgrade.Version = spec, status
		})
	}

	expect(t, CheckKubernetesUpgrade(running("1.36.3", "1.36.3"), nil, "1.37.2"), nil)
	expect(t, CheckKubernetesUpgrade(running("1.36.3", "1.36.3"), nil, "v1.36.3"),
		map[string][]string{"spec.kubernetesVersion": {"already runs Kubernetes v1.36.3", "ichor upgrade kubernetes --list"}})
	expect(t, CheckKubernetesUpgrade(running("1.35.3", "1.35.3"), nil, "1.37.2"),
		map[string][]string{"spec.kubernetesVersion": {"skips a minor"}})
	expect(t, CheckKubernetesUpgrade(running("1.36.3", ""), nil, "1.35.0"),
		map[string][]string{"spec.kubernetesVersion": {"downgrade"}})

	// The spec at 1.37.2 while the machines still run 1.36.3: 1.38 skips a
	// minor from what runs (and Talos 1.14 does not support it).
	rs := CheckKubernetesUpgrade(running("1.37.2", "1.36.3"), nil, "1.38.0")
	if len(rs) != 2 || !strings.Contains(rs[0].Rule, "1.36.3 to 1.38.0 skips a minor") || !rs[1].Overridable {
		t.Fatalf("refusals %+v", rs)
	}

	op := ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kubernetes-1-37-2-x"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationKubernetes,
			Kubernetes: &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.2"}},
		Status: ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationPaused},
	}
	expect(t, CheckKubernetesUpgrade(running("1.36.3", "1.36.3"), []ichorv1alpha1.TalosOperation{op}, "1.37.2"),
		map[string][]string{"spec.kubernetesVersion": {"kubernetes-1-37-2-x", "has not finished", "ichor operation resume kubernetes-1-37-2-x"}})

	op.Status.Phase = ichorv1alpha1.OperationSucceeded
	expect(t, CheckKubernetesUpgrade(running("1.36.3", "1.36.3"), []ichorv1alpha1.TalosOperation{op}, "1.37.2"), nil)

	// The cluster webhook's skew rule counts from what runs too.
	old := running("1.37.2", "1.36.3")
	updated := old.DeepCopy()
	updated.Spec.KubernetesVersion = "1.38.0"
	rs = ValidateCluster(old, updated, ClusterFacts{ApprovedControlPlanes: 3, ApprovedWorkers: 1})

	if len(rs) == 0 || !strings.Contains(rs[0].Rule, "1.36.3 to 1.38.0") {
		t.Fatalf("cluster update refusals %+v", rs)
	}
}

// Rule: a kubernetes operation covers every machine, and setting its
// override annotation needs the override verb on the cluster.
func TestKubernetesOperationRules(t *testing.T) {
	c := cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.KubernetesVersion, c.Status.KubernetesUpgrade.Version = "1.37.2", "1.36.3"
	})
	k := op(ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.2"}
		o.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	})
	expect(t, CheckOperation(k, OperationFacts{Cluster: c}), map[string][]string{"spec.machineSelector": {"every machine", ichorv1alpha1.HoldUpgradeAnnotation}})

	if rs := OperationAnnotationRequirements(nil, k); len(rs) != 0 {
		t.Fatalf("no annotation, requirements %+v", rs)
	}

	with := k.DeepCopy()
	with.Annotations = map[string]string{ichorv1alpha1.OverrideRemovedAPIsAnnotation: "1"}

	rs := OperationAnnotationRequirements(k, with)
	if len(rs) != 1 || rs[0].Permission != OverrideOn("ns", "prod") || !strings.Contains(rs[0].Field, ichorv1alpha1.OverrideRemovedAPIsAnnotation) {
		t.Fatalf("requirements %+v", rs)
	}

	if rs := OperationAnnotationRequirements(with, with.DeepCopy()); len(rs) != 0 {
		t.Fatalf("an unchanged annotation needs nothing: %+v", rs)
	}

	if key, _ := OverrideAnnotationOf(k); key != ichorv1alpha1.OverrideRemovedAPIsAnnotation {
		t.Errorf("the override of a kubernetes operation is %s", key)
	}
}

// Rule: setting the drain capacity override on any operation needs the
// override verb on the cluster; a resume with override of an operation that
// is not a kubernetes one sets that annotation.
func TestDrainCapacityOverrideNeedsOverride(t *testing.T) {
	node := op(ichorv1alpha1.OperationNode, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "cp-2", Action: ichorv1alpha1.NodeActionReboot}
	})

	if key, what := OverrideAnnotationOf(node); key != ichorv1alpha1.OverrideDrainCapacityAnnotation || !strings.Contains(what, "drain capacity") {
		t.Fatalf("the override of a node operation is %s (%s)", key, what)
	}

	with := node.DeepCopy()
	with.Annotations = map[string]string{ichorv1alpha1.OverrideDrainCapacityAnnotation: "t1"}

	rs := OperationAnnotationRequirements(node, with)
	if len(rs) != 1 || rs[0].Permission != OverrideOn("ns", "prod") || !strings.Contains(rs[0].Field, ichorv1alpha1.OverrideDrainCapacityAnnotation) ||
		!strings.Contains(rs[0].Action, "do not fit") {
		t.Fatalf("requirements %+v", rs)
	}

	changed := with.DeepCopy()
	changed.Annotations[ichorv1alpha1.OverrideDrainCapacityAnnotation] = "t2"

	if rs := OperationAnnotationRequirements(with, changed); len(rs) != 1 {
		t.Fatalf("a new token needs the verb again: %+v", rs)
	}
}
