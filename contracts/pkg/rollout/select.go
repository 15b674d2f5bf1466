package rollout

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Slot is one entry of a running config operation's status.machines, with
// the TalosMachine it names as it is now (nil when it is gone). The
// controller's rollout chooses with Next which slots it works on in a pass.
type Slot struct {
	// Progress is the entry: its name, role and phase.
	Progress ichorv1alpha1.MachineProgress
	// Machine is the TalosMachine, nil when it no longer exists.
	Machine *ichorv1alpha1.TalosMachine
}

// Drop is a slot the rollout no longer covers, and why.
type Drop struct {
	// Index is the slot's index.
	Index int
	// Why is the machine's message.
	Why string
}

// Choice is what a pass of the rollout does: indexes into the slots.
type Choice struct {
	// Active are the slots to work on now, in order.
	Active []int
	// Held are the slots that wait for their hold annotation to leave.
	Held []int
	// Dropped are the slots the operation no longer covers: their machine
	// is gone, or it has not started and is no longer Configured (being
	// deleted, no longer provisioned).
	Dropped []Drop
}

// Next chooses the machines a config rollout works on in this pass
// (architecture, "Configuration reconcile"); slots are in the operation's
// order, control planes first. Only Pending, InProgress and Held slots count.
//
//   - A control plane goes alone: one in progress is the only active
//     machine; a pending one starts only when nothing else is in progress,
//     and the workers after it wait for it.
//   - Workers in progress all go on; pending ones join, in order, while the
//     active workers are fewer than WorkerBudget.
//   - A started machine finishes, held or not, unless its TalosMachine is
//     gone. One that has not started is dropped when it is no longer
//     Configured, and held while it carries a hold annotation.
func Next(slots []Slot, maxUnavailable *intstr.IntOrString) Choice {
	var (
		ch       Choice
		cp       = -1
		workers  []int
		pending  []int
		nWorkers int
	)

	for i := range slots {
		p, m := slots[i].Progress, slots[i].Machine
		if p.Role != ichorv1alpha1.RoleControlPlane {
			nWorkers++
		}
		if p.Phase != ichorv1alpha1.MachinePending && p.Phase != ichorv1alpha1.MachineInProgress && p.Phase != ichorv1alpha1.MachineHeld {
			continue
		}
		switch {
		case m == nil:
			ch.Dropped = append(ch.Dropped, Drop{Index: i, Why: "the TalosMachine is gone"})
		case p.Phase == ichorv1alpha1.MachineInProgress && p.Role == ichorv1alpha1.RoleControlPlane:
			if cp < 0 {
				cp = i
			}
		case p.Phase == ichorv1alpha1.MachineInProgress:
			workers = append(workers, i)
		case m.DeletionTimestamp != nil:
			ch.Dropped = append(ch.Dropped, Drop{Index: i, Why: "the TalosMachine is being deleted"})
		case !Configured(m):
			ch.Dropped = append(ch.Dropped, Drop{Index: i, Why: "the TalosMachine is no longer approved, addressed and provisioned"})
		case HoldOf(m) != "":
			ch.Held = append(ch.Held, i)
		default:
			pending = append(pending, i)
		}
	}

	if cp >= 0 {
		ch.Active = []int{cp}
		return ch
	}

	ch.Active = workers
	budget := WorkerBudget(maxUnavailable, nWorkers)
	for _, i := range pending {
		if slots[i].Progress.Role == ichorv1alpha1.RoleControlPlane {
			if len(ch.Active) == 0 {
				ch.Active = []int{i}
			}
			break
		}
		if len(ch.Active) >= budget {
			break
		}
		ch.Active = append(ch.Active, i)
	}
	return ch
}

// WorkerBudget is spec.maxUnavailable resolved against the operation's
// number of workers (a percentage rounds down), at least 1; nil is 1.
func WorkerBudget(maxUnavailable *intstr.IntOrString, workers int) int {
	if maxUnavailable == nil {
		return 1
	}
	v, err := intstr.GetScaledValueFromIntOrPercent(maxUnavailable, workers, false)
	if err != nil || v < 1 {
		return 1
	}
	return v
}

// Order sorts ms in the order a rollout (config, talos, kubernetes) takes
// them, the order the controller records in status.machines and Next
// follows: control planes first, then workers; within each, the machine on
// the controller's own Node (ownNode, the downward API's spec.nodeName;
// compared without case) last, so the leading controller moves to the other
// replica once, at the end of its role; then by the value of the label
// orderBy (spec.orderBy; compared as strings, a machine without the label
// first), then by name.
func Order(ms []ichorv1alpha1.TalosMachine, orderBy, ownNode string) {
	isOwn := func(m *ichorv1alpha1.TalosMachine) int {
		if ownNode != "" && strings.EqualFold(m.Status.NodeName, ownNode) {
			return 1
		}
		return 0
	}
	slices.SortFunc(ms, func(a, b ichorv1alpha1.TalosMachine) int {
		return cmp.Or(
			cmp.Compare(roleOrder(a.Spec.Role), roleOrder(b.Spec.Role)),
			cmp.Compare(isOwn(&a), isOwn(&b)),
			cmp.Compare(a.Labels[orderBy], b.Labels[orderBy]),
			cmp.Compare(a.Name, b.Name))
	})
}
