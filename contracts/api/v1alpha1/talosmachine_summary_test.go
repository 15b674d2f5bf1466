package v1alpha1

import (
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cond(t, reason string, s metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: reason + " message"}
}

// TestSummarizeTalosMachine: Ready follows the first abnormal condition in
// the documented order, Reconciling and Stalled follow its reason, and a
// machine with every condition healthy is Ready with InSync's reason.
func TestSummarizeTalosMachine(t *testing.T) {
	const (
		yes = metav1.ConditionTrue
		no  = metav1.ConditionFalse
	)

	provisioned := cond(ProvisionedCondition, JoinedReason, yes)
	insync := cond(InSyncCondition, InSyncReason, yes)

	tests := []struct {
		name                 string
		approval             string
		conds                []metav1.Condition
		ready                metav1.ConditionStatus
		reason               string
		reconciling, stalled metav1.ConditionStatus
	}{
		{"pending", ApprovalPending, nil, no, AwaitingApprovalReason, no, no},
		{"rejected", ApprovalRejected, nil, no, RejectedReason, no, no},
		{"approved, nothing yet", ApprovalApproved, nil, no, NotProvisionedReason, yes, no},
		{"installing", ApprovalApproved, []metav1.Condition{cond(ProvisionedCondition, InstallingReason, no)}, no, InstallingReason, yes, no},
		{"lock held while joining", ApprovalApproved, []metav1.Condition{cond(ProvisionedCondition, ClusterLockHeldReason, no)}, no, ClusterLockHeldReason, yes, no},
		{"joined, not configured yet", ApprovalApproved, []metav1.Condition{provisioned}, yes, JoinedReason, no, no},
		{"in sync", ApprovalApproved, []metav1.Condition{provisioned, insync}, yes, InSyncReason, no, no},
		{"unreachable", ApprovalApproved, []metav1.Condition{provisioned, cond(InSyncCondition, NodeUnreachableReason, no)}, no, NodeUnreachableReason, yes, no},
		{"render failed", ApprovalApproved, []metav1.Condition{provisioned, cond(InSyncCondition, RenderFailedReason, no)}, no, RenderFailedReason, no, yes},
		{"drifted", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(DriftedCondition, DriftDetectedReason, yes)}, no, DriftDetectedReason, no, no},
		{"waits for a reboot", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(RebootRequiredCondition, WaitingForRolloutReason, yes)}, no, WaitingForRolloutReason, no, no},
		{"waits for an API-server restart", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(APIServerRestartRequiredCondition, WaitingForRolloutReason, yes)}, no, WaitingForRolloutReason, no, no},
		{"wiped, no survivor", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(NodeHealthyCondition, RecoverClusterReason, no)}, no, RecoverClusterReason, no, yes},
		{"node healthy", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(NodeHealthyCondition, RunningReason, yes)}, yes, InSyncReason, no, no},
		{"identity mismatch before everything but deletion", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(IdentityConflictCondition, IdentityMismatchReason, yes)}, no, IdentityMismatchReason, no, yes},
		{"fingerprint changed", ApprovalApproved, []metav1.Condition{cond(ProvisionedCondition, ProvisioningReason, no), cond(FingerprintTrustedCondition, FingerprintChangedReason, no)}, no, FingerprintChangedReason, no, yes},
		{"deleting wins", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(IdentityConflictCondition, IdentityMismatchReason, yes), cond(DeletingCondition, DrainPausedReason, yes)}, no, DrainPausedReason, yes, no},
		{"deletion refused", ApprovalApproved, []metav1.Condition{provisioned, cond(DeletingCondition, RemovalRefusedReason, yes)}, no, RemovalRefusedReason, no, yes},
		{"not deleting", ApprovalApproved, []metav1.Condition{provisioned, insync, cond(DeletingCondition, "NotDeleting", no)}, yes, InSyncReason, no, no},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &TalosMachine{}
			m.Name = "w-1"
			m.Generation = 3
			m.Spec.Approval.State = tt.approval
			m.Status.Conditions = append([]metav1.Condition(nil), tt.conds...)

			SummarizeTalosMachine(m)

			for _, want := range []struct {
				typ    string
				status metav1.ConditionStatus
			}{{ReadyCondition, tt.ready}, {ReconcilingCondition, tt.reconciling}, {StalledCondition, tt.stalled}} {
				c := apimeta.FindStatusCondition(m.Status.Conditions, want.typ)
				if c == nil {
					t.Fatalf("no %s condition", want.typ)
				}

				if c.Status != want.status || c.Reason != tt.reason || c.ObservedGeneration != 3 {
					t.Errorf("%s = %s/%s (generation %d), want %s/%s (generation 3)", want.typ, c.Status, c.Reason, c.ObservedGeneration, want.status, tt.reason)
				}
			}
		})
	}
}

// TestConditionAbnormal: a condition is abnormal in the status that is not
// its type's healthy one, Unknown included; types the table does not list
// only inform.
func TestConditionAbnormal(t *testing.T) {
	for _, tt := range []struct {
		c    metav1.Condition
		want bool
	}{
		{metav1.Condition{Type: ReadyCondition, Status: metav1.ConditionTrue}, false},
		{metav1.Condition{Type: ReadyCondition, Status: metav1.ConditionFalse}, true},
		{metav1.Condition{Type: ReadyCondition, Status: metav1.ConditionUnknown}, true},
		{metav1.Condition{Type: DriftedCondition, Status: metav1.ConditionFalse}, false},
		{metav1.Condition{Type: DriftedCondition, Status: metav1.ConditionTrue}, true},
		{metav1.Condition{Type: NodeHealthyCondition, Status: metav1.ConditionFalse}, true},
		{metav1.Condition{Type: SecureBootCondition, Status: metav1.ConditionFalse}, false},
	} {
		if got := ConditionAbnormal(tt.c); got != tt.want {
			t.Errorf("ConditionAbnormal(%s=%s) = %t, want %t", tt.c.Type, tt.c.Status, got, tt.want)
		}
	}

	// Every condition the machine summary reads has a healthy status.
	for _, typ := range []string{
		DeletingCondition, IdentityConflictCondition, FingerprintTrustedCondition, ProvisionedCondition,
		NodeHealthyCondition, InSyncCondition, DriftedCondition, RebootRequiredCondition, APIServerRestartRequiredCondition,
	} {
		if _, ok := ConditionHealthyStatus[typ]; !ok {
			t.Errorf("%s has no healthy status in ConditionHealthyStatus", typ)
		}
	}
}
