package guard

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Cluster shutdown (architecture, "Upgrades", the shutdown paragraph): a
// TalosOperation of type shutdown stops the whole cluster for planned
// downtime. While it has not completed, the cluster lock refuses every other
// disruptive operation: the operation keeps the lock even when it paused on
// a failed step (lock.OperationLiveness), and a new TalosOperation of the
// cluster is refused at admission (CheckShutdownLock), so that nothing starts
// on a cluster that is going down or waits to be powered on.

// Shutdown reports whether op is a cluster shutdown that has not completed
// (succeeded or failed) and is not being deleted: the one that holds its
// cluster's lock against every other operation.
func Shutdown(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationShutdown && op.DeletionTimestamp == nil &&
		op.Status.Phase != ichorv1alpha1.OperationSucceeded && op.Status.Phase != ichorv1alpha1.OperationFailed
}

// UnfinishedShutdown returns the shutdown of cluster among ops that has not
// completed, other than the operation named except; nil when there is none.
func UnfinishedShutdown(cluster, except string, ops []ichorv1alpha1.TalosOperation) *ichorv1alpha1.TalosOperation {
	for i := range ops {
		o := &ops[i]
		if o.Spec.ClusterName == cluster && (except == "" || o.Name != except) && Shutdown(o) {
			return o
		}
	}

	return nil
}

// loadShutdownFacts adds to facts the cluster's unfinished shutdown, other
// than op itself.
func loadShutdownFacts(ctx context.Context, r client.Reader, op *ichorv1alpha1.TalosOperation, facts *OperationFacts) error {
	var list ichorv1alpha1.TalosOperationList
	if err := r.List(ctx, &list, client.InNamespace(op.Namespace)); err != nil {
		return fmt.Errorf("listing TalosOperations in %s: %w", op.Namespace, err)
	}

	if s := UnfinishedShutdown(op.Spec.ClusterName, op.Name, list.Items); s != nil {
		facts.UnfinishedShutdown = s.DeepCopy()
	}

	return nil
}

// shutdownLockRefusal is the refusal of anything new on a cluster whose
// shutdown s has not completed.
func shutdownLockRefusal(field, cluster string, s *ichorv1alpha1.TalosOperation) Refusal {
	phase := s.Status.Phase
	if phase == "" {
		phase = ichorv1alpha1.OperationPending
	}

	return Refusal{
		Field: field,
		Rule: fmt.Sprintf("cluster %s is being shut down by operation %s (phase %s): until it has completed, no other operation starts",
			cluster, s.Name, phase),
		WayOut: fmt.Sprintf("power the machines on; the shutdown completes by itself once every machine answers on a new boot "+
			"(`ichor operation get %s --watch`); to abandon it instead, delete operation %s", s.Name, s.Name),
	}
}

// CheckShutdownLock refuses a new TalosOperation of a cluster whose shutdown
// has not completed (a second shutdown too).
func CheckShutdownLock(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	if s := facts.UnfinishedShutdown; s != nil && s.Name != op.Name {
		return []Refusal{shutdownLockRefusal(fieldSpecType, op.Spec.ClusterName, s)}
	}

	return nil
}

// CheckShutdown checks a shutdown's spec: it stops every machine of the
// cluster, workers first, so the fields that choose or order machines do not
// apply.
func CheckShutdown(op *ichorv1alpha1.TalosOperation) []Refusal {
	if op.Spec.Type != ichorv1alpha1.OperationShutdown {
		return nil
	}

	var out []Refusal

	for _, f := range []struct {
		field string
		set   bool
	}{
		{fieldMachineSelector, op.Spec.MachineSelector != nil},
		{"spec.orderBy", op.Spec.OrderBy != ""},
		{"spec.maxUnavailable", op.Spec.MaxUnavailable != nil},
	} {
		if field := f.field; f.set {
			out = append(out, Refusal{
				Field: field,
				Rule: "a shutdown stops every machine of the cluster: the workers first, together, then the control planes " +
					"(the controller's own node last); it chooses and orders no machines",
				WayOut: "leave " + field + " empty; to stop one node, use a node operation (`ichor node shutdown MACHINE`)",
			})
		}
	}

	return out
}
