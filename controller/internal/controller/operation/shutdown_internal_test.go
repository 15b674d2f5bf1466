package operation

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Rule: a shutdown takes the workers first, then the control planes, the one
// whose Node is the controller's own last; by name within each.
func TestShutdownOrder(t *testing.T) {
	m := func(name, role, node string) ichorv1alpha1.TalosMachine {
		return ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       ichorv1alpha1.TalosMachineSpec{Role: role},
			Status:     ichorv1alpha1.TalosMachineStatus{NodeName: node},
		}
	}
	cp, w := ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker
	all := []ichorv1alpha1.TalosMachine{
		m("cp-1", cp, "talos-a"), m("w-2", w, "talos-w2"), m("cp-2", cp, "talos-b"), m("w-1", w, "talos-w1"), m("cp-3", cp, "talos-c"),
	}

	for own, want := range map[string][]string{
		"":         {"w-1", "w-2", "cp-1", "cp-2", "cp-3"},
		"TALOS-A":  {"w-1", "w-2", "cp-2", "cp-3", "cp-1"},
		"talos-b":  {"w-1", "w-2", "cp-1", "cp-3", "cp-2"},
		"talos-w1": {"w-1", "w-2", "cp-1", "cp-2", "cp-3"}, // a worker is never "last": the workers go first anyway
		"other":    {"w-1", "w-2", "cp-1", "cp-2", "cp-3"},
	} {
		ms := slices.Clone(all)
		shutdownOrder(ms, own)

		got := make([]string, 0, len(ms))
		for _, x := range ms {
			got = append(got, x.Name)
		}

		if !slices.Equal(got, want) {
			t.Errorf("own node %q: %v, want %v", own, got, want)
		}
	}
}

// Rule: a rollout (config, talos, kubernetes) takes the control planes first,
// then the workers; within each the machine on the controller's own Node
// last, then by the orderBy label's value, then by name.
func TestRolloutOrder(t *testing.T) {
	m := func(name, role, node, zone string) ichorv1alpha1.TalosMachine {
		return ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": zone}},
			Spec:       ichorv1alpha1.TalosMachineSpec{Role: role},
			Status:     ichorv1alpha1.TalosMachineStatus{NodeName: node},
		}
	}
	cp, w := ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker
	all := []ichorv1alpha1.TalosMachine{
		m("w-2", w, "talos-w2", "a"), m("cp-1", cp, "talos-a", "b"), m("w-1", w, "talos-w1", "b"),
		m("cp-3", cp, "talos-c", "a"), m("cp-2", cp, "talos-b", "a"),
	}

	for _, tc := range []struct {
		own, orderBy string
		want         []string
	}{
		{"", "", []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}},
		{"", "zone", []string{"cp-2", "cp-3", "cp-1", "w-2", "w-1"}},
		{"TALOS-A", "", []string{"cp-2", "cp-3", "cp-1", "w-1", "w-2"}},
		{"talos-b", "zone", []string{"cp-3", "cp-1", "cp-2", "w-2", "w-1"}},
		{"talos-w1", "", []string{"cp-1", "cp-2", "cp-3", "w-2", "w-1"}},
		{"other", "", []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}},
	} {
		ms := slices.Clone(all)
		rolloutOrder(ms, tc.orderBy, tc.own)

		got := make([]string, 0, len(ms))
		for _, x := range ms {
			got = append(got, x.Name)
		}

		if !slices.Equal(got, tc.want) {
			t.Errorf("own node %q, orderBy %q: %v, want %v", tc.own, tc.orderBy, got, tc.want)
		}
	}
}
