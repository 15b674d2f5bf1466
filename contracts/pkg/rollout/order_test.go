package rollout_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
)

// Rule: spec.orderBy decides the order a rollout takes the machines of a
// role (architecture, "Upgrades": label-based ordering). The order Order
// gives (what the controller records in status.machines) is the order the
// passes of the rollout (Next, one worker at a time) start the machines,
// control planes first, the controller's own Node last within its role,
// whatever the names say. The names run against the label's values, so
// ordering by name, ignoring orderBy, or a pass that re-sorts fails.
func TestOrderByDrivesTheRollout(t *testing.T) {
	m := func(name, role, rack, node string) ichorv1alpha1.TalosMachine {
		labels := map[string]string{}
		if rack != "" {
			labels["rack"] = rack
		}
		return ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       ichorv1alpha1.TalosMachineSpec{Role: role},
			Status:     ichorv1alpha1.TalosMachineStatus{NodeName: node},
		}
	}
	cp, w := ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker
	machines := []ichorv1alpha1.TalosMachine{
		m("a-worker", w, "r3", "n-aw"), m("b-worker", w, "r1", "n-bw"), m("c-worker", w, "r2", "n-cw"), m("d-worker", w, "", "n-dw"),
		m("a-cp", cp, "r2", "n-acp"), m("b-cp", cp, "r1", "n-bcp"), m("c-cp", cp, "r0", "n-ccp"),
	}

	for _, tc := range []struct {
		orderBy, own string
		want         []string
	}{
		{"rack", "", []string{"c-cp", "b-cp", "a-cp", "d-worker", "b-worker", "c-worker", "a-worker"}},
		// The controller's own Node goes last within its role, before the label.
		{"rack", "N-CCP", []string{"b-cp", "a-cp", "c-cp", "d-worker", "b-worker", "c-worker", "a-worker"}},
		{"rack", "n-bw", []string{"c-cp", "b-cp", "a-cp", "d-worker", "c-worker", "a-worker", "b-worker"}},
		{"", "", []string{"a-cp", "b-cp", "c-cp", "a-worker", "b-worker", "c-worker", "d-worker"}},
		{"absent", "", []string{"a-cp", "b-cp", "c-cp", "a-worker", "b-worker", "c-worker", "d-worker"}},
	} {
		ms := slices.Clone(machines)
		// Whatever order the machines are listed in.
		slices.Reverse(ms)
		rollout.Order(ms, tc.orderBy, tc.own)

		slots := make([]rollout.Slot, len(ms))
		for i := range ms {
			// Configured: approved, addressed, provisioned.
			ms[i].Spec.Approval.State, ms[i].Spec.Address = ichorv1alpha1.ApprovalApproved, "10.0.0.1"
			ms[i].Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue}}
			slots[i] = rollout.Slot{Progress: ichorv1alpha1.MachineProgress{Name: ms[i].Name, Role: ms[i].Spec.Role, Phase: ichorv1alpha1.MachinePending}, Machine: &ms[i]}
		}

		var started []string
		for pass := 0; pass <= len(slots); pass++ {
			ch := rollout.Next(slots, nil)
			if len(ch.Active) == 0 {
				break
			}
			if len(ch.Active) != 1 || len(ch.Dropped) != 0 {
				t.Fatalf("orderBy %q, pass %d: want one machine at a time, got %+v", tc.orderBy, pass, ch)
			}
			started = append(started, slots[ch.Active[0]].Progress.Name)
			slots[ch.Active[0]].Progress.Phase = ichorv1alpha1.MachineDone
		}

		if !slices.Equal(started, tc.want) {
			t.Errorf("orderBy %q, own node %q: the rollout took %v, want %v", tc.orderBy, tc.own, started, tc.want)
		}
	}
}
