package talosmachine

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// patchStatus writes the status once, and only when it changed, as a merge
// patch against what was read. The reconciler owns Ready, Reconciling,
// Stalled, Drifted, RebootRequired and APIServerRestartRequired; a merge patch
// replaces the whole conditions list, so the patch carries an optimistic lock:
// if another writer (provisioning's Provisioned) came in between, it fails
// with a conflict and the reconcile runs again on what is current.
// ObservedGeneration moves only on success.
func (r *Reconciler) patchStatus(ctx context.Context, before, m *ichorv1alpha1.TalosMachine, reconcileErr error) error {
	if reconcileErr == nil && !conditionTrue(m, ichorv1alpha1.StalledCondition) {
		m.Status.ObservedGeneration = m.Generation
	}

	for i := range m.Status.Conditions {
		m.Status.Conditions[i].ObservedGeneration = m.Generation
	}

	if equality.Semantic.DeepEqual(before.Status, m.Status) {
		return nil
	}

	return r.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

func conditionTrue(m *ichorv1alpha1.TalosMachine, t string) bool {
	return apimeta.IsStatusConditionTrue(m.Status.Conditions, t)
}

func set(m *ichorv1alpha1.TalosMachine, t string, s metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: m.Generation,
	})
}

// markInSync records that the node runs (or has staged) the render of hash.
// Reason and message are the same whether the reconcile applied or found the
// node in sync, so the next poll writes nothing: how it got there is in the Events.
func markInSync(m *ichorv1alpha1.TalosMachine, hash string, staged bool) {
	reason, msg := ichorv1alpha1.InSyncReason, "the node runs the rendered configuration"
	if staged {
		reason, msg = ichorv1alpha1.StagedReason, "the rendered configuration is staged for the next install or upgrade"
	}

	m.Status.AppliedConfigHash = hash
	m.Status.RenderVersion = render.Version

	setDrift(m, nil)
	clearWaiting(m)
	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionTrue, reason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionFalse, reason, msg)
	set(m, ichorv1alpha1.StalledCondition, metav1.ConditionFalse, reason, msg)
}

// markWaiting records a change that waits for a config operation: the
// condition of its class with the paths, Ready false. It reports whether
// anything changed (so that the Event is sent once).
func markWaiting(m *ichorv1alpha1.TalosMachine, p plan.Plan) bool {
	paths := capPaths(p.Paths(p.Class))
	cond := ichorv1alpha1.RebootRequiredCondition

	if p.Class == plan.APIServerRestart {
		cond = ichorv1alpha1.APIServerRestartRequiredCondition
	}

	changed := !conditionTrue(m, cond) || !equalStrings(m.Status.RebootRequiredPaths, paths)
	msg := fmt.Sprintf("%d change(s) wait for a config operation: %s", len(paths), eventPaths(paths))

	m.Status.RebootRequiredPaths = paths
	set(m, cond, metav1.ConditionTrue, ichorv1alpha1.WaitingForRolloutReason, msg)

	for _, other := range []string{ichorv1alpha1.RebootRequiredCondition, ichorv1alpha1.APIServerRestartRequiredCondition} {
		if other != cond {
			set(m, other, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, "no change of this kind waits")
		}
	}

	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.WaitingForRolloutReason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionFalse, ichorv1alpha1.WaitingForRolloutReason, msg)
	set(m, ichorv1alpha1.StalledCondition, metav1.ConditionFalse, ichorv1alpha1.WaitingForRolloutReason, msg)

	return changed
}

// clearWaiting records that no change waits for a rollout.
func clearWaiting(m *ichorv1alpha1.TalosMachine) {
	m.Status.RebootRequiredPaths = nil
	set(m, ichorv1alpha1.RebootRequiredCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, "no change waits for a reboot")
	set(m, ichorv1alpha1.APIServerRestartRequiredCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason,
		"no change waits for a kube-apiserver restart")
}

// setDrift records the drifted paths; none clears the condition.
func setDrift(m *ichorv1alpha1.TalosMachine, paths []string) {
	if len(paths) == 0 {
		m.Status.DriftPaths = nil
		set(m, ichorv1alpha1.DriftedCondition, metav1.ConditionFalse, ichorv1alpha1.InSyncReason, "the node runs the rendered configuration")

		return
	}

	m.Status.DriftPaths = capPaths(paths)
	msg := fmt.Sprintf("%d path(s) differ from the render: %s", len(paths), eventPaths(paths))
	set(m, ichorv1alpha1.DriftedCondition, metav1.ConditionTrue, ichorv1alpha1.DriftDetectedReason, msg)
	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.DriftDetectedReason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionFalse, ichorv1alpha1.DriftDetectedReason, msg)
}

// markStalled records a problem only a person can fix (a missing cluster or
// Secret, a render error).
func markStalled(m *ichorv1alpha1.TalosMachine, msg string) {
	const reason = ichorv1alpha1.RenderFailedReason

	set(m, ichorv1alpha1.StalledCondition, metav1.ConditionTrue, reason, msg)
	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionFalse, reason, msg)
}

// markUnreachable records that the node did not answer; it is retried.
func markUnreachable(m *ichorv1alpha1.TalosMachine, err error) {
	msg := talos.Message(err)
	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionTrue, ichorv1alpha1.NodeUnreachableReason, msg)
	set(m, ichorv1alpha1.StalledCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, msg)
}

// markApplyFailed records that the node refused the configuration.
func markApplyFailed(m *ichorv1alpha1.TalosMachine, err error) {
	msg := talos.Message(err)
	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ApplyFailedReason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionTrue, ichorv1alpha1.ApplyFailedReason, msg)
}

// identityPaused reports whether the machine stands paused because the node
// at its address answered as another machine.
func identityPaused(m *ichorv1alpha1.TalosMachine) bool {
	c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition)

	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ichorv1alpha1.IdentityMismatchReason
}

// identityMismatch refuses the reconcile: nothing is read from or applied to
// the node at the address; IdentityConflict names both identities and says
// how to go on; a Warning Event is left once per message.
func (r *Reconciler) identityMismatch(m *ichorv1alpha1.TalosMachine, mm *talos.IdentityMismatchError) {
	msg := mm.Paused(m.Name, m.Spec.Address)

	was := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition)
	set(m, ichorv1alpha1.IdentityConflictCondition, metav1.ConditionTrue, ichorv1alpha1.IdentityMismatchReason, msg)
	set(m, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.IdentityMismatchReason, msg)
	set(m, ichorv1alpha1.ReconcilingCondition, metav1.ConditionFalse, ichorv1alpha1.IdentityMismatchReason, msg)
	set(m, ichorv1alpha1.StalledCondition, metav1.ConditionTrue, ichorv1alpha1.IdentityMismatchReason, msg)

	if was == nil || was.Message != msg {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ichorv1alpha1.IdentityMismatchReason, "Compare", "configuration reconcile refused: %s", msg)
	}
}
