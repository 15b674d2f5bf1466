package guard

import (
	"fmt"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// The kube-proxy switch (architecture, "CNI"; issue #20 item 4). Replacing
// kube-proxy splits one setting across two owners, Talos's kube-proxy
// (rendered into the control planes' machine config) and Cilium's
// kubeProxyReplacement (the Helm release). A person writes the new mode into
// spec.cni.kubeProxy with KubeProxySwitchAnnotation naming it (`ichor cni
// kube-proxy`, ichor-ui); the controller then starts a TalosOperation of type
// kube-proxy that changes both in the only order that never leaves Services
// without a proxy: to replaced, Cilium first, verified on every node, then
// Talos's side off (status.cni.kubeProxy) and its objects deleted; to
// enabled, Talos first, its kube-proxy running on every node, then Cilium's
// replacement off. Until the operation's Talos step the render keeps the
// mode status.cni.kubeProxy records (RenderedKubeProxy); spec is never
// written by the controller.

const fieldOperationKubeProxyMode = "spec.kubeProxy.mode"

const fieldKubeProxy = "spec.cni.kubeProxy"

// Kube-proxy operation steps, as status.step records them.
const (
	KubeProxyStepCheck   = "kube-proxy-check"
	KubeProxyStepCilium  = "kube-proxy-cilium"
	KubeProxyStepVerify  = "kube-proxy-verify"
	KubeProxyStepTalos   = "kube-proxy-talos"
	KubeProxyStepCleanup = "kube-proxy-cleanup"
)

// KubeProxySteps are the steps of a switch to target, in order.
func KubeProxySteps(target string) []string {
	if target == ichorv1alpha1.KubeProxyReplaced {
		return []string{KubeProxyStepCheck, KubeProxyStepCilium, KubeProxyStepVerify, KubeProxyStepTalos, KubeProxyStepCleanup}
	}

	return []string{KubeProxyStepCheck, KubeProxyStepTalos, KubeProxyStepCilium, KubeProxyStepVerify}
}

// KubeProxyMode is the cluster's wanted kube-proxy mode, enabled when unset.
func KubeProxyMode(c *ichorv1alpha1.TalosCluster) string {
	return kubeProxyOrEnabled(c.Spec.CNI.KubeProxy)
}

// RenderedKubeProxy is the mode Talos's side is rendered with:
// status.cni.kubeProxy once recorded, spec.cni.kubeProxy before that.
func RenderedKubeProxy(c *ichorv1alpha1.TalosCluster) string {
	return render.TalosKubeProxy(c)
}

// KubeProxySwitchPending reports whether spec.cni.kubeProxy asks for a mode
// Talos's side does not have yet.
func KubeProxySwitchPending(c *ichorv1alpha1.TalosCluster) bool {
	return c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetCilium && RenderedKubeProxy(c) != KubeProxyMode(c)
}

func kubeProxyOrEnabled(m string) string {
	if m == "" {
		return ichorv1alpha1.KubeProxyEnabled
	}

	return m
}

// CheckKubeProxySwitch checks a switch of cluster c (as it is before the
// write) to target (enabled or replaced): a managed Cilium that is Ichor's
// Helm release, the mode Talos's side is recorded in, another mode, no
// unfinished cni or kube-proxy operation. With two modes, a target while a
// switch is pending is either the mode asked for (nothing to switch) or the
// mode Talos's side runs: calling the switch off, always allowed.
func CheckKubeProxySwitch(c *ichorv1alpha1.TalosCluster, facts CNIFacts, target string) []Refusal {
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return []Refusal{{Field: fieldKubeProxy,
			Rule:   fmt.Sprintf("cluster %q has an unmanaged CNI; spec.cni.kubeProxy only records what its nodes have", c.Name),
			WayOut: "switch kube-proxy with the CNI's own tooling"}}
	}

	// Back to the mode Talos's side still runs: the pending switch is
	// called off before its Talos step (its operation ends, the hand-over
	// controller puts Cilium's values back to that mode).
	if c.Status.CNI.KubeProxy != "" && KubeProxySwitchPending(c) && target == RenderedKubeProxy(c) {
		return nil
	}

	var out []Refusal

	switch target {
	case ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced:
		if target == KubeProxyMode(c) {
			out = append(out, Refusal{Field: fieldKubeProxy,
				Rule:   fmt.Sprintf("cluster %s already has kube-proxy %s (spec.cni.kubeProxy); there is nothing to switch", c.Name, target),
				WayOut: "name the other mode"})
		}
	default:
		out = append(out, Refusal{Field: fieldKubeProxy,
			Rule:   fmt.Sprintf("kube-proxy mode %q is not one Ichor knows", target),
			WayOut: fmt.Sprintf("name %s (Talos runs kube-proxy) or %s (Cilium replaces it)", ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced)})
	}

	if c.Status.CNI.KubeProxy == "" {
		out = append(out, Refusal{Field: fieldKubeProxy,
			Rule:   fmt.Sprintf("the controller has not recorded the kube-proxy mode cluster %s's Talos side runs (status.cni.kubeProxy is empty)", c.Name),
			WayOut: "wait a minute for the controller to record it, then try again"})
	}

	if len(facts.Unfinished) > 0 {
		out = append(out, Refusal{Field: fieldKubeProxy,
			Rule:   fmt.Sprintf("operation %s changes cluster %s's Cilium and has not finished", strings.Join(facts.Unfinished, ", "), c.Name),
			WayOut: fmt.Sprintf("wait for it (`ichor operation get %s --watch`), or resume or delete it first", facts.Unfinished[0])})
	}

	if cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition); cond == nil || cond.Status != "True" {
		why := "the controller has not reported it"
		if cond != nil {
			why = cond.Message
		}

		out = append(out, Refusal{Field: fieldKubeProxy,
			Rule: fmt.Sprintf("Cilium on cluster %s is not Ichor's Helm release yet (CNIHandover: %s); kube-proxy is switched only with a Cilium Ichor owns", c.Name, why),
			WayOut: fmt.Sprintf("wait until `kubectl get taloscluster %s -n %s -o jsonpath='{.status.conditions[?(@.type==\"CNIHandover\")].status}'` says True",
				c.Name, c.Namespace)})
	}

	return out
}

// checkKubeProxyWrite checks a change of spec.cni.kubeProxy: the annotation
// names the new mode on that write, and the switch passes
// CheckKubeProxySwitch against the cluster as it was.
func checkKubeProxyWrite(old, c *ichorv1alpha1.TalosCluster, facts ClusterFacts) []Refusal {
	from, to := KubeProxyMode(old), KubeProxyMode(c)
	if from == to {
		return nil
	}

	if got := c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation]; got != to {
		rule := fmt.Sprintf("switching kube-proxy (%q to %q) changes two owners, Cilium and Talos, in a fixed order, and is asked for explicitly", from, to)
		if got != "" {
			rule += fmt.Sprintf(": the annotation %s says %q, not %q", ichorv1alpha1.KubeProxySwitchAnnotation, got, to)
		}

		return []Refusal{{Field: fieldKubeProxy, Rule: rule,
			WayOut: fmt.Sprintf("run `ichor cni kube-proxy %s --cluster %s`, or set the annotation %s: %q on the same write", to, c.Name, ichorv1alpha1.KubeProxySwitchAnnotation, to)}}
	}

	return CheckKubeProxySwitch(old, CNIFacts{Unfinished: facts.UnfinishedCNI}, to)
}

// checkKubeProxyOperation checks a TalosOperation of type kube-proxy at
// admission: it carries out the switch spec.cni.kubeProxy asks for.
func checkKubeProxyOperation(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	c := facts.Cluster
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return []Refusal{{Field: fieldSpecType,
			Rule:   fmt.Sprintf("cluster %q has an unmanaged CNI; Ichor does not upgrade or configure it", c.Name),
			WayOut: "manage the CNI with its own tooling"}}
	}

	target := ""
	if op.Spec.KubeProxy != nil {
		target = op.Spec.KubeProxy.Mode
	}

	var out []Refusal

	if target != KubeProxyMode(c) || !KubeProxySwitchPending(c) {
		out = append(out, Refusal{Field: fieldOperationKubeProxyMode,
			Rule: fmt.Sprintf("a kube-proxy operation carries out the switch spec.cni.kubeProxy asks for; cluster %s asks for %s and its Talos side runs %s",
				c.Name, KubeProxyMode(c), RenderedKubeProxy(c)),
			WayOut: fmt.Sprintf("run `ichor cni kube-proxy MODE --cluster %s`: the controller starts the operation", c.Name)})
	}

	if len(facts.UnfinishedCNI) > 0 {
		out = append(out, Refusal{Field: fieldSpecType,
			Rule:   fmt.Sprintf("operation %s changes cluster %s's Cilium and has not finished", strings.Join(facts.UnfinishedCNI, ", "), c.Name),
			WayOut: fmt.Sprintf("wait for it (`ichor operation get %s --watch`), or resume or delete it first", facts.UnfinishedCNI[0])})
	}

	return out
}

// GoverningKubeProxy is the newest kube-proxy operation of cluster c for
// target, or nil.
func GoverningKubeProxy(c *ichorv1alpha1.TalosCluster, target string, ops []ichorv1alpha1.TalosOperation) *ichorv1alpha1.TalosOperation {
	var out *ichorv1alpha1.TalosOperation

	for i := range ops {
		o := &ops[i]
		if o.Spec.ClusterName != c.Name || o.Spec.Type != ichorv1alpha1.OperationKubeProxy || o.Spec.KubeProxy == nil ||
			o.Spec.KubeProxy.Mode != target || o.DeletionTimestamp != nil {
			continue
		}

		if out == nil || out.CreationTimestamp.Before(&o.CreationTimestamp) {
			out = o
		}
	}

	return out
}

// KubeProxyStepDone reports whether an operation switching to target that
// is at step has gone past the step want.
func KubeProxyStepDone(target, step, want string) bool {
	steps := KubeProxySteps(target)
	i, j := slices.Index(steps, step), slices.Index(steps, want)

	return i >= 0 && j >= 0 && i > j
}

// KubeProxySwitching is an unfinished kube-proxy operation of a cluster.
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
