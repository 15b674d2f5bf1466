package guard

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// OperationFacts is what an operation check needs beyond the object itself.
type OperationFacts struct {
	// Cluster is the operation's TalosCluster; nil when it does not exist.
	Cluster *ichorv1alpha1.TalosCluster
	// Machine is a node operation's TalosMachine; nil when it does not exist
	// (or the operation is of another type).
	Machine *ichorv1alpha1.TalosMachine
	// OtherApprovedControlPlanes and OtherApprovedWorkers count the cluster's
	// approved machines other than Machine (node operations only).
	OtherApprovedControlPlanes, OtherApprovedWorkers int
	// UnfinishedShutdown is the cluster's shutdown that has not completed,
	// other than the operation checked; nil when there is none.
	UnfinishedShutdown *ichorv1alpha1.TalosOperation
	// Backup is an etcd restore's TalosEtcdBackup; nil when it does not exist.
	Backup *ichorv1alpha1.TalosEtcdBackup
	// LockHolder is the identity holding the cluster's lock for work that is
	// still active, other than the operation itself ("" when none, or when
	// the reader may not read the Lease); etcd restores only.
	LockHolder string
	// UnfinishedRestores are the cluster's other etcd-restore operations that
	// have not finished; etcd restores only.
	UnfinishedRestores []string
	// Approved counts every approved machine of the cluster that is not
	// being deleted (Machine included), for the small-cluster checks.
	Approved ApprovedCounts
	// Backups are the namespace's TalosEtcdBackups (disruptive operations
	// only); BackupsUnknown is true when the reader may not list them.
	Backups        []ichorv1alpha1.TalosEtcdBackup
	BackupsUnknown bool
	// UnfinishedCNI names the cluster's other cni and kube-proxy operations
	// that have not finished; cni and kube-proxy operations only.
	UnfinishedCNI []string
	// Capacity is every Node's load, read for a node operation on a
	// three-node cluster without workers (CheckDrainCapacity); nil otherwise.
	Capacity []NodeLoad
	// Installation is the IchorInstallation, read for an ichor operation; nil
	// when it does not exist (or the operation is of another type).
	Installation *ichorv1alpha1.IchorInstallation
}

// RunnableOperationTypes are the operation types this release of Ichor runs.
// The webhook refuses every other type at admission (CheckRunnable) and the
// operation controller fails one that got in before the rule existed.
var RunnableOperationTypes = []string{
	ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationKubernetes, ichorv1alpha1.OperationNode,
	ichorv1alpha1.OperationShutdown, ichorv1alpha1.OperationEtcdRestore, ichorv1alpha1.OperationCNI, ichorv1alpha1.OperationKubeProxy,
	ichorv1alpha1.OperationCARotation, ichorv1alpha1.OperationKeyRotation, ichorv1alpha1.OperationIchor,
}

// OperationRunnable reports whether this release runs operations of type t.
func OperationRunnable(t string) bool {
	return slices.Contains(RunnableOperationTypes, t)
}

// adminTalosconfig is where a person finds the Talos identity that needs no Ichor.
const adminTalosconfig = "the os:admin talosconfig of the cluster's secrets (`ichor secrets export`)"

// notRunnableWayOut says, per type, what a person can do without the
// operation; every type of the API runs in this release.
var notRunnableWayOut = map[string]string{}

// CheckRunnable refuses an operation of a type this release does not run:
// it would be accepted and then only fail.
func CheckRunnable(op *ichorv1alpha1.TalosOperation) *Refusal {
	if op.Spec.Type == ichorv1alpha1.OperationKeyRotation && op.Spec.MachineSelector != nil {
		return &Refusal{
			Field: fieldMachineSelector, Rule: "a key rotation covers every control plane of the cluster: one left out would encrypt and sign with keys the others drop",
			WayOut: "leave spec.machineSelector unset (hold a machine back with the " + ichorv1alpha1.HoldApplyAnnotation + " annotation; the rotation waits for it)",
		}
	}

	if op.Spec.Type == ichorv1alpha1.OperationCARotation && op.Spec.MachineSelector != nil {
		return &Refusal{
			Field: fieldMachineSelector, Rule: "a CA rotation covers every machine of the cluster: a machine left out would stop trusting the others",
			WayOut: "leave spec.machineSelector unset (hold a machine back with the " + ichorv1alpha1.HoldApplyAnnotation + " annotation; the rotation waits for it)",
		}
	}

	if c := op.Spec.CARotation; op.Spec.Type == ichorv1alpha1.OperationCARotation && c != nil {
		if c.Etcd {
			return &Refusal{
				Field: "spec.caRotation.etcd",
				Rule: "this release of Ichor does not rotate the etcd CA: Talos gives etcd one CA and no accepted list, so a new one cannot be trusted " +
					"beside the old without a loss of quorum (siderolabs/talos#8808); nothing was created",
				WayOut: "leave spec.caRotation.etcd unset; the Talos API, Kubernetes and aggregator CAs rotate",
			}
		}

		if c.Talos != nil && !*c.Talos && c.Kubernetes != nil && !*c.Kubernetes && !c.Aggregator {
			return &Refusal{
				Field: "spec.caRotation", Rule: "spec.caRotation turns off the Talos API CA and the Kubernetes CA and asks for no aggregator CA: there is nothing to rotate",
				WayOut: "leave spec.caRotation.talos or spec.caRotation.kubernetes unset (both are rotated by default), or set spec.caRotation.aggregator",
			}
		}
	}

	if OperationRunnable(op.Spec.Type) {
		return nil
	}
	way, ok := notRunnableWayOut[op.Spec.Type]
	if !ok {
		way = "this release has no way to do it"
	}
	return &Refusal{
		Field: fieldSpecType,
		Rule: fmt.Sprintf("this release of Ichor does not run operations of type %q (it runs %s); nothing was created",
			op.Spec.Type, joinQuoted(RunnableOperationTypes)),
		WayOut: way,
	}
}

// ValidateOperation checks a TalosOperation being created: CheckOperation,
// then CheckRunnable.
func ValidateOperation(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	out := CheckOperation(op, facts)
	if r := CheckRunnable(op); r != nil {
		out = append(out, *r)
	}
	return out
}

// CheckOperationUnchanged refuses a change of an operation's spec other than
// spec.paused: an operation is a record of what was asked and checked at its
// creation (the CRD's CEL rules say the same; this is the early answer for
// the CLI and ichor-ui).
func CheckOperationUnchanged(old, op *ichorv1alpha1.TalosOperation) *Refusal {
	probe := old.Spec.DeepCopy()
	probe.Paused = op.Spec.Paused
	if reflect.DeepEqual(*probe, op.Spec) {
		return nil
	}
	return &Refusal{
		Field:  fieldSpec,
		Rule:   fmt.Sprintf("operation %s is immutable except spec.paused: its spec is what was checked when it was created", op.Name),
		WayOut: "pause it (`ichor operation pause`) or delete it, and create a new operation with the new spec",
	}
}

// OperationChanged reports whether an update changes the spec beyond spec.paused.
func OperationChanged(old, op *ichorv1alpha1.TalosOperation) bool {
	return CheckOperationUnchanged(old, op) != nil
}

// CheckOperation checks the spec of a TalosOperation against its cluster:
// the upgrade targets, the CNI, the node action's guards, the restore's typed
// name, and the cluster's unfinished shutdown, which refuses every new
// operation (CheckShutdownLock).
func CheckOperation(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	c := facts.Cluster
	if c == nil {
		return []Refusal{{
			Field:  "spec.clusterName",
			Rule:   fmt.Sprintf("TalosCluster %q does not exist in namespace %q", op.Spec.ClusterName, op.Namespace),
			WayOut: "correct spec.clusterName",
		}}
	}
	out := CheckShutdownLock(op, facts)
	switch op.Spec.Type {
	case ichorv1alpha1.OperationTalos:
		if t := op.Spec.Talos; t != nil && t.Version != "" {
			if err := release.TalosPath(c.Spec.TalosVersion, t.Version); err != nil {
				out = append(out, Refusal{Field: "spec.talos.version", Rule: err.Error(),
					WayOut: wayOutTalosPath})
			}
			if err := release.CheckPair(t.Version, c.Spec.KubernetesVersion); err != nil {
				out = append(out, pairRefusal("spec.talos.version", err))
			}
		}
	case ichorv1alpha1.OperationKubernetes:
		out = append(out, checkKubernetesOperation(op, c)...)
	case ichorv1alpha1.OperationIchor:
		if op.Spec.Ichor != nil {
			out = append(out, CheckIchorUpgrade(facts.Installation, op.Spec.Ichor.Version)...)
		}
	case ichorv1alpha1.OperationCNI:
		out = append(out, checkCNIOperation(op, facts)...)
	case ichorv1alpha1.OperationKubeProxy:
		out = append(out, checkKubeProxyOperation(op, facts)...)
	case ichorv1alpha1.OperationNode:
		out = append(out, CheckNodeAction(op, facts)...)
	case ichorv1alpha1.OperationShutdown:
		out = append(out, CheckShutdown(op)...)
	case ichorv1alpha1.OperationEtcdRestore:
		out = append(out, CheckEtcdRestore(op, facts)...)
	case ichorv1alpha1.OperationKeyRotation:
		out = append(out, checkKeyRotation(c)...)
	case ichorv1alpha1.OperationCARotation:
		if r := op.Spec.CARotation; r != nil && r.Aggregator && !multidoc(c) {
			out = append(out, Refusal{
				Field: "spec.caRotation.aggregator",
				Rule: fmt.Sprintf("cluster %s pins the configuration contract %q, whose single cluster.aggregatorCA cannot accept a new CA beside the old "+
					"(the v1.14 contract's KubeAggregatorCAConfig document can); nothing was created", c.Name, c.Spec.VersionContract),
				WayOut: "leave spec.caRotation.aggregator unset; the Talos API and Kubernetes CAs rotate on this contract",
			})
		}
	}
	return out
}

// multidoc: the cluster's contract has the v1.14 Kubernetes documents.
func multidoc(c *ichorv1alpha1.TalosCluster) bool {
	vc, err := config.ParseContractFromVersion(c.Spec.VersionContract)

	return err == nil && vc.MultidocKubernetesConfigSupported()
}

// checkKeyRotation refuses a key rotation of a cluster on a configuration
// contract before v1.14: only its KubeServiceAccountConfig and
// KubeEtcdEncryptionConfig documents hold two keys at once (the older
// cluster.serviceAccount and cluster.secretboxEncryptionSecret hold one).
func checkKeyRotation(c *ichorv1alpha1.TalosCluster) []Refusal {
	if multidoc(c) {
		return nil
	}
	return []Refusal{{
		Field: fieldSpecType,
		Rule: fmt.Sprintf("cluster %s pins the configuration contract %q, whose single service-account key and secretbox key cannot be rotated without a loss "+
			"(the v1.14 contract's KubeServiceAccountConfig and KubeEtcdEncryptionConfig documents hold two at once); nothing was created", c.Name, c.Spec.VersionContract),
		WayOut: "on this contract the keys stay as they are; a cluster created with the v1.14 contract (the default of `ichor init`) can rotate them",
	}}
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
		return []Requirement{verbOn(VerbShutdown, fieldSpecType, "shutting the whole cluster down")}
	case ichorv1alpha1.OperationCARotation:
		return []Requirement{verbOn(VerbRotateCA, fieldSpecType, "rotating the cluster's CAs")}
	case ichorv1alpha1.OperationKeyRotation:
		return []Requirement{verbOn(VerbRotateKeys, fieldSpecType, "rotating the service-account or secretbox key")}
	case ichorv1alpha1.OperationEtcdRestore:
		return []Requirement{
			verbOn(VerbRestoreEtcd, fieldSpecType, "restoring etcd into the live cluster"),
			override(fieldSpecType, "restoring etcd into the live cluster"),
			{
				Permission: Permission{Verb: VerbUpdate, Resource: ResourceTalosOperations, Subresource: SubresourceSecretReferences, Namespace: op.Namespace},
				Field:      "spec.etcdRestore.identityRef", Action: actionSecretRef,
			},
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
