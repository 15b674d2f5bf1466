// Package operation holds the TalosOperation reconciler: the Job-style runs
// of disruptive work over a cluster (architecture, "Upgrades" and
// "Configuration reconcile"). Every operation takes the cluster lock under its
// own identity before its first step and keeps it, renewing the Lease, until
// it succeeds or fails; the one that waits reports ClusterLockHeld naming the
// holder. A failed step pauses the operation with failureReason; it is never
// retried by itself, and the resume annotation re-runs it.
//
// The state machine lives in status (status.step, and per machine
// status.machines[].step), so a controller restart resumes where it stopped.
// One reconcile runs at most one step.
//
// This release runs operations of type config (the rollout of changes the
// machine reconciler does not apply by itself); the other types are refused
// with a message that says so, before they take the lock.
package operation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters;talosconfigpatches,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ichor-system,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its Events and its field manager.
const ControllerName = "talosoperation"

// Defaults of the Reconciler's timings.
const (
	DefaultPollInterval = 3 * time.Second
	DefaultLockWait     = 5 * time.Second
	DefaultDrainTimeout = 5 * time.Minute
	// DefaultRebootTimeout bounds a node's reboot, from the Reboot call to
	// the node running the rendered configuration and its Node Ready.
	DefaultRebootTimeout = 15 * time.Minute
	// DefaultAPIServerSettle is how long a kube-apiserver that never seemed
	// to go away must stay ready after an apply before the next control
	// plane goes (on real hardware its restart takes 15–45 s).
	DefaultAPIServerSettle = 90 * time.Second
	// DefaultAPIServerTimeout bounds the wait for /readyz after a restart.
	DefaultAPIServerTimeout = 5 * time.Minute
	// pausedRenew is how often a paused operation renews the lock it keeps.
	pausedRenew = time.Minute
)

// Reconciler reconciles TalosOperations.
type Reconciler struct {
	Client client.Client
	// APIReader reads the bundle Secret uncached.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Locker takes the cluster lock; nil means one on Client with the
	// API-backed liveness check.
	Locker *lock.Locker
	// Storage is the node-operation hook run before a drain; nil means none.
	Storage hook.Storage

	PollInterval     time.Duration
	LockWait         time.Duration
	DrainTimeout     time.Duration
	RebootTimeout    time.Duration
	APIServerSettle  time.Duration
	APIServerTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// SetupWithManager registers the reconciler. The operation's own status
// writes do not wake it (it requeues itself while it runs); its spec
// (paused) and annotations (resume) do.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	if r.Locker == nil {
		r.Locker = &lock.Locker{Client: r.Client, Check: lock.ClientChecker(r.APIReader)}
	}

	if r.Storage == nil {
		r.Storage = hook.None{}
	}

	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&r.PollInterval, DefaultPollInterval)
	def(&r.LockWait, DefaultLockWait)
	def(&r.DrainTimeout, DefaultDrainTimeout)
	def(&r.RebootTimeout, DefaultRebootTimeout)
	def(&r.APIServerSettle, DefaultAPIServerSettle)
	def(&r.APIServerTimeout, DefaultAPIServerTimeout)

	if r.Now == nil {
		r.Now = time.Now
	}

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosOperation{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A cluster's pause ending wakes its operations.
		Watches(&ichorv1alpha1.TalosCluster{}, ichorreconcile.ClusterMembers(r.Client, &ichorv1alpha1.TalosOperationList{})).
		Complete(r)
}

// scope is what one reconcile's steps share.
type scope struct {
	op      *ichorv1alpha1.TalosOperation
	cluster *ichorv1alpha1.TalosCluster
}

// Reconcile is get → deferred status patch → refusal, failure pause, lock,
// person's pause → one step of the operation's type.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	// Read from the API, not the cache: the steps have side effects (Reboot
	// is not idempotent), so a step must never run again from a status the
	// cache has not caught up with after this reconciler's own last write.
	op := &ichorv1alpha1.TalosOperation{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, op); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	if !op.DeletionTimestamp.IsZero() || completed(op) {
		// A finished operation holds nothing: give the lock back if it still has it.
		return ctrl.Result{}, r.release(ctx, op)
	}

	before := op.DeepCopy()

	defer func() {
		if err := r.patchStatus(ctx, before, op); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	op.Status.ObservedGeneration = op.Generation

	if refused := guard.CheckRunnable(op); refused != nil {
		// The webhook refuses such a type at admission; this one got in before
		// that rule existed (or with the webhook off).
		r.finish(op, ichorv1alpha1.OperationFailed, ichorv1alpha1.InvalidSpecReason, fmt.Sprintf(
			"operations of type %q are not implemented by this release of Ichor (it runs %s); nothing was done and the cluster lock was not taken: "+
				"delete this operation; %s", op.Spec.Type, strings.Join(guard.RunnableOperationTypes, ", "), refused.WayOut))

		return ctrl.Result{}, nil
	}

	if r.resume(op) {
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "Resumed", "Resume", "re-running step %s", op.Status.Step)
	}

	if op.Status.FailedStep != "" {
		// Paused on a failed step: the lock is Inactive and not renewed; a
		// resume re-runs the step (taking the lock again first).
		op.Status.Phase = ichorv1alpha1.OperationPaused

		return ctrl.Result{}, nil
	}

	s := &scope{op: op, cluster: &ichorv1alpha1.TalosCluster{}}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName}, s.cluster); err != nil {
		if apierrors.IsNotFound(err) {
			setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.InvalidSpecReason,
				fmt.Sprintf("TalosCluster %q not found in namespace %s; the operation waits for it", op.Spec.ClusterName, op.Namespace))

			if op.Status.Phase == "" {
				op.Status.Phase = ichorv1alpha1.OperationPending
			}

			return ctrl.Result{RequeueAfter: r.LockWait * 6}, nil
		}

		return ctrl.Result{}, err
	}

	// The cluster's pause stops the operation where it stands (its state
	// stays in status; no lock is taken or renewed); the cluster's watch
	// wakes it when the pause ends.
	if s.cluster.Spec.Paused {
		paused := ichorreconcile.PausedCondition("TalosCluster " + s.cluster.Name + "'s spec.paused")
		ichorreconcile.CountPausedSkip(ControllerName)
		apimeta.SetStatusCondition(&op.Status.Conditions, paused)
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.PausedReason, paused.Message)

		if op.Status.Phase == "" {
			op.Status.Phase = ichorv1alpha1.OperationPending
		}

		return ctrl.Result{}, nil
	}

	apimeta.RemoveStatusCondition(&op.Status.Conditions, ichorv1alpha1.PausedCondition)

	held, err := r.acquire(ctx, op)
	if err != nil || !held {
		return ctrl.Result{RequeueAfter: r.LockWait}, err
	}

	if op.Spec.Paused {
		op.Status.Phase = ichorv1alpha1.OperationPaused
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.PausedReason,
			"paused by spec.paused after step "+stepName(op)+"; the operation keeps the cluster lock; set spec.paused to false to go on")

		return ctrl.Result{RequeueAfter: pausedRenew}, nil
	}

	op.Status.Phase = ichorv1alpha1.OperationRunning

	return r.config(ctx, s)
}

func stepName(op *ichorv1alpha1.TalosOperation) string {
	if op.Status.Step == "" {
		return "(none yet)"
	}

	return op.Status.Step
}

func completed(op *ichorv1alpha1.TalosOperation) bool {
	return op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed
}

func (r *Reconciler) clusterKey(op *ichorv1alpha1.TalosOperation) types.NamespacedName {
	return types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName}
}

// acquire takes or renews the lock; when another holder has it, the
// operation waits (Pending before its first step) naming the holder.
func (r *Reconciler) acquire(ctx context.Context, op *ichorv1alpha1.TalosOperation) (bool, error) {
	res, err := r.Locker.Acquire(ctx, r.clusterKey(op), lock.OperationIdentity(op.Namespace, op.Name))
	if errors.Is(err, lock.ErrConflict) {
		return false, nil
	}

	if err != nil {
		return false, fmt.Errorf("take the cluster lock: %w", err)
	}

	if !res.Acquired {
		msg := fmt.Sprintf("waits for the cluster lock of %s, held by %s", op.Spec.ClusterName, res.Holder)
		if c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.LockAcquiredCondition); c == nil || c.Message != msg {
			r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, ichorv1alpha1.ClusterLockHeldReason, "Lock", "%s", msg)
		}

		setCond(op, ichorv1alpha1.LockAcquiredCondition, metav1.ConditionFalse, ichorv1alpha1.ClusterLockHeldReason, msg)
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ClusterLockHeldReason, msg)

		if op.Status.StartedAt == nil {
			op.Status.Phase = ichorv1alpha1.OperationPending
		}

		return false, nil
	}

	if res.TakenOverFrom != "" {
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "LockTakenOver", "Lock",
			"took the cluster lock over from %s, whose work is no longer active", res.TakenOverFrom)
	}

	setCond(op, ichorv1alpha1.LockAcquiredCondition, metav1.ConditionTrue, "Held", "holds the cluster lock as "+res.Holder)

	if op.Status.StartedAt == nil {
		now := metav1.NewTime(r.Now())
		op.Status.StartedAt = &now
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "Started", "Lock", "took the cluster lock of %s and started", op.Spec.ClusterName)
	}

	return true, nil
}

func (r *Reconciler) release(ctx context.Context, op *ichorv1alpha1.TalosOperation) error {
	if _, err := r.Locker.Release(ctx, r.clusterKey(op), lock.OperationIdentity(op.Namespace, op.Name)); err != nil && !errors.Is(err, lock.ErrConflict) {
		return err
	}

	return nil
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

	for i := range op.Status.Machines {
		if mp := &op.Status.Machines[i]; mp.Phase == ichorv1alpha1.MachineFailed {
			mp.Phase = ichorv1alpha1.MachineInProgress
			now := metav1.NewTime(r.Now())
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

// finish ends the operation.
func (r *Reconciler) finish(op *ichorv1alpha1.TalosOperation, phase, reason, msg string) {
	now := metav1.NewTime(r.Now())
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
	r.Recorder.Eventf(op, nil, typ, reason, "Complete", "%s", msg)
}

func (r *Reconciler) patchStatus(ctx context.Context, before, op *ichorv1alpha1.TalosOperation) error {
	if equality.Semantic.DeepEqual(before.Status, op.Status) {
		return nil
	}

	// Only this reconciler writes an operation's status, one reconcile at a
	// time per object: a plain merge patch cannot lose a write, and a
	// conflict with a person's spec edit (pause, resume) must not undo a step
	// whose side effect already happened.
	if err := r.Client.Status().Patch(ctx, op, client.MergeFrom(before)); err != nil {
		return err
	}

	if completed(op) {
		// Completed: the lock goes back now, not at the next event.
		return r.release(ctx, op)
	}

	return nil
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

// requestMachineReconcile asks the machine reconciler to look at m now.
func (r *Reconciler) requestMachineReconcile(ctx context.Context, m *ichorv1alpha1.TalosMachine) error {
	patch := client.MergeFrom(m.DeepCopy())

	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}

	m.Annotations[ichorv1alpha1.ReconcileRequestedAnnotation] = r.Now().UTC().Format(time.RFC3339Nano)

	return r.Client.Patch(ctx, m, patch)
}
