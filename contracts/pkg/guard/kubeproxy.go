package guard

import (
	"fmt"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The kube-proxy switch (architecture, "CNI"; issue #20 item 4). Replacing
// kube-proxy splits one setting across two owners, Talos's kube-proxy
// (spec.cni.kubeProxy, rendered into the machine config) and Cilium's
// kubeProxyReplacement (the Helm release). A TalosOperation of type
// kube-proxy changes both in the only order that never leaves Services
// without a proxy: to replaced, Cilium first, verified on every node, then
// Talos's side off and its objects deleted; to enabled, Talos first, its
// kube-proxy running on every node, then Cilium's replacement off.
//
// spec.cni.kubeProxy itself is written by that operation at its Talos step,
// annotated with the operation's name (KubeProxySwitchAnnotation) for that
// one write; a direct edit is refused at admission (checkKubeProxyWrite).

const fieldOperationKubeProxyMode = "spec.kubeProxy.mode"

// Kube-proxy operation steps, as status.step records them. The webhook reads
// KubeProxyStepTalos: only an operation at that step writes the spec.
const (
	KubeProxyStepCheck   = "kube-proxy-check"
	KubeProxyStepCilium  = "kube-proxy-cilium"
	KubeProxyStepVerify  = "kube-proxy-verify"
	KubeProxyStepTalos   = "kube-proxy-talos"
	KubeProxyStepCleanup = "kube-proxy-cleanup"
)

// KubeProxySwitching is an unfinished kube-proxy operation of a cluster, as
// the cluster checks read it.
type KubeProxySwitching struct {
	// Name is the operation's name, Mode its target, Step its status.step.
	Name, Mode, Step string
}

// UnfinishedKubeProxy returns the cluster's unfinished kube-proxy operations.
func UnfinishedKubeProxy(cluster string, ops []ichorv1alpha1.TalosOperation) []KubeProxySwitching {
	var out []KubeProxySwitching

	for i := range ops {
		o := &ops[i]
		if o.Spec.ClusterName != cluster || o.DeletionTimestamp != nil || o.Spec.Type != ichorv1alpha1.OperationKubeProxy || o.Spec.KubeProxy == nil {
			continue
		}

		if o.Status.Phase != ichorv1alpha1.OperationSucceeded && o.Status.Phase != ichorv1alpha1.OperationFailed {
			out = append(out, KubeProxySwitching{Name: o.Name, Mode: o.Spec.KubeProxy.Mode, Step: o.Status.Step})
		}
	}

	return out
}

// KubeProxyMode is the cluster's kube-proxy mode, enabled when unset.
func KubeProxyMode(c *ichorv1alpha1.TalosCluster) string {
	if c.Spec.CNI.KubeProxy == "" {
		return ichorv1alpha1.KubeProxyEnabled
	}

	return c.Spec.CNI.KubeProxy
}

// CheckKubeProxySwitch checks a kube-proxy switch of cluster c to target
// (enabled or replaced): a managed Cilium that is Ichor's Helm release, a
// mode the cluster does not already have, no other unfinished cni or
// kube-proxy operation.
func CheckKubeProxySwitch(c *ichorv1alpha1.TalosCluster, facts CNIFacts, target string) []Refusal {
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return []Refusal{{Field: fieldSpecType,
			Rule:   fmt.Sprintf("cluster %q has an unmanaged CNI; Ichor does not upgrade or configure it", c.Name),
			WayOut: "manage the CNI with its own tooling"}}
	}

	var out []Refusal

	switch target {
	case ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced:
		if target == KubeProxyMode(c) {
			out = append(out, Refusal{Field: fieldOperationKubeProxyMode,
				Rule:   fmt.Sprintf("cluster %s already has kube-proxy %s (spec.cni.kubeProxy); there is nothing to switch", c.Name, target),
				WayOut: "name the other mode"})
		}
	default:
		out = append(out, Refusal{Field: fieldOperationKubeProxyMode,
			Rule:   fmt.Sprintf("kube-proxy mode %q is not one Ichor knows", target),
			WayOut: fmt.Sprintf("name %s (Talos runs kube-proxy) or %s (Cilium replaces it)", ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced)})
	}

	if len(facts.Unfinished) > 0 {
		out = append(out, Refusal{Field: fieldSpecType,
			Rule:   fmt.Sprintf("operation %s changes cluster %s's Cilium and has not finished", strings.Join(facts.Unfinished, ", "), c.Name),
			WayOut: fmt.Sprintf("wait for it (`ichor operation get %s --watch`), or resume or delete it first", facts.Unfinished[0])})
	}

	if cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition); cond == nil || cond.Status != "True" {
		why := "the controller has not reported it"
		if cond != nil {
			why = cond.Message
		}

		out = append(out, Refusal{Field: fieldSpecType,
			Rule: fmt.Sprintf("Cilium on cluster %s is not Ichor's Helm release yet (CNIHandover: %s); kube-proxy is switched only with a Cilium Ichor owns", c.Name, why),
			WayOut: fmt.Sprintf("wait until `kubectl get taloscluster %s -n %s -o jsonpath='{.status.conditions[?(@.type==\"CNIHandover\")].status}'` says True",
				c.Name, c.Namespace)})
	}

	return out
}

// checkKubeProxyOperation checks a TalosOperation of type kube-proxy at admission.
func checkKubeProxyOperation(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	target := ""
	if op.Spec.KubeProxy != nil {
		target = op.Spec.KubeProxy.Mode
	}

	return CheckKubeProxySwitch(facts.Cluster, CNIFacts{Unfinished: facts.UnfinishedCNI}, target)
}

// checkKubeProxyWrite refuses a change of spec.cni.kubeProxy that is not the
// write of the kube-proxy operation switching to that mode, at its Talos
// step: the annotation names the operation (the controller sets it for that
// write), so neither a plain edit nor an annotation copied by hand moves
// Talos's side out of order.
func checkKubeProxyWrite(old, c *ichorv1alpha1.TalosCluster, facts ClusterFacts) *Refusal {
	from, to := KubeProxyMode(old), KubeProxyMode(c)
	if from == to {
		return nil
	}

	wayOut := fmt.Sprintf("keep spec.cni.kubeProxy: %s and run `ichor cni kube-proxy %s --cluster %s`, which switches Cilium and Talos in order", from, to, c.Name)
	name := c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation]

	if name == "" {
		return &Refusal{Field: fieldKubeProxy,
			Rule:   fmt.Sprintf("switching kube-proxy (%q to %q) changes two owners, Cilium and Talos, in a fixed order; spec.cni.kubeProxy is written only by the kube-proxy operation doing it", from, to),
			WayOut: wayOut}
	}

	for _, s := range facts.KubeProxySwitching {
		if s.Name == name && s.Mode == to && s.Step == KubeProxyStepTalos {
			return nil
		}
	}

	return &Refusal{Field: fieldKubeProxy,
		Rule: fmt.Sprintf("the annotation %s names %q, which is not an unfinished kube-proxy operation of cluster %s switching to %s at its step %s",
			ichorv1alpha1.KubeProxySwitchAnnotation, name, c.Name, to, KubeProxyStepTalos),
		WayOut: wayOut}
}

const fieldKubeProxy = "spec.cni.kubeProxy"
