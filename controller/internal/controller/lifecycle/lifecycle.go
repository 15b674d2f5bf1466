// Package lifecycle holds the machine lifecycle reconciler: it provisions an
// approved machine (pinned maintenance fingerprint, insecure apply, following
// MachineStatus to running, join, Ready), provisions a wiped machine again,
// and removes a machine through its finalizer (evacuate, drain, etcd, reset,
// Node) (architecture, "Nodes"). Configuration changes of a provisioned
// machine belong to the talosmachine reconciler.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters;talosconfigpatches,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ichor-system,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its Events and its field manager.
const ControllerName = "machine-lifecycle"

// Defaults of the Reconciler's intervals.
const (
	DefaultPollInterval    = 3 * time.Second
	DefaultMonitorInterval = 30 * time.Second
	DefaultDrainTimeout    = 5 * time.Minute
	// DefaultResetGrace is how long a requested reset may take to start
	// before it is requested again (awaitReset: a node still running its
	// configuration then never received it).
	DefaultResetGrace = 3 * time.Minute
	// lockWait is how often a machine waiting for the cluster lock looks again.
	lockWait = 5 * time.Second
	// pausedWait is how often a paused or refused removal looks again.
	pausedWait = 15 * time.Second
)

// StorageHook evacuates a machine's storage before its removal.
type StorageHook = hook.Storage

// Reconciler provisions and removes TalosMachines.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// MaintenancePort is the port of maintenance nodes; zero means Talos's apid port.
	MaintenancePort int
	// Locker takes the cluster lock for control-plane joins and removals.
	Locker *lock.Locker
	// Storage evacuates storage before removal; nil is a no-op.
	Storage StorageHook
	// Workload reaches a cluster's Kubernetes API; nil means through a
	// control plane's admin kubeconfig.
	Workload WorkloadFunc
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock

	PollInterval    time.Duration
	MonitorInterval time.Duration
	DrainTimeout    time.Duration
	ResetGrace      time.Duration
	// Workers is how many machines are reconciled at once; zero means
	// machinestate.DefaultWorkers.
	Workers int
	// LookRate bounds the idle looks at provisioned machines per second, all
	// machines together (machinestate.Pace); zero means
	// machinestate.DefaultLookRate.
	LookRate float64

	workloads workload.Cache
	pace      machinestate.Pace
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.defaults(mgr)

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: machinestate.Workers(r.Workers)}).
		// Spec, annotation (trust, hold, reboot) and deletion changes wake it;
		// status writes do not: the reconciler polls at its own intervals.
		For(&ichorv1alpha1.TalosMachine{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A cluster's pause ending wakes its machines.
		Watches(&ichorv1alpha1.TalosCluster{}, ichorreconcile.ClusterMembers(r.Client, &ichorv1alpha1.TalosMachineList{})).
		Complete(r)
}

func (r *Reconciler) defaults(mgr ctrl.Manager) {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	r.fill()
	r.pace.Reader, r.pace.Rate = r.Client, r.LookRate
}

func (r *Reconciler) fill() {
	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	if r.Locker == nil {
		r.Locker = &lock.Locker{Client: r.Client, Check: lock.ClientChecker(r.APIReader)}
	}

	if r.Storage == nil {
		r.Storage = hook.None{}
	}

	if r.Workload == nil {
		r.Workload = r.workloadFromControlPlane
	}

	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}

	def(&r.PollInterval, DefaultPollInterval)
	def(&r.MonitorInterval, DefaultMonitorInterval)
	def(&r.DrainTimeout, DefaultDrainTimeout)
	def(&r.ResetGrace, DefaultResetGrace)
}

// scope is what one reconcile of one machine shares.
type scope struct {
	machine *ichorv1alpha1.TalosMachine
	// before is the machine as the reconcile read it.
	before *ichorv1alpha1.TalosMachine
	state  *machinestate.State
	sk     *ichorreconcile.Scope[*ichorv1alpha1.TalosMachine]
	// look says the state is loaded for the monitor's look, which only
	// dials (machinestate.LoadTrustedForLook); a step that sends the node
	// something loads again, fresh (fresh).
	look bool
}

// fresh drops a state loaded for a look, so that the next load reads the
// bundle Secret from the API server.
func (s *scope) fresh() {
	if s.look {
		s.state, s.look = nil, false
	}
}

// persist writes the status now, strictly (a stale read fails instead of
// deciding twice): before a step that must be recorded first.
func (s *scope) persist(ctx context.Context) error { return s.sk.Persist(ctx) }

// now is the time the reconcile started, from the controller's clock.
func (s *scope) now() metav1.Time { return metav1.NewTime(s.sk.Now) }

// Reconcile runs the reconciler on the skeleton (reconcile.Controller):
// removal through the finalizer when deleting, provisioning while not
// provisioned, monitoring (re-provisioning) once provisioned. Each call does
// at most one step that is not idempotent and its status is written before
// the next one runs, so a controller killed between two steps resumes at the
// recorded one.
//
// A poll (a requeue while waiting on a node) goes back in the queue at low
// priority: controller-runtime's priority queue puts a change (a machine
// created, approved or edited) before it, so that a thousand machines
// installing at once, polled every few seconds each, cannot starve a machine
// that has not started, such as the first control plane the others wait for.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.fill()

	res, err := r.controller().Reconcile(ctx, req)
	if err == nil && res.RequeueAfter > 0 {
		res.Priority = ptr.To(handler.LowPriority)
	}

	return res, err
}

// controller is the reconciler on the skeleton. It owns the lifecycle's
// conditions (Provisioned, NodeHealthy, Deleting, FingerprintTrusted,
// IdentityConflict) and status fields; the configuration reconciler is the
// kind's primary (Paused, observedGeneration), and Ready, Reconciling and
// Stalled are the summary of both (SummarizeTalosMachine). The cluster's
// pause stops every step, a removal's included (as Cluster API's does).
func (r *Reconciler) controller() *ichorreconcile.Controller[*ichorv1alpha1.TalosMachine] {
	return &ichorreconcile.Controller[*ichorv1alpha1.TalosMachine]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader, Clock: r.Clock,
		New: func() *ichorv1alpha1.TalosMachine { return &ichorv1alpha1.TalosMachine{} },
		Owned: []string{
			ichorv1alpha1.ProvisionedCondition, ichorv1alpha1.NodeHealthyCondition, ichorv1alpha1.DeletingCondition,
			ichorv1alpha1.FingerprintTrustedCondition, ichorv1alpha1.IdentityConflictCondition,
		},
		OwnStatus: func(dst, src *ichorv1alpha1.TalosMachine) {
			dst.Status.Stage, dst.Status.Installed, dst.Status.NodeName = src.Status.Stage, src.Status.Installed, src.Status.NodeName
			dst.Status.MaintenanceFingerprint = src.Status.MaintenanceFingerprint
			dst.Status.ResetRequestedAt, dst.Status.ConfigSentAt = src.Status.ResetRequestedAt, src.Status.ConfigSentAt
			dst.Status.Reinstalls, dst.Status.Removal = src.Status.Reinstalls, src.Status.Removal
		},
		Summarize: ichorv1alpha1.SummarizeTalosMachine,
		// The finalizer goes on an approved machine before anything is sent
		// to its node: from then on a deletion runs the removal sequence.
		Finalizer:      ichorv1alpha1.MachineFinalizer,
		NeedsFinalizer: approved,
		Finalize:       r.step(r.remove),
		Phases:         []ichorreconcile.Phase[*ichorv1alpha1.TalosMachine]{r.step(r.lifecycle)},
	}
}

// step adapts a step of the lifecycle to a phase of the skeleton.
func (r *Reconciler) step(f func(context.Context, *scope) (ctrl.Result, error)) ichorreconcile.Phase[*ichorv1alpha1.TalosMachine] {
	return func(ctx context.Context, sk *ichorreconcile.Scope[*ichorv1alpha1.TalosMachine]) (ctrl.Result, error) {
		return f(ctx, &scope{machine: sk.Object, before: sk.Object.DeepCopy(), sk: sk})
	}
}

func approved(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved
}

// lifecycle provisions an approved machine, or monitors a provisioned one.
func (r *Reconciler) lifecycle(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !approved(s.machine) {
		return ctrl.Result{}, nil
	}

	if provisioned(s.machine) {
		return r.monitor(ctx, s)
	}

	return r.provision(ctx, s)
}

// load reads the cluster and bundle, once per reconcile, and renders when
// withRender says the step sends the configuration (only the first send
// does: the other steps talk to the node with the bundle's credentials).
func (r *Reconciler) load(ctx context.Context, s *scope, withRender bool) error {
	if s.state != nil && (!withRender || s.state.Result != nil) {
		return nil
	}

	var (
		st  *machinestate.State
		err error
	)

	switch {
	case withRender:
		st, err = machinestate.Load(ctx, r.Client, r.APIReader, s.machine)
	case s.look:
		st, err = machinestate.LoadTrustedForLook(ctx, r.Client, r.APIReader, s.machine)
	default:
		st, err = machinestate.LoadTrusted(ctx, r.Client, r.APIReader, s.machine)
	}

	if err != nil {
		return err
	}

	s.state = st

	return nil
}

func (r *Reconciler) cluster(ctx context.Context, m *ichorv1alpha1.TalosMachine) (*ichorv1alpha1.TalosCluster, error) {
	c := &ichorv1alpha1.TalosCluster{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}, c); err != nil {
		return nil, err
	}

	return c, nil
}

func provisioned(m *ichorv1alpha1.TalosMachine) bool {
	return apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition)
}

func setCond(m *ichorv1alpha1.TalosMachine, t string, st metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: t, Status: st, Reason: reason, Message: msg, ObservedGeneration: m.Generation,
	})
}

// progress records what the lifecycle does or waits for, on the condition
// of the machine's stage: Deleting while it is removed, NodeHealthy once it
// is provisioned, Provisioned before. Ready summarizes it
// (SummarizeTalosMachine).
func progress(m *ichorv1alpha1.TalosMachine, reason, msg string) {
	switch {
	case !m.DeletionTimestamp.IsZero():
		setCond(m, ichorv1alpha1.DeletingCondition, metav1.ConditionTrue, reason, msg)
	case provisioned(m):
		setCond(m, ichorv1alpha1.NodeHealthyCondition, metav1.ConditionFalse, reason, msg)
	default:
		setCond(m, ichorv1alpha1.ProvisionedCondition, metav1.ConditionFalse, reason, msg)
	}
}

func (r *Reconciler) lockKey(m *ichorv1alpha1.TalosMachine) types.NamespacedName {
	return types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}
}

// takeLock takes (or renews) the cluster lock for m's join or removal. It
// reports false, with Ready saying who holds it, when another holder has it.
func (r *Reconciler) takeLock(ctx context.Context, m *ichorv1alpha1.TalosMachine, what string) (bool, error) {
	res, err := r.Locker.Acquire(ctx, r.lockKey(m), lock.MachineIdentity(m.Namespace, m.Name))
	if err != nil {
		if errors.Is(err, lock.ErrConflict) {
			return false, nil
		}

		return false, fmt.Errorf("take the cluster lock: %w", err)
	}

	if !res.Acquired && m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		if took, err := r.takeOverTransition(ctx, m, res.Holder); err != nil || took {
			return false, err // the next reconcile acquires it
		}
	}

	if !res.Acquired {
		progress(m, ichorv1alpha1.ClusterLockHeldReason, fmt.Sprintf("%s waits for the cluster lock, held by %s", what, res.Holder))

		return false, nil
	}

	return true, nil
}

func (r *Reconciler) releaseLock(ctx context.Context, m *ichorv1alpha1.TalosMachine) error {
	if _, err := r.Locker.Release(ctx, r.lockKey(m), lock.MachineIdentity(m.Namespace, m.Name)); err != nil {
		return fmt.Errorf("release the cluster lock: %w", err)
	}

	return nil
}

func (r *Reconciler) eventf(m *ichorv1alpha1.TalosMachine, typ, reason, action, format string, args ...any) {
	r.Recorder.Eventf(m, nil, typ, reason, action, format, args...)
}

func warnf(r *Reconciler, m *ichorv1alpha1.TalosMachine, reason, action, format string, args ...any) {
	r.eventf(m, corev1.EventTypeWarning, reason, action, format, args...)
}
