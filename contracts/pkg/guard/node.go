package guard

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The fields the node-operation refusals name.
const (
	fieldNodeAction  = "spec.node.action"
	fieldNodeMachine = "spec.node.machineName"
)

// loadNodeFacts adds, for a node operation, its machine and the other
// approved machines of its cluster (CountApproved) to facts.
func loadNodeFacts(ctx context.Context, r client.Reader, op *ichorv1alpha1.TalosOperation, facts *OperationFacts) error {
	if op.Spec.Type != ichorv1alpha1.OperationNode || op.Spec.Node == nil {
		return nil
	}
	m := &ichorv1alpha1.TalosMachine{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: op.Namespace, Name: op.Spec.Node.MachineName}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading TalosMachine %s/%s: %w", op.Namespace, op.Spec.Node.MachineName, err)
	}
	n, err := CountApproved(ctx, r, op.Namespace, op.Spec.ClusterName, m.Name)
	if err != nil {
		return err
	}
	facts.Machine = m
	facts.OtherApprovedControlPlanes, facts.OtherApprovedWorkers = n.ControlPlanes, n.Workers
	return nil
}

// CheckNodeAction checks a node operation (reboot, shutdown, reset) against
// its machine and the rest of its cluster, before anything is asked of the
// node:
//
//   - the machine exists, belongs to the operation's cluster and is approved;
//   - shutting down or resetting the last control plane is refused: etcd and
//     the Kubernetes API go with it (a reset wipes its etcd data);
//   - a control plane whose absence would leave the others without an etcd
//     quorum (QuorumSize of the approved control planes) is refused for a
//     shutdown or reset; a reboot is checked at run time
//     (CheckControlPlaneDown, which every action of a control plane passes
//     too), where the controller sees etcd's health;
//   - shutting down or resetting the last worker while the control planes are
//     unschedulable is refused (overridable), as its removal is.
//
// A reboot of the last control plane is allowed: the node comes back, and the
// cluster is down only while it boots. The operation controller checks etcd's
// health again before each control plane is drained (CheckControlPlaneDown).
func CheckNodeAction(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	a, c, m := op.Spec.Node, facts.Cluster, facts.Machine
	if a == nil || c == nil {
		return nil
	}
	if m == nil {
		return []Refusal{{
			Field:  fieldNodeMachine,
			Rule:   fmt.Sprintf("TalosMachine %q does not exist in namespace %q", a.MachineName, op.Namespace),
			WayOut: "name a machine of the cluster (`ichor machine list`)",
		}}
	}
	if m.Spec.ClusterName != c.Name {
		return []Refusal{{
			Field:  fieldNodeMachine,
			Rule:   fmt.Sprintf("TalosMachine %q belongs to cluster %q, not %q", m.Name, m.Spec.ClusterName, c.Name),
			WayOut: "create the operation on the machine's own cluster",
		}}
	}
	if m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved {
		return []Refusal{{
			Field:  fieldNodeMachine,
			Rule:   fmt.Sprintf("TalosMachine %q is not approved, so it has no node Ichor manages", m.Name),
			WayOut: "approve it first (`ichor machine approve`), or name an approved machine",
		}}
	}
	if a.Action == ichorv1alpha1.NodeActionReboot {
		return nil
	}
	verb, loses := "shutting down", ""
	if a.Action == ichorv1alpha1.NodeActionReset {
		verb, loses = "resetting", " and wipes the cluster's only etcd data"
	}
	cps, workers := facts.OtherApprovedControlPlanes, facts.OtherApprovedWorkers
	switch {
	case IsApprovedControlPlane(m) && cps == 0:
		return []Refusal{{
			Field: fieldNodeAction,
			Rule: fmt.Sprintf("%s is the last control plane of cluster %q; %s it stops etcd and the Kubernetes API%s",
				m.Name, c.Name, verb, loses),
			WayOut: fmt.Sprintf("to restart it, reboot it instead (`ichor node reboot %s`); to replace it, approve a new control plane first "+
				"and act on this one once it has joined", m.Name),
		}}
	case IsApprovedControlPlane(m) && cps < QuorumSize(cps+1):
		return []Refusal{{
			Field: fieldNodeAction,
			Rule: fmt.Sprintf("%s it would leave %d of %d control planes, fewer than the %d an etcd quorum needs: the cluster would stop",
				verb+" "+m.Name, cps, cps+1, QuorumSize(cps+1)),
			WayOut: "approve another control plane first (add, then act on this one), or reboot it instead (`ichor node reboot " + m.Name + "`)",
		}}
	case IsApprovedWorker(m) && workers == 0 && !boolValue(c.Spec.ControlPlane.Schedulable):
		return []Refusal{{
			Field:       fieldNodeAction,
			Rule:        fmt.Sprintf("%s is the last worker and the control planes of cluster %q are unschedulable: nothing could run workloads", m.Name, c.Name),
			WayOut:      "set spec.controlPlane.schedulable: true on the TalosCluster first, or hold the `override` verb on the cluster",
			Overridable: true,
		}}
	}
	return nil
}
