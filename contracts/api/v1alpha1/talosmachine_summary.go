package v1alpha1

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of a TalosMachine's Ready summary that no other condition carries.
const (
	// AwaitingApprovalReason means the machine waits for a person to approve it.
	AwaitingApprovalReason = "AwaitingApproval"
	// RejectedReason means a person rejected the machine.
	RejectedReason = "Rejected"
	// NotProvisionedReason means provisioning has not started yet.
	NotProvisionedReason = "NotProvisioned"
)

// stalledReasons are the reasons of a machine that cannot go on without a
// person (kstatus's Stalled).
var stalledReasons = map[string]bool{
	RenderFailedReason:       true,
	IdentityMismatchReason:   true,
	WeakIdentityReason:       true,
	DuplicateIdentityReason:  true,
	FingerprintChangedReason: true,
	RecoverClusterReason:     true,
	RemovalRefusedReason:     true,
}

// reconcilingReasons are the reasons of a machine a controller is working on,
// or retrying (kstatus's Reconciling).
var reconcilingReasons = map[string]bool{
	ProvisioningReason:     true,
	NotProvisionedReason:   true,
	InstallingReason:       true,
	JoiningReason:          true,
	ReinstalledReason:      true,
	RemovingReason:         true,
	DrainPausedReason:      true,
	EvacuationPausedReason: true,
	ClusterLockHeldReason:  true,
	NodeUnreachableReason:  true,
	ApplyFailedReason:      true,
}

// SummarizeTalosMachine sets the machine's Ready, Reconciling and Stalled
// conditions from its others: the one place that decides them, called by
// every writer of a TalosMachine's conditions (the lifecycle and
// configuration reconcilers, ichor init) after it set the ones it owns.
//
// Ready is false with the reason and message of the first condition that is
// not in its healthy state, in this order: Deleting, IdentityConflict,
// FingerprintTrusted, approval, Provisioned, NodeHealthy, InSync, Drifted,
// RebootRequired, APIServerRestartRequired. Otherwise it is true, with
// InSync's reason (or Provisioned's before the first configuration
// reconcile).
func SummarizeTalosMachine(m *TalosMachine) {
	status, reason, msg := machineSummary(m)

	reconciling, stalled := metav1.ConditionFalse, metav1.ConditionFalse

	if status == metav1.ConditionFalse {
		if stalledReasons[reason] {
			stalled = metav1.ConditionTrue
		}

		if reconcilingReasons[reason] {
			reconciling = metav1.ConditionTrue
		}
	}

	for _, c := range []metav1.Condition{
		{Type: ReadyCondition, Status: status, Reason: reason, Message: msg},
		{Type: ReconcilingCondition, Status: reconciling, Reason: reason, Message: msg},
		{Type: StalledCondition, Status: stalled, Reason: reason, Message: msg},
	} {
		c.ObservedGeneration = m.Generation
		apimeta.SetStatusCondition(&m.Status.Conditions, c)
	}
}

func machineSummary(m *TalosMachine) (metav1.ConditionStatus, string, string) {
	find := func(t string) *metav1.Condition { return apimeta.FindStatusCondition(m.Status.Conditions, t) }
	from := func(c *metav1.Condition) (metav1.ConditionStatus, string, string) {
		return metav1.ConditionFalse, c.Reason, c.Message
	}

	if c := find(DeletingCondition); c != nil && c.Status == metav1.ConditionTrue {
		return from(c)
	}

	if c := find(IdentityConflictCondition); c != nil && c.Status == metav1.ConditionTrue {
		return from(c)
	}

	if c := find(FingerprintTrustedCondition); c != nil && c.Status == metav1.ConditionFalse {
		return from(c)
	}

	switch m.Spec.Approval.State {
	case ApprovalApproved:
	case ApprovalRejected:
		return metav1.ConditionFalse, RejectedReason, "a person rejected the machine: it is never provisioned"
	default:
		return metav1.ConditionFalse, AwaitingApprovalReason, "the machine waits for approval: ichor machine approve " + m.Name + " --role controlplane|worker, or the console's Add node page"
	}

	provisioned := find(ProvisionedCondition)
	if provisioned == nil {
		return metav1.ConditionFalse, NotProvisionedReason, "approved; provisioning has not started yet"
	}

	if provisioned.Status != metav1.ConditionTrue {
		return from(provisioned)
	}

	if c := find(NodeHealthyCondition); c != nil && c.Status == metav1.ConditionFalse {
		return from(c)
	}

	insync := find(InSyncCondition)
	if insync != nil && insync.Status != metav1.ConditionTrue {
		return from(insync)
	}

	for _, t := range []string{DriftedCondition, RebootRequiredCondition, APIServerRestartRequiredCondition} {
		if c := find(t); c != nil && c.Status == metav1.ConditionTrue {
			return from(c)
		}
	}

	if insync != nil {
		return metav1.ConditionTrue, insync.Reason, insync.Message
	}

	return metav1.ConditionTrue, provisioned.Reason, provisioned.Message
}
