package operation

// The operation's status: resume, failure, completion and its conditions.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/metrics"
)

func stepName(op *ichorv1alpha1.TalosOperation) string {
	if op.Status.Step == "" {
		return "(none yet)"
	}

	return op.Status.Step
}

func completed(op *ichorv1alpha1.TalosOperation) bool {
	return op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed
}

// resume clears a failure when the resume annotation carries a new token,
// and puts the failed machine back on its failed step.
func (r *Reconciler) resume(op *ichorv1alpha1.TalosOperation) bool {
	token := op.Annotations[ichorv1alpha1.ResumeAnnotation]
	if op.Status.FailedStep == "" || token == "" || token == op.Status.LastHandledResume {
		return false
	}

	op.Status.LastHandledResume = token
	op.Status.FailedStep = ""
	op.Status.FailureReason = ""
	op.Status.Overridable = false

	for i := range op.Status.Machines {
		if mp := &op.Status.Machines[i]; mp.Phase == ichorv1alpha1.MachineFailed {
			mp.Phase = ichorv1alpha1.MachineInProgress
			now := metav1.NewTime(r.now())
			mp.StepStartedAt = &now
		}
	}

	op.Status.Phase = ichorv1alpha1.OperationRunning
	op.Status.ProgressSequence++

	return true
}

// fail pauses the operation on a failed step of a machine (or of the
// operation when mp is nil); the lock becomes Inactive.
func (r *Reconciler) fail(op *ichorv1alpha1.TalosOperation, mp *ichorv1alpha1.MachineProgress, step, msg string) {
	where := "step " + step
	if mp != nil {
		mp.Phase = ichorv1alpha1.MachineFailed
		mp.Message = msg
		where = fmt.Sprintf("step %s of machine %s", step, mp.Name)
	}

	op.Status.Phase = ichorv1alpha1.OperationPaused
	op.Status.FailedStep = step
	op.Status.FailureReason = truncate(fmt.Sprintf("%s failed: %s. Fix the cause, then resume: `ichor operation resume %s` (or annotate %s with a new value)",
		where, msg, op.Name, ichorv1alpha1.ResumeAnnotation), 4096)
	op.Status.ProgressSequence++
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, op.Status.FailureReason)
	r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, ichorv1alpha1.FailedReason, "Step", "%s", op.Status.FailureReason)
}

// complete ends the operation: it records the end (strictly, so a stale
// reconcile does not end it) and gives the lock back at once, not at the
// next event.
func (r *Reconciler) complete(ctx context.Context, s *scope, phase, reason, msg string) error {
	op := s.Object
	now := metav1.NewTime(r.now())
	op.Status.Phase = phase
	op.Status.CompletedAt = &now
	op.Status.Step = ""
	op.Status.ProgressSequence++

	status := metav1.ConditionTrue
	typ := corev1.EventTypeNormal

	if phase != ichorv1alpha1.OperationSucceeded {
		status, typ = metav1.ConditionFalse, corev1.EventTypeWarning
	}

	setCond(op, ichorv1alpha1.ReadyCondition, status, reason, msg)

	if err := s.Persist(ctx); err != nil {
		return err
	}

	r.Recorder.Eventf(op, nil, typ, reason, "Complete", "%s", msg)

	var started time.Time
	if op.Status.StartedAt != nil {
		started = op.Status.StartedAt.Time
	}

	result := metrics.ResultSucceeded
	if phase != ichorv1alpha1.OperationSucceeded {
		result = metrics.ResultFailed
	}

	metrics.ObserveOperation(op.Spec.Type, result, started, now.Time)

	return r.release(ctx, op)
}

func setCond(op *ichorv1alpha1.TalosOperation, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&op.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: truncate(msg, 32768), ObservedGeneration: op.Generation,
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}

	return s[:n-3] + "..."
}
