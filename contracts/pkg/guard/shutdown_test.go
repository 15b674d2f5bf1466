package guard

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Rule: a cluster shutdown runs (it is no longer refused as not
// implemented); it chooses and orders no machines; while one has not
// completed, every new operation of its cluster is refused at admission,
// another shutdown and a Talos upgrade included, with the shutdown named and
// a way out; a completed or deleted one, or one of another cluster, refuses
// nothing.
func TestShutdownGuards(t *testing.T) {
	if r := CheckRunnable(op(ichorv1alpha1.OperationShutdown)); r != nil {
		t.Fatalf("type shutdown is refused: %+v", r)
	}

	facts := OperationFacts{Cluster: cluster()}
	expect(t, ValidateOperation(op(ichorv1alpha1.OperationShutdown), facts), nil)
	expect(t, CheckOperation(op(ichorv1alpha1.OperationShutdown, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
		o.Spec.OrderBy = "rack"
		o.Spec.MaxUnavailable = new(intstr.FromInt32(2))
	}), facts), map[string][]string{
		"spec.machineSelector": {"stops every machine", "ichor node shutdown"},
		"spec.orderBy":         {"leave spec.orderBy empty"},
		"spec.maxUnavailable":  {"leave spec.maxUnavailable empty"},
	})

	shutdown := func(name, cluster, phase string) ichorv1alpha1.TalosOperation {
		return ichorv1alpha1.TalosOperation{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: cluster, Type: ichorv1alpha1.OperationShutdown},
			Status:     ichorv1alpha1.TalosOperationStatus{Phase: phase},
		}
	}
	failed := shutdown("down-1", "prod", ichorv1alpha1.OperationPaused)
	failed.Status.FailedStep = "shutdown-workers"
	deleting := shutdown("down-2", "prod", ichorv1alpha1.OperationRunning)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}

	for name, tc := range map[string]struct {
		ops  []ichorv1alpha1.TalosOperation
		want string // the shutdown that refuses operation "op", "" for none
		// talos is the shutdown that refuses a Talos upgrade, "" for none.
		talos string
	}{
		"none":                  {nil, "", ""},
		"pending":               {[]ichorv1alpha1.TalosOperation{shutdown("down", "prod", "")}, "down", "down"},
		"running":               {[]ichorv1alpha1.TalosOperation{shutdown("down", "prod", ichorv1alpha1.OperationRunning)}, "down", "down"},
		"paused on a failure":   {[]ichorv1alpha1.TalosOperation{failed}, "down-1", "down-1"},
		"succeeded":             {[]ichorv1alpha1.TalosOperation{shutdown("down", "prod", ichorv1alpha1.OperationSucceeded)}, "", ""},
		"failed":                {[]ichorv1alpha1.TalosOperation{shutdown("down", "prod", ichorv1alpha1.OperationFailed)}, "", ""},
		"being deleted":         {[]ichorv1alpha1.TalosOperation{deleting}, "", ""},
		"of another cluster":    {[]ichorv1alpha1.TalosOperation{shutdown("down", "staging", ichorv1alpha1.OperationRunning)}, "", ""},
		"the operation checked": {[]ichorv1alpha1.TalosOperation{shutdown("op", "prod", ichorv1alpha1.OperationRunning)}, "", "op"},
	} {
		t.Run(name, func(t *testing.T) {
			f := facts
			if s := UnfinishedShutdown("prod", "op", tc.ops); s != nil {
				f.UnfinishedShutdown = s
			}
			for _, o := range []*ichorv1alpha1.TalosOperation{
				op(ichorv1alpha1.OperationConfig), op(ichorv1alpha1.OperationShutdown),
				op(ichorv1alpha1.OperationNode, func(o *ichorv1alpha1.TalosOperation) {
					o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "m1", Action: ichorv1alpha1.NodeActionReboot}
				}),
			} {
				f := f
				if o.Spec.Type == ichorv1alpha1.OperationNode {
					f.Machine = machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)
				}
				rs := CheckOperation(o, f)
				if tc.want == "" {
					expect(t, rs, nil)
					continue
				}
				expect(t, rs, map[string][]string{"spec.type": {"being shut down by operation " + tc.want, "delete operation " + tc.want}})
			}
			talos := CheckTalosUpgrade(cluster(), tc.ops, "v1.14.2")
			if tc.talos == "" {
				expect(t, talos, nil)
			} else {
				expect(t, talos, map[string][]string{"spec.talosVersion": {"being shut down by operation " + tc.talos}})
			}
		})
	}
}
