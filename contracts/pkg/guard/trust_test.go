package guard

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func TestAddressFixedOnceApproved(t *testing.T) {
	at := func(addr string) func(*ichorv1alpha1.TalosMachine) {
		return func(m *ichorv1alpha1.TalosMachine) { m.Spec.Address = addr }
	}
	pending := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, at("10.0.0.21"))
	expect(t, ValidateMachine(pending, machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, at("10.0.0.22")), MachineFacts{Cluster: cluster()}), nil)
	approved := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved, at("10.0.0.21"))
	expect(t, ValidateMachine(approved, machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved, at("10.0.0.11")), MachineFacts{Cluster: cluster()}),
		map[string][]string{"spec.address": {`"10.0.0.21" to "10.0.0.11"`, "`ichor node remove m1`", "approve it again at the new address"}})
	// Installed and then un-approved: still fixed.
	installed := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalRejected, at("10.0.0.21"))
	installed.Status.Installed = true
	if CheckAddressFixed(installed, machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalRejected, at("10.0.0.11"))) == nil {
		t.Error("the address of an installed machine changed")
	}
}

func TestDeletingMachineSpecFixed(t *testing.T) {
	old := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)
	if CheckDeletingUnchanged(old, machine(ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)) != nil {
		t.Error("a machine not being deleted is held by the deletion rule")
	}
	old.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	force := old.DeepCopy()
	force.Spec.ForceRemove = true
	if r := CheckDeletingUnchanged(old, force); r != nil {
		t.Errorf("forceRemove refused: %v", r)
	}
	moved := old.DeepCopy()
	moved.Spec.Address = "10.0.0.11"
	if r := CheckDeletingUnchanged(old, moved); r == nil {
		t.Error("a deleting machine's address changed")
	}
	back := force.DeepCopy()
	back.Spec.ForceRemove = false
	if r := CheckDeletingUnchanged(force, back); r == nil {
		t.Error("forceRemove was taken back during a removal")
	}
}

func TestTrustRequirement(t *testing.T) {
	trusted := func(fp string) func(*ichorv1alpha1.TalosMachine) {
		return func(m *ichorv1alpha1.TalosMachine) {
			m.Annotations = map[string]string{ichorv1alpha1.TrustMaintenanceFingerprintAnnotation: fp}
		}
	}
	plain := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending)
	a := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, trusted("a"))
	b := machine(ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, trusted("b"))
	for _, tc := range []struct {
		name   string
		old, m *ichorv1alpha1.TalosMachine
		want   bool
	}{
		{"set at create", nil, a, true},
		{"set", plain, a, true},
		{"changed", a, b, true},
		{"kept", a, a, false},
		{"removed", a, plain, false},
		{"absent", plain, plain, false},
	} {
		r := TrustRequirement(tc.old, tc.m)
		if (r != nil) != tc.want {
			t.Errorf("%s: got %+v, want a requirement: %v", tc.name, r, tc.want)
		}
		if r != nil && r.Permission.String() != "`update` on `talosmachines/trust`" {
			t.Errorf("%s: %s", tc.name, r.Permission)
		}
	}
}

func TestControlPlaneCountLowered(t *testing.T) {
	three := cluster()
	one := cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 1 })
	refusals := ValidateCluster(three, one, ClusterFacts{ApprovedControlPlanes: 3})
	expect(t, refusals, map[string][]string{"spec.controlPlane.count": {"from 3 to 1", "3 approved control planes", "`override`", "ichor node remove"}})
	if !refusals[0].Overridable {
		t.Error("the override verb must let it through")
	}
	expect(t, ValidateCluster(three, one, ClusterFacts{ApprovedControlPlanes: 1}), nil)
	expect(t, ValidateCluster(one, three, ClusterFacts{ApprovedControlPlanes: 3}), nil)
}

func TestDiscoveryLimits(t *testing.T) {
	with := func(interval time.Duration, subnets ...string) *ichorv1alpha1.TalosCluster {
		return cluster(func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.Discovery.Subnets = subnets
			if interval > 0 {
				c.Spec.Discovery.Interval = &metav1.Duration{Duration: interval}
			}
		})
	}
	expect(t, ValidateCluster(nil, with(30*time.Second), ClusterFacts{}), map[string][]string{"spec.discovery.interval": {"at least 1m0s"}})
	expect(t, ValidateCluster(nil, with(time.Minute, "10.0.0.0/20", "10.0.16.0/20"), ClusterFacts{}), nil)
	expect(t, ValidateCluster(nil, with(0, "10.0.0.0/19"), ClusterFacts{}), map[string][]string{"spec.discovery.subnets": {"more than 4096", "/20"}})
	expect(t, ValidateCluster(nil, with(0, "fd00::/64"), ClusterFacts{}), map[string][]string{"spec.discovery.subnets": {"/116"}})
	expect(t, ValidateCluster(nil, with(0, "10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/24"), ClusterFacts{}),
		map[string][]string{"spec.discovery.subnets": {"8448 addresses in all", "at most 8192"}})
	// A cluster admitted before the rule keeps its discovery until it is edited.
	old := with(30*time.Second, "10.0.0.0/16")
	edited := old.DeepCopy()
	edited.Labels = map[string]string{"team": "a"}
	expect(t, ValidateCluster(old, edited, ClusterFacts{}), nil)
}
