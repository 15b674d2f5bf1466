// Package recovery is what the full-loss recovery leaves on a recovered
// cluster and how it is lifted: every TalosMachine of the cluster held
// (ichor.maesh.dev/hold-apply=ichor-restore) until a person confirms, through
// `ichor restore --confirm` or the console's Overview. The CLI's recovery,
// its confirmation and ichor-ui share it.
package recovery

import (
	"context"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// HoldValue is the value of the hold-apply annotation the recovery sets; a
// confirmation lifts only holds of this value (a hold a person set is theirs).
const HoldValue = "ichor-restore"

// SetHolds puts the recovery's hold on every TalosMachine of cluster that
// has none, and returns how many are held by it.
func SetHolds(ctx context.Context, c client.Client, namespace, cluster string) (int, error) {
	list := &ichorv1alpha1.TalosMachineList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return 0, err
	}

	n := 0

	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName != cluster {
			continue
		}

		if _, ok := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]; !ok {
			before := m.DeepCopy()
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}

			m.Annotations[ichorv1alpha1.HoldApplyAnnotation] = HoldValue

			if err := c.Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
				return n, err
			}
		}

		if m.Annotations[ichorv1alpha1.HoldApplyAnnotation] == HoldValue {
			n++
		}
	}

	return n, nil
}

// Held is a TalosMachine the recovery holds, with what the controller
// reported about it.
type Held struct {
	Name, Role, Address string
	// Drift are the paths the node differs from the render in.
	Drift []string
	// Reason is its Ready condition's reason.
	Reason string
}

// HoldOf is m as the recovery holds it; false when it holds m not.
func HoldOf(m *ichorv1alpha1.TalosMachine) (Held, bool) {
	if m.Annotations[ichorv1alpha1.HoldApplyAnnotation] != HoldValue {
		return Held{}, false
	}

	h := Held{Name: m.Name, Role: m.Spec.Role, Address: m.Spec.Address, Drift: m.Status.DriftPaths}
	for _, cond := range m.Status.Conditions {
		if cond.Type == ichorv1alpha1.ReadyCondition {
			h.Reason = cond.Reason
		}
	}

	return h, true
}

// Holds lists the TalosMachines of cluster the recovery holds, by name.
func Holds(ctx context.Context, c client.Reader, namespace, cluster string) ([]Held, error) {
	list := &ichorv1alpha1.TalosMachineList{}
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}

	var out []Held

	for i := range list.Items {
		if h, ok := HoldOf(&list.Items[i]); ok && list.Items[i].Spec.ClusterName == cluster {
			out = append(out, h)
		}
	}

	slices.SortFunc(out, func(a, b Held) int { return strings.Compare(a.Name, b.Name) })

	return out, nil
}

// ReleaseHolds lifts the recovery's hold from the named machines (a hold of
// another value stays).
func ReleaseHolds(ctx context.Context, c client.Client, namespace string, names []string) error {
	for _, name := range names {
		m := &ichorv1alpha1.TalosMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m); err != nil {
			return err
		}

		if m.Annotations[ichorv1alpha1.HoldApplyAnnotation] != HoldValue {
			continue
		}

		before := m.DeepCopy()
		delete(m.Annotations, ichorv1alpha1.HoldApplyAnnotation)

		if err := c.Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
	}

	return nil
}
