package guard

import (
	"errors"
	"fmt"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// OperationFacts is what an operation check needs beyond the object itself.
type OperationFacts struct {
	// Cluster is the operation's TalosCluster; nil when it does not exist.
	Cluster *ichorv1alpha1.TalosCluster
}

// ValidateOperation checks a TalosOperation being created.
func ValidateOperation(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	c := facts.Cluster
	if c == nil {
		return []Refusal{{
			Field:  "spec.clusterName",
			Rule:   fmt.Sprintf("TalosCluster %q does not exist in namespace %q", op.Spec.ClusterName, op.Namespace),
			WayOut: "correct spec.clusterName",
		}}
	}
	var out []Refusal
	switch op.Spec.Type {
	case ichorv1alpha1.OperationTalos:
		if t := op.Spec.Talos; t != nil && t.Version != "" {
			if err := release.TalosPath(c.Spec.TalosVersion, t.Version); err != nil {
				out = append(out, Refusal{Field: "spec.talos.version", Rule: err.Error(),
					WayOut: "choose a newer Talos version on a supported upgrade path (`ichor upgrade talos --list`)"})
			}
			if err := release.CheckPair(t.Version, c.Spec.KubernetesVersion); err != nil {
				out = append(out, pairRefusal("spec.talos.version", err))
			}
		}
	case ichorv1alpha1.OperationKubernetes:
		if k := op.Spec.Kubernetes; k != nil {
			if err := release.KubernetesSkew(c.Spec.KubernetesVersion, k.Version); err != nil {
				out = append(out, Refusal{Field: "spec.kubernetes.version", Rule: err.Error(),
					WayOut: "choose a newer Kubernetes version at most one minor up (`ichor upgrade kubernetes --list`)"})
			}
			if err := release.CheckPair(c.Spec.TalosVersion, k.Version); err != nil {
				out = append(out, pairRefusal("spec.kubernetes.version", err))
			}
		}
	case ichorv1alpha1.OperationCNI, ichorv1alpha1.OperationKubeProxy:
		if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
			out = append(out, Refusal{Field: "spec.type",
				Rule:   fmt.Sprintf("cluster %q has an unmanaged CNI; Ichor does not upgrade or configure it", c.Name),
				WayOut: "manage the CNI with its own tooling"})
		}
	case ichorv1alpha1.OperationEtcdRestore:
		if r := op.Spec.EtcdRestore; r != nil && r.ConfirmClusterName != op.Spec.ClusterName {
			out = append(out, Refusal{Field: "spec.etcdRestore.confirmClusterName",
				Rule:   "a restore rolls the Kubernetes API back; the cluster's name must be typed as consent",
				WayOut: fmt.Sprintf("set spec.etcdRestore.confirmClusterName: %s", op.Spec.ClusterName)})
		}
	}
	return out
}

func pairRefusal(field string, err error) Refusal {
	r := Refusal{Field: field, Rule: err.Error(), WayOut: "choose a pair the compatibility table supports"}
	if errors.Is(err, release.ErrIncompatiblePair) {
		r.Overridable = true
		r.WayOut += ", or hold the `override` verb on the cluster (the override is recorded)"
	}
	return r
}

// OperationRequirements returns the permissions creating op needs beyond
// `create` on talosoperations: the destructive operations' own verbs, and
// override on the cluster for a node reset and an etcd restore.
func OperationRequirements(op *ichorv1alpha1.TalosOperation) []Requirement {
	verbOn := func(verb, field, action string) Requirement {
		return Requirement{
			Permission: Permission{Verb: verb, Resource: ResourceTalosOperations, Namespace: op.Namespace},
			Field:      field, Action: action,
		}
	}
	override := func(field, action string) Requirement {
		return Requirement{Permission: OverrideOn(op.Namespace, op.Spec.ClusterName), Field: field, Action: action}
	}
	switch op.Spec.Type {
	case ichorv1alpha1.OperationShutdown:
		return []Requirement{verbOn(VerbShutdown, "spec.type", "shutting the whole cluster down")}
	case ichorv1alpha1.OperationCARotation:
		return []Requirement{verbOn(VerbRotateCA, "spec.type", "rotating the cluster's CAs")}
	case ichorv1alpha1.OperationKeyRotation:
		return []Requirement{verbOn(VerbRotateKeys, "spec.type", "rotating the service-account or secretbox key")}
	case ichorv1alpha1.OperationEtcdRestore:
		return []Requirement{
			verbOn(VerbRestoreEtcd, "spec.type", "restoring etcd into the live cluster"),
			override("spec.type", "restoring etcd into the live cluster"),
		}
	case ichorv1alpha1.OperationNode:
		if op.Spec.Node == nil {
			return nil
		}
		switch op.Spec.Node.Action {
		case ichorv1alpha1.NodeActionReset:
			return []Requirement{
				verbOn(VerbResetNode, "spec.node.action", "resetting a node"),
				override("spec.node.action", "resetting a node"),
			}
		case ichorv1alpha1.NodeActionShutdown:
			return []Requirement{verbOn(VerbShutdownNode, "spec.node.action", "shutting a node down")}
		}
	}
	return nil
}
