package rollout_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
)

// slot is an entry of an operation's status.machines: name:phase, where the
// name's prefix gives the role (cp- a control plane) and phase is one of
// P(ending), I(nProgress), H(eld), D(one), S(kipped), F(ailed); mutate
// changes its machine (nil: the TalosMachine is gone).
func slot(spec string, mutate ...func(m *ichorv1alpha1.TalosMachine) *ichorv1alpha1.TalosMachine) rollout.Slot {
	name, ph, _ := strings.Cut(spec, ":")
	role := ichorv1alpha1.RoleWorker
	if strings.HasPrefix(name, "cp-") {
		role = ichorv1alpha1.RoleControlPlane
	}
	phase := map[string]string{
		"P": ichorv1alpha1.MachinePending, "I": ichorv1alpha1.MachineInProgress, "H": ichorv1alpha1.MachineHeld,
		"D": ichorv1alpha1.MachineDone, "S": ichorv1alpha1.MachineSkipped, "F": ichorv1alpha1.MachineFailed,
	}[ph]
	m := machine(name, role)
	mp := &m
	for _, f := range mutate {
		mp = f(mp)
	}
	return rollout.Slot{Progress: ichorv1alpha1.MachineProgress{Name: name, Role: role, Phase: phase}, Machine: mp}
}

func gone(*ichorv1alpha1.TalosMachine) *ichorv1alpha1.TalosMachine { return nil }

func deleting(m *ichorv1alpha1.TalosMachine) *ichorv1alpha1.TalosMachine {
	m.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	return m
}

func unprovisioned(m *ichorv1alpha1.TalosMachine) *ichorv1alpha1.TalosMachine {
	m.Status.Conditions = nil
	return m
}

func held(m *ichorv1alpha1.TalosMachine) *ichorv1alpha1.TalosMachine {
	m.Annotations = map[string]string{ichorv1alpha1.HoldApplyAnnotation: ""}
	return m
}

// choice renders a Choice by names: "active | held | dropped".
func choice(slots []rollout.Slot, c rollout.Choice) string {
	names := func(idx []int) string {
		out := make([]string, 0, len(idx))
		for _, i := range idx {
			out = append(out, slots[i].Progress.Name)
		}
		return strings.Join(out, ",")
	}
	dropped := make([]int, 0, len(c.Dropped))
	for _, d := range c.Dropped {
		dropped = append(dropped, d.Index)
	}
	return fmt.Sprintf("%s | %s | %s", names(c.Active), names(c.Held), names(dropped))
}

func TestNext(t *testing.T) {
	two, half, tenth := intstr.FromInt32(2), intstr.FromString("50%"), intstr.FromString("10%")

	for _, tc := range []struct {
		name   string
		slots  []rollout.Slot
		budget *intstr.IntOrString
		want   string
	}{
		{"empty input", nil, nil, " |  | "},
		{"nothing left to do", []rollout.Slot{slot("cp-1:D"), slot("w-1:S"), slot("w-2:F")}, &two, " |  | "},

		// The worker budget.
		{"budget 1 (no maxUnavailable)", []rollout.Slot{slot("w-1:P"), slot("w-2:P"), slot("w-3:P")}, nil, "w-1 |  | "},
		{"budget N", []rollout.Slot{slot("w-1:P"), slot("w-2:P"), slot("w-3:P")}, &two, "w-1,w-2 |  | "},
		{"a percentage of the workers", []rollout.Slot{slot("cp-1:D"), slot("w-1:P"), slot("w-2:P"), slot("w-3:P"), slot("w-4:P")}, &half, "w-1,w-2 |  | "},
		{"a percentage rounding to 0 is 1", []rollout.Slot{slot("w-1:P"), slot("w-2:P"), slot("w-3:P")}, &tenth, "w-1 |  | "},
		{"in progress counts against budget 1", []rollout.Slot{slot("w-1:D"), slot("w-2:I"), slot("w-3:P")}, nil, "w-2 |  | "},
		{"in progress counts against budget N", []rollout.Slot{slot("w-1:I"), slot("w-2:P"), slot("w-3:P")}, &two, "w-1,w-2 |  | "},
		{"started workers over the budget go on", []rollout.Slot{slot("w-1:I"), slot("w-2:I"), slot("w-3:P")}, nil, "w-1,w-2 |  | "},

		// Control planes: one at a time, before the workers.
		{"one control plane at a time", []rollout.Slot{slot("cp-1:P"), slot("cp-2:P"), slot("w-1:P")}, &two, "cp-1 |  | "},
		{"a control plane in progress goes alone", []rollout.Slot{slot("cp-1:I"), slot("cp-2:P"), slot("w-1:P")}, &two, "cp-1 |  | "},
		{"the next control plane before the workers", []rollout.Slot{slot("cp-1:D"), slot("cp-2:P"), slot("w-1:P"), slot("w-2:P")}, &two, "cp-2 |  | "},
		{"workers once the control planes are done", []rollout.Slot{slot("cp-1:D"), slot("cp-2:S"), slot("w-1:P"), slot("w-2:P")}, &two, "w-1,w-2 |  | "},
		{"a control plane in progress wins over a started worker", []rollout.Slot{slot("cp-1:I"), slot("w-1:I")}, &two, "cp-1 |  | "},
		{"a pending control plane waits for a started worker", []rollout.Slot{slot("cp-1:P"), slot("w-1:I"), slot("w-2:P")}, &two, "w-1 |  | "},

		// Machines the rollout no longer covers, and holds.
		{"gone", []rollout.Slot{slot("w-1:P", gone), slot("w-2:I", gone), slot("w-3:P")}, nil, "w-3 |  | w-1,w-2"},
		{"being deleted, not started", []rollout.Slot{slot("cp-1:P", deleting), slot("w-1:P", deleting), slot("w-2:P")}, nil, "w-2 |  | cp-1,w-1"},
		{"not provisioned, not started", []rollout.Slot{slot("w-1:P", unprovisioned), slot("w-2:H", unprovisioned), slot("w-3:P")}, nil, "w-3 |  | w-1,w-2"},
		{"a started machine being deleted finishes", []rollout.Slot{slot("w-1:I", deleting), slot("w-2:P")}, nil, "w-1 |  | "},
		{"held, not started", []rollout.Slot{slot("cp-1:P", held), slot("w-1:H", held), slot("w-2:P")}, nil, "w-2 | cp-1,w-1 | "},
		{"a started machine finishes, held or not", []rollout.Slot{slot("w-1:I", held), slot("w-2:P")}, nil, "w-1 |  | "},
		{"a held machine whose hold left goes on", []rollout.Slot{slot("w-1:H")}, nil, "w-1 |  | "},
		{"only held ones left", []rollout.Slot{slot("w-1:D"), slot("w-2:P", held)}, &two, " | w-2 | "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := choice(tc.slots, rollout.Next(tc.slots, tc.budget)); got != tc.want {
				t.Errorf("Next = %q, want %q (active | held | dropped)", got, tc.want)
			}
		})
	}
}

func TestNextSaysWhyItDrops(t *testing.T) {
	slots := []rollout.Slot{slot("w-1:P", gone), slot("w-2:P", deleting), slot("w-3:P", unprovisioned)}
	got := rollout.Next(slots, nil).Dropped
	want := []rollout.Drop{
		{Index: 0, Why: "the TalosMachine is gone"},
		{Index: 1, Why: "the TalosMachine is being deleted"},
		{Index: 2, Why: "the TalosMachine is no longer approved, addressed and provisioned"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Dropped = %+v, want %+v", got, want)
	}
}

func TestWorkerBudget(t *testing.T) {
	three, zero, pct, bad := intstr.FromInt32(3), intstr.FromInt32(0), intstr.FromString("34%"), intstr.FromString("many")
	for _, tc := range []struct {
		max     *intstr.IntOrString
		workers int
		want    int
	}{
		{nil, 10, 1}, {&three, 10, 3}, {&zero, 10, 1}, {&pct, 10, 3}, {&pct, 2, 1}, {&bad, 10, 1}, {&three, 0, 3},
	} {
		if got := rollout.WorkerBudget(tc.max, tc.workers); got != tc.want {
			t.Errorf("WorkerBudget(%v, %d) = %d, want %d", tc.max, tc.workers, got, tc.want)
		}
	}
}
