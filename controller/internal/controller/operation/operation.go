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
// One reconcile runs at most one step of each machine it works on. The
// reconciler runs on the reconcile skeleton (controller/internal/reconcile):
// its phases are completed → refused type → resume → lock and pause →
// etcd restore → cni → kube-proxy → ichor → machine selection →
// pre-checks (talos) → rollout, and every Talos write (Apply, Upgrade,
// Reboot, Reset, EtcdRecover, Bootstrap) is preceded by a strict status
// write that records it, as is the creation of an installer Job.
//
// This release runs operations of type config (the rollout of changes the
// machine reconciler does not apply by itself, config.go), talos (Talos
// upgrades, talos.go), kubernetes (kubernetes.go), node (reboot, shutdown or
// reset of one machine, node.go), shutdown (the whole cluster, shutdown.go),
// etcd-restore (a snapshot restored into the live cluster, restore.go, with
// its progress also kept in a marker next to the backups), cni (a Cilium
// chart upgrade through the ichor-cni Job, cni.go), kube-proxy (the
// ordered switch between Talos's kube-proxy and Cilium's replacement,
// kubeproxy.go) and ichor (an upgrade of Ichor itself through the
// installer Job of the target release, its image resolved to a digest and
// its signature verified first, ichor.go); a type this release does not
// run is refused with a message that says so, before it takes the lock.
package operation

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/selftrust"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters;talosconfigpatches;talosetcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ichor-system,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update
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
	// DefaultRebootGrace is how long a node operation's recorded Reboot may
	// leave the node running on its old boot before it is taken as never
	// sent and requested again (rebootNeverStarted).
	DefaultRebootGrace = 3 * time.Minute
	// DefaultAPIServerSettle is how long a kube-apiserver that never seemed
	// to go away must stay ready after an apply before the next control
	// plane goes (on real hardware its restart takes 15–45 s).
	DefaultAPIServerSettle = 90 * time.Second
	// DefaultAPIServerTimeout bounds the wait for /readyz after a restart.
	DefaultAPIServerTimeout = 5 * time.Minute
	// DefaultHeldWait is how often an operation whose remaining machines
	// all carry the hold annotation looks again (a TalosMachine's change
	// does not wake an operation).
	DefaultHeldWait = time.Minute
	// pausedRenew is how often a paused operation renews the lock it keeps.
	pausedRenew = time.Minute
)

// Reconciler reconciles TalosOperations.
type Reconciler struct {
	Client client.Client
	// APIReader reads the operation (see controller) and the bundle Secret uncached.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Locker takes the cluster lock; nil means one on Client with the
	// API-backed liveness check.
	Locker *lock.Locker
	// Storage is the node-operation hook run before a drain; nil means none.
	Storage hook.Storage
	// OwnNode is the Kubernetes Node the controller runs on (the downward
	// API's spec.nodeName): a cluster shutdown sends it its Shutdown last.
	// Empty when the controller runs outside the cluster it manages.
	OwnNode string
	// SelfTrust is the controller's own Kubernetes client's trust: a CA
	// rotation of the cluster it runs in (OwnNode is one of its machines)
	// adds the accepted Kubernetes CAs to it before the API servers switch.
	// Nil when the client has no CA of its own to add to.
	SelfTrust *selftrust.Transport
	// selfTrusted: operation UID/stage pairs SelfTrust was brought up to date for.
	selfTrusted sync.Map
	// Transport carries the requests to etcd restores' backup stores; nil
	// means Go's default.
	Transport http.RoundTripper
	// InstallerImage is the image of the ichor-cni Job a cni operation runs;
	// empty means this build's installer image.
	InstallerImage string
	// CNIJobTimeout bounds one Helm run of a cni operation; zero means
	// DefaultCNIJobTimeout.
	CNIJobTimeout time.Duration
	// TempDir holds an etcd restore's checked snapshot until it is uploaded;
	// empty means the system's temporary directory.
	TempDir string
	// Namespace is Ichor's namespace, where an ichor operation's installer
	// Job runs; empty means install.Namespace.
	Namespace string
	// Clientset reads a failed installer Job's pod log; nil means one made
	// from the manager's configuration.
	Clientset kubernetes.Interface
	// Registry reaches the registry of installer images; the zero value
	// reads anonymously over the default transport.
	Registry installerimage.Registry
	// TrustedRoot is the Sigstore an installer image's signature is checked
	// against; nil means the public-good root embedded in this build. Tests
	// give their own Sigstore's root; nothing turns the check off (only an
	// operation's recorded spec.ichor.installerSignature: skip does).
	TrustedRoot *installerimage.Trust
	// SignerIdentity is who must have signed an installer image; the zero
	// value means Ichor's release workflow (installerimage.ReleaseIdentity).
	SignerIdentity installerimage.Identity

	PollInterval     time.Duration
	LockWait         time.Duration
	DrainTimeout     time.Duration
	RebootTimeout    time.Duration
	RebootGrace      time.Duration
	APIServerSettle  time.Duration
	APIServerTimeout time.Duration
	HeldWait         time.Duration
	// RootCASettle is how long a CA rotation waits, once every namespace
	// trusts the new Kubernetes CA, before it drops the old one; zero means
	// DefaultRootCASettle.
	RootCASettle time.Duration
	// TokenSettle is how long a key rotation waits, once the new
	// service-account key signs, before the old one stops verifying: the
	// time kubelets take to re-issue the tokens they project into pods.
	// Zero means DefaultTokenSettle.
	TokenSettle time.Duration
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock

	skeleton *ichorreconcile.Controller[*ichorv1alpha1.TalosOperation]
}

// scope is what the phases of one reconcile share: the operation
// (s.Object), its cluster (s.Cluster, nil when it does not exist) and the
// strict status write (s.Persist).
type scope = ichorreconcile.Scope[*ichorv1alpha1.TalosOperation]

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

	if r.Clientset == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("a clientset for the installer Job's log: %w", err)
		}

		r.Clientset = cs
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
	def(&r.RebootGrace, DefaultRebootGrace)
	def(&r.APIServerSettle, DefaultAPIServerSettle)
	def(&r.APIServerTimeout, DefaultAPIServerTimeout)
	def(&r.HeldWait, DefaultHeldWait)
	def(&r.CNIJobTimeout, DefaultCNIJobTimeout)
	def(&r.RootCASettle, DefaultRootCASettle)
	def(&r.TokenSettle, DefaultTokenSettle)

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosOperation{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A cluster's pause ending wakes its operations.
		Watches(&ichorv1alpha1.TalosCluster{}, ichorreconcile.ClusterMembers(r.Client, &ichorv1alpha1.TalosOperationList{})).
		Complete(r)
}

// controller is the reconciler on the skeleton, the only writer of an
// operation's status. The skeleton reads the operation from the API, not
// the cache: the steps have side effects (Reboot is not idempotent), so a
// step must never run again from a status the cache has not caught up with
// after this reconciler's own last write; and every Talos write is preceded
// by the strict s.Persist, which refuses a decision taken on a stale read.
//
// The cluster's spec.paused is the skeleton's check (no lock is taken or
// renewed, the state stays in status; summarize says so in Ready). The
// operation's own spec.paused is not the skeleton's Paused: it stops the
// operation between steps while it keeps the cluster lock (lockPhase).
func (r *Reconciler) controller() *ichorreconcile.Controller[*ichorv1alpha1.TalosOperation] {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}

	return &ichorreconcile.Controller[*ichorv1alpha1.TalosOperation]{
		Name: ControllerName, Client: apiOperations{Client: r.Client, api: r.APIReader}, APIReader: r.APIReader, Clock: r.Clock,
		New:     func() *ichorv1alpha1.TalosOperation { return &ichorv1alpha1.TalosOperation{} },
		Owned:   []string{ichorv1alpha1.ReadyCondition, ichorv1alpha1.LockAcquiredCondition, ichorv1alpha1.PreChecksPassedCondition},
		Primary: true,
		OwnStatus: func(dst, src *ichorv1alpha1.TalosOperation) {
			conds, gen := dst.Status.Conditions, dst.Status.ObservedGeneration
			dst.Status = *src.Status.DeepCopy()
			dst.Status.Conditions, dst.Status.ObservedGeneration = conds, gen
		},
		Summarize: summarize,
		Phases: []ichorreconcile.Phase[*ichorv1alpha1.TalosOperation]{
			r.completedPhase, r.refusePhase, r.resumePhase, r.lockPhase, r.restorePhase, r.cniPhase, r.kubeProxyPhase, r.ichorPhase, r.selectPhase, r.precheckPhase, r.rolloutPhase,
		},
	}
}

// apiOperations reads TalosOperations from the API server and everything
// else through Client (the cache).
type apiOperations struct {
	client.Client

	api client.Reader
}

// Get reads a TalosOperation uncached.
func (c apiOperations) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*ichorv1alpha1.TalosOperation); ok {
		return c.api.Get(ctx, key, obj, opts...)
	}

	return c.Client.Get(ctx, key, obj, opts...)
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

func (r *Reconciler) now() time.Time { return r.Clock.Now() }

func (r *Reconciler) installerImage() string {
	if r.InstallerImage != "" {
		return r.InstallerImage
	}

	return install.InstallerImage(version.Get().Version)
}

// halted is an operation no later phase acts on: completed, or paused on a
// failed step.
func halted(op *ichorv1alpha1.TalosOperation) bool {
	return completed(op) || op.Status.FailedStep != ""
}

// completedPhase: a finished operation holds nothing; it gives the lock
// back if it still has it.
func (r *Reconciler) completedPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	if !completed(s.Object) {
		return ctrl.Result{}, nil
	}

	return ctrl.Result{}, r.release(ctx, s.Object)
}

// refusePhase fails an operation this release does not run (its type, or
// a spec CheckRunnable refuses), before it takes the lock.
func (r *Reconciler) refusePhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if halted(op) {
		return ctrl.Result{}, nil
	}

	refused := guard.CheckRunnable(op)
	if refused == nil {
		return ctrl.Result{}, nil
	}

	// The webhook refuses such an operation at admission; this one got in
	// before that rule existed (or with the webhook off).
	return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationFailed, ichorv1alpha1.InvalidSpecReason, fmt.Sprintf(
		"this release of Ichor does not run this operation (%s: %s); nothing was done and the cluster lock was not taken: delete this operation",
		refused.Field, refused.Message()))
}

// resumePhase acts on a new resume token; an operation still paused on a
// failed step stays so (the lock is Inactive and not renewed; a resume
// re-runs the step, taking the lock again first).
func (r *Reconciler) resumePhase(_ context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if completed(op) {
		return ctrl.Result{}, nil
	}

	if r.resume(op) {
		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "Resumed", "Resume", "re-running step %s", op.Status.Step)
	}

	if op.Status.FailedStep != "" {
		op.Status.Phase = ichorv1alpha1.OperationPaused
	}

	return ctrl.Result{}, nil
}

// lockPhase waits for the cluster to exist, takes or renews the cluster
// lock, and holds a person's pause (spec.paused) between steps, keeping the
// lock.
func (r *Reconciler) lockPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if halted(op) {
		return ctrl.Result{}, nil
	}

	if s.Cluster == nil {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.InvalidSpecReason,
			fmt.Sprintf("TalosCluster %q not found in namespace %s; the operation waits for it", op.Spec.ClusterName, op.Namespace))

		if op.Status.Phase == "" {
			op.Status.Phase = ichorv1alpha1.OperationPending
		}

		return ctrl.Result{RequeueAfter: r.LockWait * 6}, nil
	}

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

	if c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil && c.Reason == ichorv1alpha1.PausedReason {
		// The pause (its own or its cluster's) ended.
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason, "running again from step "+stepName(op))
	}

	op.Status.Phase = ichorv1alpha1.OperationRunning

	return ctrl.Result{}, nil
}

// summarize is the skeleton's summary of an operation about to be written:
// while its cluster's pause holds it (the Paused condition), Ready says so,
// and an operation that has not started is Pending.
func summarize(op *ichorv1alpha1.TalosOperation) {
	if completed(op) {
		return
	}

	c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.PausedCondition)
	if c == nil || c.Status != metav1.ConditionTrue {
		return
	}

	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.PausedReason, c.Message)

	if op.Status.Phase == "" {
		op.Status.Phase = ichorv1alpha1.OperationPending
	}
}
