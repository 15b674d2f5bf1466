package guard

import (
	"errors"
	"fmt"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// The Kubernetes upgrade's checks (architecture, "Upgrades"; issue 22): a
// target one minor up at most from what the machines run (the version skew
// policy), supported by the cluster's Talos and by its Cilium (the one
// table, contracts/pkg/release), and one kubernetes operation at a time.

const (
	fieldKubernetesVersion     = "spec.kubernetesVersion"
	fieldOperationK8sVersion   = "spec.kubernetes.version"
	wayOutKubernetesCandidates = "; `ichor upgrade kubernetes --list` shows the candidates"
)

// kubernetesTarget checks a Kubernetes target against cluster c: newer than
// what the machines run (kubeupgrade.Running) and at most one minor up, a
// pair with the cluster's Talos the table supports, and, when the cluster
// runs Cilium, a Kubernetes the installed chart supports.
func kubernetesTarget(c *ichorv1alpha1.TalosCluster, field, target string) []Refusal {
	var out []Refusal

	running := kubeupgrade.Running(c)

	switch err := release.KubernetesSkew(running, target); {
	case err != nil:
		out = append(out, Refusal{Field: field, Rule: err.Error(), WayOut: wayOutKubernetesSkew + wayOutKubernetesCandidates})
	case kubeupgrade.Same(running, target):
		out = append(out, Refusal{Field: field, Rule: fmt.Sprintf("cluster %s already runs Kubernetes %s", c.Name, kubeupgrade.Describe(target)),
			WayOut: "choose a newer version" + wayOutKubernetesCandidates})
	}

	if err := release.CheckPair(c.Spec.TalosVersion, target); err != nil {
		out = append(out, pairRefusal(field, err))
	}

	if r := CheckCiliumPair(c, field, target); r != nil {
		out = append(out, *r)
	}

	return out
}

// InstalledCilium is the Cilium version the Kubernetes ↔ Cilium pair of
// cluster c is checked against, and where it comes from: the one the cluster
// runs (status.cni.ciliumVersion, read from the Cilium agent on the slow
// requeue), or, while none is recorded, the chart this Ichor installs
// (release.DefaultCiliumVersion: `ichor init` boots it). "" for a cluster
// whose CNI Ichor does not manage (the unmanaged preset).
func InstalledCilium(c *ichorv1alpha1.TalosCluster) (version, source string) {
	if c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetCilium {
		return "", ""
	}

	if v := c.Status.CNI.CiliumVersion; v != "" {
		return v, "the Cilium the cluster runs (status.cni.ciliumVersion)"
	}

	return release.DefaultCiliumVersion, "the Cilium this Ichor installs"
}

// CheckCiliumPair checks Kubernetes target against the cluster's Cilium
// (InstalledCilium) with the one compatibility table
// (release.CheckCiliumPair): a Kubernetes older than the Cilium supports is
// refused, overridable like every incompatible pair (architecture,
// "Upgrades"); one newer than it is tested on passes (UntestedCilium
// warns). The webhook runs it on every write that changes
// spec.kubernetesVersion, the CLI and ichor-ui before they write it.
func CheckCiliumPair(c *ichorv1alpha1.TalosCluster, field, target string) *Refusal {
	cilium, source := InstalledCilium(c)
	if cilium == "" {
		return nil
	}

	if _, err := release.CheckCiliumPair(cilium, target); err != nil {
		r := pairRefusal(field, fmt.Errorf("%w (%s)", err, source))
		if errors.Is(err, release.ErrIncompatiblePair) {
			r.WayOut = fmt.Sprintf("choose a Kubernetes version Cilium %s supports%s, or hold the `override` verb on the cluster (the override is recorded)",
				cilium, wayOutKubernetesCandidates)
		} else {
			r.WayOut = "upgrade Ichor to a release that embeds a Cilium supporting this Kubernetes"
		}

		return &r
	}

	return nil
}

// CheckKubernetesUpgrade checks a Kubernetes upgrade of cluster c to target
// before spec.kubernetesVersion is written (the CLI's `ichor upgrade
// kubernetes` and ichor-ui's StartKubernetesUpgrade; the webhook checks the
// skew and the pair on the write): kubernetesTarget, and no kubernetes
// operation of the cluster still unfinished. ops are the namespace's operations.
func CheckKubernetesUpgrade(c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation, target string) []Refusal {
	out := kubernetesTarget(c, fieldKubernetesVersion, target)

	if op := kubeupgrade.Unfinished(c, ops); op != nil {
		out = append(out, Refusal{Field: fieldKubernetesVersion,
			Rule: fmt.Sprintf("kubernetes operation %s of cluster %s has not finished (phase %s)", op.Name, c.Name, orNone(op.Status.Phase)),
			WayOut: fmt.Sprintf("let it finish (`ichor operation get %s --watch`), resume it (`ichor operation resume %s`) or delete it first",
				op.Name, op.Name)})
	}

	return out
}

// UntestedCilium is the warning a Kubernetes target gets when the installed
// Cilium chart is not tested on it (newer than its tested range), or "".
func UntestedCilium(c *ichorv1alpha1.TalosCluster, target string) string {
	cilium := c.Status.CNI.CiliumVersion
	if cilium == "" || c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetCilium {
		return ""
	}

	if untested, err := release.CheckCiliumPair(cilium, target); err == nil && untested {
		return fmt.Sprintf("Cilium %s is not tested on Kubernetes %s (newer than the versions its documentation lists); it relies on Kubernetes' backward compatibility",
			cilium, kubeupgrade.Describe(target))
	}

	return ""
}

// checkKubernetesOperation checks a TalosOperation of type kubernetes: its
// target is the cluster's spec.kubernetesVersion (the operation carries out
// a spec change, never makes one), kubernetesTarget, and it covers every
// machine (no kubelet may stay behind the API servers).
func checkKubernetesOperation(op *ichorv1alpha1.TalosOperation, c *ichorv1alpha1.TalosCluster) []Refusal {
	k := op.Spec.Kubernetes
	if k == nil {
		return nil
	}

	var out []Refusal

	if !kubeupgrade.Same(k.Version, c.Spec.KubernetesVersion) {
		out = append(out, Refusal{Field: fieldOperationK8sVersion,
			Rule: fmt.Sprintf("a kubernetes operation upgrades to the cluster's spec.kubernetesVersion (%s), not %s",
				kubeupgrade.Describe(c.Spec.KubernetesVersion), kubeupgrade.Describe(k.Version)),
			WayOut: fmt.Sprintf("run `ichor upgrade kubernetes %s`, which sets spec.kubernetesVersion; the controller then starts the operation", k.Version)})
	}

	if !kubeupgrade.Same(kubeupgrade.Running(c), k.Version) {
		out = append(out, kubernetesTarget(c, fieldOperationK8sVersion, k.Version)...)
	}

	if op.Spec.MachineSelector != nil {
		out = append(out, Refusal{Field: fieldMachineSelector,
			Rule:   "a Kubernetes upgrade covers every machine: a kubelet left behind would break the version skew policy later",
			WayOut: "drop spec.machineSelector; hold a machine back with the " + ichorv1alpha1.HoldUpgradeAnnotation + " annotation instead"})
	}

	return out
}

// overrideAnnotations are the annotations of a TalosOperation that let it go
// past an overridable check at run time, with what each one lets happen.
var overrideAnnotations = []struct{ key, action string }{
	{ichorv1alpha1.OverrideRemovedAPIsAnnotation, "upgrading Kubernetes although APIs the target removes are in use"},
	{ichorv1alpha1.OverrideDrainCapacityAnnotation, "draining nodes although the evicted pods do not fit on the other nodes"},
}

// OverrideAnnotationOf is the override annotation a resume of op sets to go
// past the overridable check its failed step stopped at, and what it goes
// past: the removed APIs in use for a kubernetes operation, the drain
// capacity check for any other (`ichor operation resume --override`, the
// console's Resume with override).
func OverrideAnnotationOf(op *ichorv1alpha1.TalosOperation) (key, what string) {
	if op.Spec.Type == ichorv1alpha1.OperationKubernetes {
		return ichorv1alpha1.OverrideRemovedAPIsAnnotation, "the removed APIs in use"
	}

	return ichorv1alpha1.OverrideDrainCapacityAnnotation, "the drain capacity check"
}

// OperationAnnotationRequirements returns the permissions a create (old nil)
// or update of op needs for its annotations: setting or changing an
// override annotation (overrideAnnotations) needs `override` on the cluster.
func OperationAnnotationRequirements(old, op *ichorv1alpha1.TalosOperation) []Requirement {
	var out []Requirement

	for _, a := range overrideAnnotations {
		v, ok := op.Annotations[a.key]
		if !ok {
			continue
		}

		if old != nil {
			if ov, had := old.Annotations[a.key]; had && ov == v {
				continue
			}
		}

		out = append(out, Requirement{
			Permission: OverrideOn(op.Namespace, op.Spec.ClusterName), Field: "metadata.annotations[" + a.key + "]", Action: a.action,
		})
	}

	return out
}

func orNone(s string) string {
	if s == "" {
		return "none yet"
	}

	return s
}
