package attention

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

var t0 = time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)

// testNow is when the list is made: a day after t0.
var testNow = t0.Add(24 * time.Hour)

// grpcRefused is the text a NodeUnreachable condition holds when the node's
// port is closed (talos.Message of the Talos client's error).
const grpcRefused = `Unavailable: connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.21:50000: connect: connection refused"`

func cond(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t0)}
}

func cluster() *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod"},
		Status: ichorv1alpha1.TalosClusterStatus{Conditions: []metav1.Condition{
			cond(ichorv1alpha1.ReadyCondition, metav1.ConditionTrue, ichorv1alpha1.AllMachinesReadyReason, "all ready"),
			cond(ichorv1alpha1.PausedCondition, metav1.ConditionFalse, "NotPaused", ""),
		}},
	}
}

// healthy is a running worker whose conditions are all in their healthy state.
func healthy(name string) ichorv1alpha1.TalosMachine {
	m := ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0)},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Address: "10.0.0.21", Role: ichorv1alpha1.RoleWorker,
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved},
		},
	}
	m.Status.Conditions = []metav1.Condition{
		cond(ichorv1alpha1.ProvisionedCondition, metav1.ConditionTrue, ichorv1alpha1.JoinedReason, "joined"),
		cond(ichorv1alpha1.NodeHealthyCondition, metav1.ConditionTrue, ichorv1alpha1.RunningReason, "answers"),
		cond(ichorv1alpha1.DeletingCondition, metav1.ConditionFalse, "NotDeleting", ""),
		cond(ichorv1alpha1.FingerprintTrustedCondition, metav1.ConditionTrue, "Trusted", ""),
		cond(ichorv1alpha1.IdentityConflictCondition, metav1.ConditionFalse, ichorv1alpha1.IdentityConfirmedReason, ""),
		cond(ichorv1alpha1.InSyncCondition, metav1.ConditionTrue, ichorv1alpha1.InSyncReason, "runs the render"),
		cond(ichorv1alpha1.DriftedCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, ""),
		cond(ichorv1alpha1.RebootRequiredCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, ""),
		cond(ichorv1alpha1.APIServerRestartRequiredCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, ""),
	}
	ichorv1alpha1.SummarizeTalosMachine(&m)

	return m
}

// with sets conditions on a healthy machine, summarises it again and marks
// the cluster as the cluster-status controller would.
func with(m ichorv1alpha1.TalosMachine, conds ...metav1.Condition) ichorv1alpha1.TalosMachine {
	m.Status.Conditions = append([]metav1.Condition(nil), m.Status.Conditions...)
	for _, c := range conds {
		for i := range m.Status.Conditions {
			if m.Status.Conditions[i].Type == c.Type {
				m.Status.Conditions[i] = c
			}
		}
	}

	ichorv1alpha1.SummarizeTalosMachine(&m)

	return m
}

func notReadyCluster() *ichorv1alpha1.TalosCluster {
	c := cluster()
	c.Status.Conditions[0] = cond(ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.MachinesNotReadyReason,
		"2/3 control planes and 1/2 workers Ready; not Ready: w-1 (`ichor machine get NAME` says why)")

	return c
}

func TestHealthyClusterNeedsNothing(t *testing.T) {
	if got := Items(cluster(), []ichorv1alpha1.TalosMachine{healthy("w-1"), healthy("w-2")}, nil, nil, testNow); len(got) != 0 {
		t.Fatalf("a healthy cluster needs no attention, got %+v", got)
	}
}

// TestItemsByReason: each reason of a machine's conditions is told in plain
// words, once, with its action, the raw text in Detail and the condition's
// time as Since; the cluster's Ready, which repeats it, is not told.
func TestItemsByReason(t *testing.T) {
	drifted := healthy("w-1")
	drifted.Status.DriftPaths = []string{"machine.network.hostname", "machine.sysctls.a", "machine.sysctls.b"}
	waiting := healthy("w-1")
	waiting.Status.RebootRequiredPaths = []string{"machine.install.extraKernelArgs"}

	for _, tc := range []struct {
		name     string
		m        ichorv1alpha1.TalosMachine
		conds    []metav1.Condition
		sev      Severity
		action   Action
		summary  string
		detailIn string
	}{
		{
			name: "drift", m: drifted, sev: Warning, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.DriftedCondition, metav1.ConditionTrue, ichorv1alpha1.DriftDetectedReason, "3 path(s) differ from the render: ..."),
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.DriftDetectedReason, "3 path(s) differ from the render: ..."),
			},
			summary:  "w-1 runs a configuration different from the one Ichor rendered (3 paths)",
			detailIn: "DriftDetected: 3 path(s) differ",
		},
		{
			name: "reboot waits for a rollout", m: waiting, sev: Warning, action: ActionApply,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.RebootRequiredCondition, metav1.ConditionTrue, ichorv1alpha1.WaitingForRolloutReason, "1 change(s) wait"),
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.WaitingForRolloutReason, "1 change(s) wait"),
			},
			summary:  "a configuration change of w-1 waits for a rollout that reboots it (1 path)",
			detailIn: "WaitingForRollout",
		},
		{
			name: "kube-apiserver restart waits for a rollout", m: waiting, sev: Warning, action: ActionApply,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.APIServerRestartRequiredCondition, metav1.ConditionTrue, ichorv1alpha1.WaitingForRolloutReason, "1 change(s) wait"),
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.WaitingForRolloutReason, "1 change(s) wait"),
			},
			summary: "a configuration change of w-1 waits for a rollout that restarts its kube-apiserver (1 path)",
		},
		{
			name: "unreachable on two conditions", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.NodeHealthyCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason,
					"the node at 10.0.0.21 answers neither with the cluster's credentials nor in maintenance mode: "+grpcRefused),
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, grpcRefused),
			},
			summary:  "w-1: the node's Talos API does not answer (connection refused)",
			detailIn: "transport: Error while dialing",
		},
		{
			name: "unreachable, timed out", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, "DeadlineExceeded: context deadline exceeded"),
			},
			summary: "w-1: the node's Talos API does not answer (timed out)",
		},
		{
			name: "apply refused", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.ApplyFailedReason,
					"InvalidArgument: 1 error occurred: machine.install.disk is required"),
			},
			summary:  "w-1 refused the configuration Ichor sent it (InvalidArgument)",
			detailIn: "machine.install.disk is required",
		},
		{
			name: "render failed", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.RenderFailedReason, "patch p-1: unknown field"),
			},
			summary: "Ichor cannot render the configuration of w-1",
		},
		{
			name: "identity mismatch", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.IdentityConflictCondition, metav1.ConditionTrue, ichorv1alpha1.IdentityMismatchReason, "UUID differs"),
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.IdentityMismatchReason, "UUID differs"),
			},
			summary: "another machine answers at the address of w-1 (10.0.0.21): Ichor sends it nothing",
		},
		{
			name: "fingerprint changed", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.FingerprintTrustedCondition, metav1.ConditionFalse, ichorv1alpha1.FingerprintChangedReason, "sha256 differs"),
			},
			summary: "w-1 presents another maintenance certificate than when it was discovered: confirm it is the same machine",
		},
		{
			name: "installing", m: healthy("w-1"), sev: Info, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.ProvisionedCondition, metav1.ConditionFalse, ichorv1alpha1.InstallingReason, "installing"),
				cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.NotConfiguredReason, "not provisioned"),
			},
			summary: "w-1 is installing Talos",
		},
		{
			name: "lock held", m: healthy("w-1"), sev: Info, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.ProvisionedCondition, metav1.ConditionFalse, ichorv1alpha1.ClusterLockHeldReason, "joining waits for the cluster lock, held by op/x"),
			},
			summary: "w-1 waits for the cluster lock",
		},
		{
			name: "drain paused", m: healthy("w-1"), sev: Warning, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.DeletingCondition, metav1.ConditionTrue, ichorv1alpha1.DrainPausedReason, "draining Node w-1 did not finish"),
				cond(ichorv1alpha1.NodeHealthyCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, grpcRefused),
			},
			summary: "removing w-1 waits: its Kubernetes node could not be drained",
		},
		{
			name: "removal refused", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.DeletingCondition, metav1.ConditionTrue, ichorv1alpha1.RemovalRefusedReason, "quorum"),
			},
			summary: "removing w-1 is refused: it would break etcd quorum or the declared number of control planes",
		},
		{
			name: "an unknown reason is told by its condition", m: healthy("w-1"), sev: Error, action: ActionOpenNode,
			conds: []metav1.Condition{
				cond(ichorv1alpha1.NodeHealthyCondition, metav1.ConditionFalse, "SomethingNew", "a new problem"),
			},
			summary:  "w-1 is not healthy",
			detailIn: "SomethingNew: a new problem",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := with(tc.m, tc.conds...)
			got := Items(notReadyCluster(), []ichorv1alpha1.TalosMachine{m, healthy("w-2")}, nil, nil, testNow)
			if len(got) != 1 {
				t.Fatalf("want one item (the cluster's Ready and the repeated conditions are not told again), got %d: %+v", len(got), got)
			}
			it := got[0]
			if it.Summary != tc.summary || it.Severity != tc.sev || it.Action != tc.action || it.Subject != "w-1" || it.Kind != KindMachine {
				t.Fatalf("got %q %s %q on %s %s\nwant %q %s %q", it.Summary, it.Severity, it.Action, it.Kind, it.Subject, tc.summary, tc.sev, tc.action)
			}
			if !strings.Contains(it.Detail, tc.detailIn) {
				t.Fatalf("detail %q lacks %q", it.Detail, tc.detailIn)
			}
			if !it.Since.Equal(t0) {
				t.Fatalf("since %v, want the condition's lastTransitionTime %v", it.Since, t0)
			}
		})
	}
}

func TestPendingAndRejectedMachines(t *testing.T) {
	p := healthy("new-1")
	p.Spec.Approval.State = ichorv1alpha1.ApprovalPending
	p.Status.Conditions = nil
	r := healthy("old-1")
	r.Spec.Approval.State = ichorv1alpha1.ApprovalRejected
	other := healthy("x-1")
	other.Spec.ClusterName = "staging"
	other.Spec.Approval.State = ichorv1alpha1.ApprovalPending

	got := Items(cluster(), []ichorv1alpha1.TalosMachine{p, r, other}, nil, nil, testNow)
	if len(got) != 1 || got[0].Action != ActionApprove || got[0].Summary != "new-1 (10.0.0.21) waits for approval" ||
		!strings.Contains(got[0].Command, "ichor machine approve new-1") || !got[0].Since.Equal(t0) {
		t.Fatalf("want the pending machine only, with Approve: %+v", got)
	}
}

// TestClusterReadyToldOnce: the cluster's not-ready is told by its machines;
// without a machine to tell it, the cluster tells it.
func TestClusterReadyToldOnce(t *testing.T) {
	c := cluster()
	c.Status.Conditions[0] = cond(ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.NoControlPlaneReadyReason, "no control plane is Ready: 0/0")
	got := Items(c, nil, nil, nil, testNow)
	if len(got) != 1 || got[0].Kind != KindCluster || got[0].Summary != "cluster prod has no ready control plane" || got[0].Severity != Error {
		t.Fatalf("want the cluster's Ready told: %+v", got)
	}

	down := with(healthy("cp-1"), cond(ichorv1alpha1.NodeHealthyCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, grpcRefused))
	got = Items(c, []ichorv1alpha1.TalosMachine{down}, nil, nil, testNow)
	if len(got) != 1 || got[0].Subject != "cp-1" {
		t.Fatalf("want the machine's problem only: %+v", got)
	}
}

func TestPausedClusterToldOnce(t *testing.T) {
	c := cluster()
	c.Annotations = map[string]string{ichorv1alpha1.PausedReasonAnnotation: "disk swap"}
	c.Status.Conditions[1] = cond(ichorv1alpha1.PausedCondition, metav1.ConditionTrue, ichorv1alpha1.PausedReason, "paused")
	m := healthy("w-1")
	m.Status.Conditions = append(m.Status.Conditions, cond(ichorv1alpha1.PausedCondition, metav1.ConditionTrue, ichorv1alpha1.PausedReason, "paused"))
	got := Items(c, []ichorv1alpha1.TalosMachine{m}, nil, nil, testNow)
	if len(got) != 1 || got[0].Action != ActionResumeCluster || got[0].Summary != "cluster prod is paused (disk swap): the controllers do nothing on it" {
		t.Fatalf("want the cluster's pause once: %+v", got)
	}
}

func op(name, typ, phase string, created time.Time) ichorv1alpha1.TalosOperation {
	return ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: typ},
		Status:     ichorv1alpha1.TalosOperationStatus{Phase: phase},
	}
}

func TestOperations(t *testing.T) {
	stopped := op("cfg-1", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationPaused, t0)
	stopped.Status.FailedStep, stopped.Status.FailureReason = "apply w-1", "w-1: "+grpcRefused
	paused := op("up-1", ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationRunning, t0)
	paused.Spec.Paused = true
	failedThenGood := op("k8s-1", ichorv1alpha1.OperationKubernetes, ichorv1alpha1.OperationFailed, t0)
	good := op("k8s-2", ichorv1alpha1.OperationKubernetes, ichorv1alpha1.OperationSucceeded, t0.Add(time.Hour))
	failed := op("cni-1", ichorv1alpha1.OperationCNI, ichorv1alpha1.OperationFailed, t0)
	running := op("cfg-2", ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationRunning, t0)
	evacuating := op("up-2", ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationPaused, t0)
	evacuating.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: ichorv1alpha1.EvacuationPausedReason, Message: "w-2: Longhorn: replica pvc-b-r-w2 still on node w-2"}}

	got := Items(cluster(), nil, []ichorv1alpha1.TalosOperation{stopped, paused, failedThenGood, good, failed, running, evacuating}, nil, testNow)
	want := map[string]struct {
		sev     Severity
		action  Action
		summary string
	}{
		"cfg-1": {Error, ActionResumeOperation, "operation cfg-1 (config) stopped at step apply w-1: a node's Talos API does not answer (connection refused)"},
		"cni-1": {Error, ActionOpenOperation, "operation cni-1 (cni) failed: a new operation is needed"},
		"up-1":  {Warning, ActionResumeOperation, "operation up-1 (talos) is paused"},
		// It goes on by itself: nothing to resume, its page says why.
		"up-2": {Warning, ActionOpenOperation, "operation up-2 (talos) waits: a node's storage evacuation reached its timeout with replicas still on it"},
	}
	if len(got) != len(want) {
		t.Fatalf("want %d items, got %+v", len(want), got)
	}
	for _, it := range got {
		w, ok := want[it.Subject]
		if !ok || it.Severity != w.sev || it.Action != w.action || it.Summary != w.summary {
			t.Fatalf("%s: got %s %s %q, want %+v", it.Subject, it.Severity, it.Action, it.Summary, w)
		}
	}
	if got[0].Severity != Error || got[len(got)-1].Severity != Warning {
		t.Fatalf("errors come first: %+v", got)
	}
}

func TestCause(t *testing.T) {
	for msg, want := range map[string]string{
		grpcRefused: "connection refused",
		`Unavailable: connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.5:50000: connect: no route to host"`: "no route to host",
		"DeadlineExceeded: context deadline exceeded": "timed out",
		`Unavailable: connection error: desc = "transport: authentication handshake failed: x509: certificate signed by unknown authority"`: "its certificate is not signed by the cluster's CA",
		"PermissionDenied: not authorized":  "permission denied",
		"InvalidArgument: bad config: more": "InvalidArgument",
		"":                                  "no reason given",
	} {
		if got := Cause(msg); got != want {
			t.Errorf("Cause(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestSince(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5s", 3 * time.Minute: "3m", 5 * time.Hour: "5h", 72 * time.Hour: "3d",
	} {
		if got := Since(t0, t0.Add(d)); got != want {
			t.Errorf("Since(%v) = %q, want %q", d, got, want)
		}
	}
	if Since(time.Time{}, t0) != "" {
		t.Error("a zero time has no duration")
	}
}
