package removal_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/removal"
)

func cluster(count int32, schedulable bool) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns"},
		Spec:       ichorv1alpha1.TalosClusterSpec{ControlPlane: ichorv1alpha1.ControlPlaneTopology{Count: count, Schedulable: &schedulable}},
	}
}

// machine is a machine of cluster prod in state with role; sent says the
// controller has sent it its configuration.
func machine(state, role string, sent bool) *ichorv1alpha1.TalosMachine {
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: "ns"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Role: role, Approval: ichorv1alpha1.MachineApproval{State: state},
		},
		Status: ichorv1alpha1.TalosMachineStatus{NodeName: "node-1"},
	}
	if sent {
		now := metav1.Now()
		m.Status.ConfigSentAt = &now
		m.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: now}}
	}
	return m
}

const (
	approved = ichorv1alpha1.ApprovalApproved
	cp       = ichorv1alpha1.RoleControlPlane
	worker   = ichorv1alpha1.RoleWorker
)

var (
	drained  = "the node is drained (evictions respect PodDisruptionBudgets)"
	poweroff = "Talos resets STATE and EPHEMERAL and powers off; the machine comes back as a pending machine when it is powered on"
	reboot   = "Talos resets STATE and EPHEMERAL and reboots into maintenance mode; the machine comes back as a pending machine"
	kept     = "the installed Talos and the user disks are not touched"
	nodeGone = "Node node-1 is deleted from Kubernetes"
	forced   = "no drain, no reset: the disks keep their data, and STATE still holds the cluster's configuration; wipe the node before using it again"
	forcedCP = "no drain, no reset: the disks keep their data; Ichor removes the etcd member; STATE still holds the cluster's configuration, wipe the node before using it again"

	fullWorker = []string{"Evacuating", "Draining", "Resetting", "DeletingNode", "Done"}
	fullCP     = []string{"Evacuating", "Draining", "LeavingEtcd", "Resetting", "DeletingNode", "Done"}
)

func TestPlan(t *testing.T) {
	tests := []struct {
		name    string
		m       *ichorv1alpha1.TalosMachine
		facts   guard.MachineFacts
		opts    removal.Options
		allowed bool
		// refusal is a part of the one refusal's rule, when refused.
		refusal string
		effects []string
		// phases are the steps' leading phase names, in order (nil: not checked).
		phases []string
		// step is a part of one of the steps.
		step string
	}{
		{
			name: "a worker among three", m: machine(approved, worker, true),
			facts:   guard.MachineFacts{Cluster: cluster(3, false), OtherApprovedControlPlanes: 3, OtherApprovedWorkers: 2},
			allowed: true,
			effects: []string{"workers: 3 → 2", drained, poweroff, kept, nodeGone},
			phases:  fullWorker, step: "powers off",
		},
		{
			name: "a worker with reboot", m: machine(approved, worker, true),
			facts:   guard.MachineFacts{Cluster: cluster(1, false), OtherApprovedControlPlanes: 1, OtherApprovedWorkers: 1},
			opts:    removal.Options{Reboot: true},
			allowed: true,
			effects: []string{"workers: 2 → 1", drained, reboot, kept, nodeGone},
			phases:  fullWorker, step: "reboots into maintenance mode",
		},
		{
			name: "the last worker, control planes unschedulable", m: machine(approved, worker, true),
			facts:   guard.MachineFacts{Cluster: cluster(1, false), OtherApprovedControlPlanes: 1},
			refusal: "last worker",
			effects: []string{"workers: 1 → 0; the control planes are unschedulable, so nothing could run workloads", drained, poweroff, kept, nodeGone},
			phases:  fullWorker,
		},
		{
			name: "the last worker, control planes schedulable", m: machine(approved, worker, true),
			facts:   guard.MachineFacts{Cluster: cluster(1, true), OtherApprovedControlPlanes: 1},
			allowed: true,
			effects: []string{"workers: 1 → 0; workloads then run on the control planes only", drained, poweroff, kept, nodeGone},
			phases:  fullWorker,
		},
		{
			name: "3 → 2 control planes with 3 declared", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{Cluster: cluster(3, false), OtherApprovedControlPlanes: 2, OtherApprovedWorkers: 2},
			refusal: "would leave 2 control planes, fewer than the 3",
			effects: []string{
				"control planes: 3 → 2 (the cluster declares 3)",
				"etcd: 3 members → 2, quorum 2, tolerates no failure until a control plane is added",
				drained, poweroff, kept, nodeGone,
			},
			phases: fullCP, step: "the node leaves etcd itself during its graceful reset",
		},
		{
			name: "4 → 3 control planes while replacing", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{Cluster: cluster(3, false), OtherApprovedControlPlanes: 3},
			allowed: true,
			effects: []string{
				"control planes: 4 → 3 (the cluster declares 3)",
				"etcd: 4 members → 3, quorum 2, tolerates 1 failure",
				drained, poweroff, kept, nodeGone,
			},
			phases: fullCP,
		},
		{
			name: "6 → 5 control planes", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{Cluster: cluster(5, false), OtherApprovedControlPlanes: 5},
			allowed: true,
			effects: []string{
				"control planes: 6 → 5 (the cluster declares 5)",
				"etcd: 6 members → 5, quorum 3, tolerates 2 failures",
				drained, poweroff, kept, nodeGone,
			},
			phases: fullCP,
		},
		{
			name: "2 → 1 control planes with 1 declared", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{Cluster: cluster(1, true), OtherApprovedControlPlanes: 1},
			allowed: true,
			effects: []string{
				"control planes: 2 → 1 (the cluster declares 1)",
				"etcd: 2 members → 1, quorum 1, tolerates no failure until a control plane is added",
				drained, poweroff, kept, nodeGone,
			},
			phases: fullCP,
		},
		{
			name: "the last control plane", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{Cluster: cluster(1, false), OtherApprovedWorkers: 1},
			refusal: "last control plane",
			effects: []string{
				"control planes: 1 → 0 (the cluster declares 1)",
				"etcd: 1 member → 0: etcd and the cluster's state (Kubernetes objects) are destroyed",
				drained, poweroff, kept, nodeGone,
			},
			phases: fullCP,
		},
		{
			name: "a forced control plane", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{Cluster: cluster(3, false), OtherApprovedControlPlanes: 3},
			opts:    removal.Options{Force: true},
			allowed: true,
			effects: []string{
				"control planes: 4 → 3 (the cluster declares 3)",
				"etcd: 4 members → 3, quorum 2, tolerates 1 failure",
				forcedCP, nodeGone,
			},
			phases: fullCP, step: "removes this member through that control plane",
		},
		{
			name: "a forced worker with reboot", m: machine(approved, worker, true),
			facts:   guard.MachineFacts{Cluster: cluster(1, true), OtherApprovedControlPlanes: 1, OtherApprovedWorkers: 4},
			opts:    removal.Options{Force: true, Reboot: true},
			allowed: true,
			effects: []string{"workers: 5 → 4", forced, "reboot has no effect with force: no reset is sent", nodeGone},
			phases:  fullWorker, step: "Resetting: skipped (force)",
		},
		{
			name: "a pending machine", m: machine(ichorv1alpha1.ApprovalPending, "", false),
			facts:   guard.MachineFacts{Cluster: cluster(1, false), OtherApprovedControlPlanes: 1},
			allowed: true,
			effects: []string{
				"no change to the cluster: the machine is pending, not a member",
				"a node that is still in maintenance mode is listed again as pending the next time discovery finds it",
			},
			step: "nothing is sent to the node",
		},
		{
			name: "an approved worker that was sent nothing", m: machine(approved, worker, false),
			facts:   guard.MachineFacts{Cluster: cluster(1, false), OtherApprovedControlPlanes: 1, OtherApprovedWorkers: 1},
			allowed: true,
			effects: []string{"workers: 2 → 1", "the node is not touched: it never received the cluster's configuration"},
			step:    "Nothing has been sent to the node yet",
		},
		{
			name: "an approved control plane that never joined", m: machine(approved, cp, false),
			facts:   guard.MachineFacts{Cluster: cluster(1, false), OtherApprovedControlPlanes: 1},
			allowed: true,
			effects: []string{
				"control planes: 2 → 1 (the cluster declares 1)",
				"etcd: no change (this control plane never joined)",
				"the node is not touched: it never received the cluster's configuration",
			},
		},
		{
			name: "a cluster that is gone", m: machine(approved, cp, true),
			facts:   guard.MachineFacts{},
			allowed: true,
			effects: []string{`TalosCluster "prod" does not exist: no cluster counts change`, drained, poweroff, kept, nodeGone},
			phases:  fullCP,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := removal.Plan(tt.m, tt.facts, tt.opts)
			if p.Allowed != tt.allowed {
				t.Errorf("allowed = %v, want %v (refusals %v)", p.Allowed, tt.allowed, p.Refusals)
			}
			switch {
			case tt.allowed && len(p.Refusals) != 0:
				t.Errorf("allowed with refusals: %v", p.Refusals)
			case !tt.allowed && (len(p.Refusals) != 1 || !strings.Contains(p.Refusals[0].Rule, tt.refusal) || p.Refusals[0].WayOut == ""):
				t.Errorf("refusals = %v, want one naming %q with a way out", p.Refusals, tt.refusal)
			}
			if !slices.Equal(p.Effects, tt.effects) {
				t.Errorf("effects:\n got %q\nwant %q", p.Effects, tt.effects)
			}
			if tt.phases != nil {
				var got []string
				for _, s := range p.Steps {
					phase, _, _ := strings.Cut(s, ":")
					got = append(got, phase)
				}
				if !slices.Equal(got, tt.phases) {
					t.Errorf("phases = %q, want %q\nsteps: %q", got, tt.phases, p.Steps)
				}
			}
			if tt.step != "" && !slices.ContainsFunc(p.Steps, func(s string) bool { return strings.Contains(s, tt.step) }) {
				t.Errorf("no step says %q: %q", tt.step, p.Steps)
			}
		})
	}
}

// A removal already under way is not allowed again, and says its phase.
func TestPlanBeingRemoved(t *testing.T) {
	m := machine(approved, worker, true)
	now := metav1.Now()
	m.DeletionTimestamp = &now
	m.Status.Removal = &ichorv1alpha1.MachineRemoval{Phase: ichorv1alpha1.RemovalDraining}
	p := removal.Plan(m, guard.MachineFacts{Cluster: cluster(1, true), OtherApprovedControlPlanes: 1}, removal.Options{})
	if p.Allowed || len(p.Refusals) != 1 || !strings.Contains(p.Refusals[0].Rule, "already being removed (phase Draining)") {
		t.Fatalf("a machine being removed: %+v", p)
	}
}

// Refusals is the guard's deletion check with the allow-delete annotation set
// by the removal itself, and it does not change the machine it is given.
func TestRefusalsSetsTheAnnotationOnACopy(t *testing.T) {
	m := machine(approved, worker, true)
	facts := guard.MachineFacts{Cluster: cluster(1, true), OtherApprovedControlPlanes: 1, OtherApprovedWorkers: 1}
	if got := guard.ValidateMachineDelete(m, facts); len(got) != 1 || !strings.HasPrefix(got[0].Field, "metadata.annotations") {
		t.Fatalf("without the annotation the guard should refuse on it alone: %v", got)
	}
	if got := removal.Refusals(m, facts); len(got) != 0 {
		t.Fatalf("removal.Refusals: %v, want none", got)
	}
	if m.Annotations != nil {
		t.Fatalf("Refusals changed the machine: %v", m.Annotations)
	}
}
