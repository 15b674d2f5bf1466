package talosmachine

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/recovery"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

func conditionTrue(m *ichorv1alpha1.TalosMachine, t string) bool {
	return apimeta.IsStatusConditionTrue(m.Status.Conditions, t)
}

func set(m *ichorv1alpha1.TalosMachine, t string, s metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: m.Generation,
	})
}

// notInSync records why the node does not run the render.
func notInSync(m *ichorv1alpha1.TalosMachine, reason, msg string) {
	set(m, ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, reason, msg)
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
	set(m, ichorv1alpha1.InSyncCondition, metav1.ConditionTrue, reason, msg)
}

// markWaiting records a change that waits for a config operation: the
// condition of its class with the paths, InSync false. It reports whether
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

	notInSync(m, ichorv1alpha1.WaitingForRolloutReason, msg)

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
	notInSync(m, ichorv1alpha1.DriftDetectedReason, msg)
}

// markStalled records a problem only a person can fix (a missing cluster or
// Secret, a render error).
func markStalled(m *ichorv1alpha1.TalosMachine, msg string) {
	notInSync(m, ichorv1alpha1.RenderFailedReason, msg)
}

// markUnreachable records that the node did not answer; it is retried.
func markUnreachable(m *ichorv1alpha1.TalosMachine, err error) {
	notInSync(m, ichorv1alpha1.NodeUnreachableReason, talos.Message(err))
}

// markApplyFailed records that the node refused the configuration.
func markApplyFailed(m *ichorv1alpha1.TalosMachine, err error) {
	notInSync(m, ichorv1alpha1.ApplyFailedReason, talos.Message(err))
}

// identityMismatch refuses the reconcile: nothing is read from or applied to
// the node at the address; InSync (reason IdentityMismatch) names both
// identities and says how to go on; a Warning Event is left once per
// message. The machine lifecycle reconciler, which owns IdentityConflict,
// finds the same at its next look.
func (r *Reconciler) identityMismatch(m *ichorv1alpha1.TalosMachine, mm *talos.IdentityMismatchError) {
	msg := mm.Paused(m.Name, m.Spec.Address)

	was := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.InSyncCondition)
	notInSync(m, ichorv1alpha1.IdentityMismatchReason, msg)

	if was == nil || was.Message != msg {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ichorv1alpha1.IdentityMismatchReason, "Compare", "configuration reconcile refused: %s", msg)
	}
}

// markHeld sets AdoptionHeld while the hold-apply annotation is on the
// machine, and drops it once the hold is lifted.
func markHeld(m *ichorv1alpha1.TalosMachine) {
	if !held(m) {
		apimeta.RemoveStatusCondition(&m.Status.Conditions, ichorv1alpha1.AdoptionHeldCondition)

		return
	}

	v := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]

	way := "remove the annotation to let the controller apply"

	switch v {
	case adopt.HoldValue:
		way = fmt.Sprintf("`ichor adopt --release --cluster %s` checks the node against its render and lifts the hold", m.Spec.ClusterName)
	case recovery.HoldValue:
		way = fmt.Sprintf("once the machines look right, `ichor restore --confirm %s` lifts the recovery's holds", m.Spec.ClusterName)
	}

	set(m, ichorv1alpha1.AdoptionHeldCondition, metav1.ConditionTrue, ichorv1alpha1.HeldReason, fmt.Sprintf(
		"the annotation %s=%s stops every apply to this machine; its drift is reported. %s",
		ichorv1alpha1.HoldApplyAnnotation, v, way))
}
