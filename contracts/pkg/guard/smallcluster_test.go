package guard

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// TestSmallClusterGuards checks the architecture's small-cluster rules
// ("Topology"): the downtime consent of a single node, the backup warning
// and the capacity check of three nodes without workers.
func TestSmallClusterGuards(t *testing.T) {
	now := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	one := ApprovedCounts{ControlPlanes: 1}
	three := ApprovedCounts{ControlPlanes: 3}
	node := func(action string, accept string) *ichorv1alpha1.TalosOperation {
		return op(ichorv1alpha1.OperationNode, func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "m1", Action: action}
			if accept != "" {
				o.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: accept}
			}
		})
	}

	t.Run("operation downtime", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			op      *ichorv1alpha1.TalosOperation
			n       ApprovedCounts
			refused bool
		}{
			{"reboot of the only node without consent", node(ichorv1alpha1.NodeActionReboot, ""), one, true},
			{"shutdown of the only node without consent", node(ichorv1alpha1.NodeActionShutdown, ""), one, true},
			{"consent other than true", node(ichorv1alpha1.NodeActionReboot, "yes"), one, true},
			{"reboot of the only node with consent", node(ichorv1alpha1.NodeActionReboot, "true"), one, false},
			{"a single worker and no control plane counts as one node", node(ichorv1alpha1.NodeActionReboot, ""), ApprovedCounts{Workers: 1}, true},
			{"reboot on three nodes", node(ichorv1alpha1.NodeActionReboot, ""), three, false},
			{"one control plane and a worker", node(ichorv1alpha1.NodeActionReboot, ""), ApprovedCounts{ControlPlanes: 1, Workers: 1}, false},
			{"a cluster shutdown is planned downtime", op(ichorv1alpha1.OperationShutdown), one, false},
			{"a config operation", op(ichorv1alpha1.OperationConfig), one, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := CheckOperationDowntime(tc.op, tc.n)
				if (r != nil) != tc.refused {
					t.Fatalf("refused = %v, want %v (%v)", r != nil, tc.refused, r)
				}
				if r == nil {
					return
				}
				for _, w := range []string{"single node", "downtime", ichorv1alpha1.AcceptDowntimeAnnotation, "ichor node " + tc.op.Spec.Node.Action} {
					if !strings.Contains(r.Error(), w) {
						t.Errorf("refusal %q does not say %q", r.Error(), w)
					}
				}
				if r.Overridable {
					t.Error("the consent is the person's, not the override verb's")
				}
			})
		}
	})

	t.Run("talos upgrade downtime", func(t *testing.T) {
		old := cluster()
		upgraded := func(accept string) *ichorv1alpha1.TalosCluster {
			return cluster(func(c *ichorv1alpha1.TalosCluster) {
				c.Spec.TalosVersion = "v1.14.2"
				if accept != "" {
					c.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: accept}
				}
			})
		}
		for _, tc := range []struct {
			name    string
			old, c  *ichorv1alpha1.TalosCluster
			n       ApprovedCounts
			refused bool
		}{
			{"single node without consent", old, upgraded(""), one, true},
			{"consent to another version does not carry over", old, upgraded("v1.14.1"), one, true},
			{"consent to this version", old, upgraded("v1.14.2"), one, false},
			{"three nodes need no consent", old, upgraded(""), three, false},
			{"no version change", old, cluster(), one, false},
			{"create", nil, upgraded(""), one, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := CheckClusterDowntime(tc.old, tc.c, tc.n)
				if (r != nil) != tc.refused {
					t.Fatalf("refused = %v, want %v (%v)", r != nil, tc.refused, r)
				}
				if r != nil && (!strings.Contains(r.Error(), `"v1.14.2"`) || r.Field != "spec.talosVersion") {
					t.Errorf("refusal does not name the version to consent to: %v", r)
				}
			})
		}
		// ValidateCluster, the webhook's check, includes it.
		facts := ClusterFacts{ApprovedControlPlanes: 1}
		expect(t, ValidateCluster(old, upgraded(""), facts), map[string][]string{"spec.talosVersion": {"single node"}})
		expect(t, ValidateCluster(old, upgraded("v1.14.2"), facts), nil)
	})

	t.Run("backup warning", func(t *testing.T) {
		backup := func(cluster string, success *time.Time) ichorv1alpha1.TalosEtcdBackup {
			b := ichorv1alpha1.TalosEtcdBackup{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b-" + cluster},
				Spec:       ichorv1alpha1.TalosEtcdBackupSpec{ClusterName: cluster},
			}
			if success != nil {
				b.Status.LastSuccessfulTime = &metav1.Time{Time: *success}
			}
			return b
		}
		recent, old := now.Add(-time.Hour), now.Add(-MaxBackupAge-time.Minute)
		for _, tc := range []struct {
			name    string
			backups []ichorv1alpha1.TalosEtcdBackup
			want    string
		}{
			{"none configured", nil, "no etcd backup configured"},
			{"only another cluster's", []ichorv1alpha1.TalosEtcdBackup{backup("other", &recent)}, "no etcd backup configured"},
			{"configured, never succeeded", []ichorv1alpha1.TalosEtcdBackup{backup("prod", nil)}, "no verified etcd snapshot yet"},
			{"too old", []ichorv1alpha1.TalosEtcdBackup{backup("prod", &old)}, "more than 48h0m0s ago"},
			{"recent", []ichorv1alpha1.TalosEtcdBackup{backup("prod", &old), backup("prod", &recent)}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := BackupWarnings("prod", tc.backups, now)
				if tc.want == "" {
					if len(got) != 0 {
						t.Fatalf("want no warning, got %v", got)
					}
					return
				}
				if len(got) != 1 || !strings.Contains(got[0], tc.want) {
					t.Fatalf("want a warning saying %q, got %v", tc.want, got)
				}
			})
		}
		// A warning only before a disruptive operation, and never a refusal.
		if w := OperationWarnings(op(ichorv1alpha1.OperationConfig), OperationFacts{}, now); len(w) != 0 {
			t.Errorf("a config operation is not disruptive: %v", w)
		}
		if w := OperationWarnings(node(ichorv1alpha1.NodeActionReboot, ""), OperationFacts{}, now); len(w) != 1 {
			t.Errorf("a reboot without backups: want one warning, got %v", w)
		}
		if w := OperationWarnings(node(ichorv1alpha1.NodeActionReboot, ""), OperationFacts{BackupsUnknown: true}, now); len(w) != 0 {
			t.Errorf("backups the reader may not list are not reported missing: %v", w)
		}
	})

	t.Run("three-node capacity", func(t *testing.T) {
		const gib = int64(1) << 30
		load := func(name string, alloc, requested, movable int64) NodeLoad {
			return NodeLoad{Name: name, Schedulable: true,
				AllocatableMilliCPU: alloc * 1000, AllocatableMemory: alloc * gib,
				RequestedMilliCPU: requested * 1000, RequestedMemory: requested * gib,
				MovableMilliCPU: movable * 1000, MovableMemory: movable * gib}
		}
		for _, tc := range []struct {
			name    string
			loads   []NodeLoad
			refused bool
		}{
			{"fits on the two others", []NodeLoad{load("a", 4, 3, 2), load("b", 4, 3, 0), load("c", 4, 3, 0)}, false},
			{"does not fit", []NodeLoad{load("a", 4, 4, 3), load("b", 4, 3, 0), load("c", 4, 3, 0)}, true},
			{"a cordoned node offers nothing", []NodeLoad{load("a", 4, 2, 2), load("b", 4, 3, 0),
				func() NodeLoad { l := load("c", 4, 0, 0); l.Schedulable = false; return l }()}, true},
			{"an unknown node is not checked", []NodeLoad{load("b", 4, 4, 0)}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := CheckDrainCapacity(tc.loads, "a")
				if (r != nil) != tc.refused {
					t.Fatalf("refused = %v, want %v (%v)", r != nil, tc.refused, r)
				}
				if r != nil && (!r.Overridable || !strings.Contains(r.Error(), "Pending")) {
					t.Errorf("refusal: %+v", r)
				}
			})
		}
		if !CapacityChecked(three) || CapacityChecked(ApprovedCounts{ControlPlanes: 3, Workers: 1}) || CapacityChecked(one) {
			t.Error("the capacity check is for three control planes and no worker")
		}
		m := machine(ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) { m.Status.NodeName = "a" })
		full := []NodeLoad{load("a", 4, 4, 3), load("b", 4, 4, 0), load("c", 4, 4, 0)}
		recent := now.Add(-time.Hour)
		backups := []ichorv1alpha1.TalosEtcdBackup{{Spec: ichorv1alpha1.TalosEtcdBackupSpec{ClusterName: "prod"},
			Status: ichorv1alpha1.TalosEtcdBackupStatus{LastSuccessfulTime: &metav1.Time{Time: recent}}}}
		facts := OperationFacts{Machine: m, Approved: three, Capacity: full, Backups: backups}
		if w := OperationWarnings(node(ichorv1alpha1.NodeActionShutdown, ""), facts, now); len(w) != 1 || !strings.Contains(w[0], "node a") {
			t.Errorf("shutting down a full node of three: want the capacity warning, got %v", w)
		}
		if w := OperationWarnings(node(ichorv1alpha1.NodeActionReboot, ""), facts, now); len(w) != 1 {
			t.Errorf("a reboot drains too: want the capacity warning, got %v", w)
		}
		facts.Approved = ApprovedCounts{ControlPlanes: 3, Workers: 2}
		if w := OperationWarnings(node(ichorv1alpha1.NodeActionShutdown, ""), facts, now); len(w) != 0 {
			t.Errorf("with workers the check is not made: %v", w)
		}
	})
}

// NodeLoadsOf counts every unfinished pod's requests on its Node, and only
// what a drain evicts as movable: DaemonSet and mirror pods stay; a cordoned
// Node offers nothing to CheckDrainCapacity.
func TestNodeLoadsOf(t *testing.T) {
	node := func(name string, cordoned bool) corev1.Node {
		return corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}},
		}
	}
	pod := func(name, on, cpu string, mutate ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: on, Containers: []corev1.Container{{
				Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
			}}},
		}
		for _, m := range mutate {
			m(&p)
		}
		return p
	}
	daemon := func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent"}} }
	mirror := func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }
	done := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }

	loads := NodeLoadsOf(
		[]corev1.Node{node("a", false), node("b", false), node("c", true)},
		[]corev1.Pod{
			pod("app", "a", "1500m"), pod("agent", "a", "100m", daemon), pod("apiserver", "a", "200m", mirror), pod("job", "a", "3", done),
			pod("big", "b", "3500m"), pod("nowhere", "", "1"),
		},
	)
	if len(loads) != 3 {
		t.Fatalf("loads %+v", loads)
	}
	a, b, c := loads[0], loads[1], loads[2]
	if a.RequestedMilliCPU != 1800 || a.MovableMilliCPU != 1500 || a.AllocatableMilliCPU != 4000 || a.AllocatableMemory != 8<<30 || !a.Schedulable {
		t.Errorf("node a: %+v", a)
	}
	if b.RequestedMilliCPU != 3500 || c.Schedulable {
		t.Errorf("nodes b, c: %+v %+v", b, c)
	}
	// a's 1500m movable: b has 500m free and c is cordoned.
	if r := CheckDrainCapacity(loads, "a"); r == nil || !r.Overridable || !strings.Contains(r.Rule, "1500m CPU") || !strings.Contains(r.Rule, "500m CPU") {
		t.Errorf("draining a: %+v", r)
	}
	loads[2].Schedulable = true
	if r := CheckDrainCapacity(loads, "a"); r != nil {
		t.Errorf("draining a with c uncordoned (4500m free): %v", r)
	}
}
