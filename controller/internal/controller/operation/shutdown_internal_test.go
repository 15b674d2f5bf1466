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
