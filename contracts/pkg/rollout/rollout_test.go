package rollout_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
)

func cond(t string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Test"}
}

// machine is a configured machine of cluster prod with conds set True.
func machine(name, role string, conds ...string) ichorv1alpha1.TalosMachine {
	m := ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Role: role, Address: "10.5.0.2",
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved},
		},
	}
	m.Status.Conditions = append(m.Status.Conditions, cond(ichorv1alpha1.ProvisionedCondition))
	for _, c := range conds {
		m.Status.Conditions = append(m.Status.Conditions, cond(c))
	}
	return m
}

func TestWaiting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       func() ichorv1alpha1.TalosMachine
		want    []string
		waiting bool
	}{
		{"nothing", func() ichorv1alpha1.TalosMachine { return machine("a", "worker") }, nil, false},
		{"reboot", func() ichorv1alpha1.TalosMachine {
			m := machine("a", "worker", ichorv1alpha1.RebootRequiredCondition)
			m.Status.RebootRequiredPaths = []string{"machine.install.disk"}
			return m
		}, []string{rollout.KindReboot}, true},
		{"kube-apiserver restart", func() ichorv1alpha1.TalosMachine {
			return machine("a", "controlplane", ichorv1alpha1.APIServerRestartRequiredCondition)
		}, []string{rollout.KindAPIServerRestart}, true},
		{"reboot wins over the restart", func() ichorv1alpha1.TalosMachine {
			return machine("a", "controlplane", ichorv1alpha1.APIServerRestartRequiredCondition, ichorv1alpha1.RebootRequiredCondition)
		}, []string{rollout.KindReboot}, true},
		{"paths without their condition", func() ichorv1alpha1.TalosMachine {
			m := machine("a", "worker")
			m.Status.RebootRequiredPaths = []string{"machine.kernel.args"}
			return m
		}, []string{rollout.KindReboot}, true},
		{"drift by condition", func() ichorv1alpha1.TalosMachine {
			return machine("a", "worker", ichorv1alpha1.DriftedCondition)
		}, []string{rollout.KindDrift}, true},
		{"drift by paths, with a reboot", func() ichorv1alpha1.TalosMachine {
			m := machine("a", "worker", ichorv1alpha1.RebootRequiredCondition)
			m.Status.DriftPaths = []string{"machine.network.hostname"}
			return m
		}, []string{rollout.KindReboot, rollout.KindDrift}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m()
			w, ok := rollout.Waiting(&m)
			if ok != tc.waiting || !reflect.DeepEqual(w.Rollout, tc.want) {
				t.Fatalf("Waiting = %v %v, want %v %v", w.Rollout, ok, tc.want, tc.waiting)
			}
		})
	}
}

func TestWaitingCopiesPathsAndHold(t *testing.T) {
	m := machine("a", "worker", ichorv1alpha1.RebootRequiredCondition)
	m.Status.RebootRequiredPaths = []string{"machine.install.disk"}
	m.Status.DriftPaths = []string{"machine.network.hostname"}
	m.Annotations = map[string]string{ichorv1alpha1.HoldApplyAnnotation: ""}
	w, _ := rollout.Waiting(&m)
	if w.Held != ichorv1alpha1.HoldApplyAnnotation {
		t.Errorf("Held = %q, want %s", w.Held, ichorv1alpha1.HoldApplyAnnotation)
	}
	// The plan owns its slices: the caller may hand out cached objects.
	w.Paths[0], w.DriftPaths[0] = "x", "y"
	if m.Status.RebootRequiredPaths[0] != "machine.install.disk" || m.Status.DriftPaths[0] != "machine.network.hostname" {
		t.Errorf("the plan shares the machine's slices")
	}
}

func TestForChoosesAndOrders(t *testing.T) {
	notApproved := machine("w-pending", "worker", ichorv1alpha1.RebootRequiredCondition)
	notApproved.Spec.Approval.State = ichorv1alpha1.ApprovalPending
	noAddress := machine("w-noaddr", "worker", ichorv1alpha1.RebootRequiredCondition)
	noAddress.Spec.Address = ""
	removing := machine("w-removing", "worker", ichorv1alpha1.RebootRequiredCondition)
	removing.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	unprovisioned := machine("w-unprov", "worker", ichorv1alpha1.RebootRequiredCondition)
	unprovisioned.Status.Conditions = unprovisioned.Status.Conditions[1:]
	other := machine("w-other", "worker", ichorv1alpha1.RebootRequiredCondition)
	other.Spec.ClusterName = "staging"
	zoneB := machine("w-b", "worker", ichorv1alpha1.RebootRequiredCondition)
	zoneB.Labels["zone"] = "b"

	ms := []ichorv1alpha1.TalosMachine{
		machine("w-2", "worker", ichorv1alpha1.RebootRequiredCondition),
		machine("w-1", "worker", ichorv1alpha1.DriftedCondition),
		machine("cp-2", "controlplane", ichorv1alpha1.APIServerRestartRequiredCondition),
		machine("cp-1", "controlplane"),
		notApproved, noAddress, removing, unprovisioned, other, zoneB,
	}

	p := rollout.For("prod", nil, ms)
	if got := names(p); got != "cp-2,w-1,w-2,w-b" {
		t.Errorf("machines: %s, want the waiting configured ones of prod, control planes first", got)
	}
	if p.Matched != 9 {
		t.Errorf("Matched = %d, want the 9 machines of prod", p.Matched)
	}

	_, sel, err := rollout.ParseSelector("zone=a")
	if err != nil {
		t.Fatal(err)
	}
	p = rollout.For("prod", sel, ms)
	if got := names(p); got != "cp-2,w-1,w-2" || p.Matched != 8 {
		t.Errorf("zone=a: %s (matched %d)", got, p.Matched)
	}
	p = rollout.For("prod", labels.SelectorFromSet(labels.Set{"zone": "c"}), ms)
	if len(p.Machines) != 0 || p.Matched != 0 || p.Machines == nil {
		t.Errorf("zone=c: %+v, want an empty (non-nil) plan that matched nothing", p)
	}
}

func names(p rollout.Plan) string {
	out := make([]string, 0, len(p.Machines))
	for _, m := range p.Machines {
		out = append(out, m.Name)
	}
	return strings.Join(out, ",")
}

func TestParseSelector(t *testing.T) {
	ls, sel, err := rollout.ParseSelector("")
	if err != nil || ls != nil || !sel.Empty() {
		t.Errorf("empty: %v %v %v, want no selector", ls, sel, err)
	}
	ls, _, err = rollout.ParseSelector("tier in (edge,core),zone=a")
	if err != nil || metav1.FormatLabelSelector(ls) != "tier in (core,edge),zone=a" {
		t.Errorf("set-based: %v %v", metav1.FormatLabelSelector(ls), err)
	}
	_, _, err = rollout.ParseSelector("zone in (a")
	if err == nil || !strings.Contains(err.Error(), "kubectl -l") {
		t.Errorf("bad selector: %v, want an error that says how to write one", err)
	}
}

func op(name, cluster, typ, phase string, created time.Time) ichorv1alpha1.TalosOperation {
	return ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: cluster, Type: typ},
		Status:     ichorv1alpha1.TalosOperationStatus{Phase: phase},
	}
}

func TestUnfinished(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	deleting := op("config-deleting", "prod", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationRunning, now.Add(-time.Hour))
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	ops := make([]ichorv1alpha1.TalosOperation, 0, 7)
	ops = append(ops,
		op("config-done", "prod", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationSucceeded, now),
		op("config-failed", "prod", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationFailed, now),
		op("upgrade", "prod", ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationRunning, now),
		op("config-staging", "staging", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationRunning, now),
		deleting)
	if got := rollout.Unfinished("prod", ops); got != nil {
		t.Fatalf("Unfinished = %s, want none: finished, other types, other clusters and deleted ones do not count", got.Name)
	}
	ops = append(ops,
		op("config-new", "prod", ichorv1alpha1.OperationConfig, "", now),
		op("config-paused", "prod", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationPaused, now.Add(-time.Minute)))
	if got := rollout.Unfinished("prod", ops); got == nil || got.Name != "config-paused" {
		t.Fatalf("Unfinished = %v, want the oldest unfinished, config-paused", got)
	}
	if got := rollout.Unfinished("prod", ops[:len(ops)-1]); got == nil || got.Name != "config-new" {
		t.Fatalf("Unfinished = %v, want config-new: an operation the controller has not picked up counts", got)
	}
}

func TestNewOperation(t *testing.T) {
	ls := &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	o := rollout.NewOperation("ichor-system", "prod", ls)
	if o.Namespace != "ichor-system" || o.GenerateName != "config-" || o.Name != "" ||
		o.Spec.ClusterName != "prod" || o.Spec.Type != ichorv1alpha1.OperationConfig || o.Spec.MachineSelector != ls {
		t.Errorf("operation: %+v", o)
	}
}

// TestAPIServerRestartPending names the cluster's machines whose
// kube-apiserver waits for a restart, none of another cluster's, and none
// that waits for a reboot only.
func TestAPIServerRestartPending(t *testing.T) {
	other := machine("cp-9", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.APIServerRestartRequiredCondition)
	other.Spec.ClusterName = "other"
	ms := []ichorv1alpha1.TalosMachine{
		machine("cp-1", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.APIServerRestartRequiredCondition),
		machine("cp-2", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RebootRequiredCondition),
		machine("cp-3", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.APIServerRestartRequiredCondition),
		machine("w-1", ichorv1alpha1.RoleWorker),
		other,
	}

	got := rollout.APIServerRestartPending(ms[0].Spec.ClusterName, ms)
	if len(got) != 2 || got[0] != "cp-1" || got[1] != "cp-3" {
		t.Fatalf("waiting for a kube-apiserver restart: %v, want [cp-1 cp-3]", got)
	}
}
