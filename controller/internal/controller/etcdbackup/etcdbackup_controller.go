// Package etcdbackup holds the TalosEtcdBackup reconciler (architecture,
// "Backup, recovery, certificates"): on the backup's schedule, or when the
// backup-requested-at annotation carries a new token (`ichor etcd backup
// now`, Back up now in the console), it reads a snapshot from a healthy
// non-leader control plane through Talos's EtcdSnapshot, checks it with
// etcd's own snapshot code, encrypts it with age to the backup's recipients
// and uploads it with its metadata (contracts/pkg/etcdbackup's layout), then
// applies retention and lists the snapshots in status. Failures and
// staleness are conditions, Events and ichor_etcd_backup_* metrics.
//
// Neither the age recipients nor the S3 credentials appear in status,
// Events, logs or errors: messages name Secrets and keys, never contents.
package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/backupstore"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosetcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosetcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its Events and its logs.
const ControllerName = "etcdbackup"

// DefaultRetryAfter is how long after a failed attempt the next one starts,
// when the schedule's next run is later.
const DefaultRetryAfter = 5 * time.Minute

// storeRecheck is how often a backup whose store or Secrets failed is looked at again.
const storeRecheck = time.Minute

// snapshotTimeout bounds one snapshot, from the node's first byte to the upload's last.
const snapshotTimeout = 30 * time.Minute

// Reconciler reconciles TalosEtcdBackups.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets uncached: the controller gets the Secrets it
	// is pointed at and never caches every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock
	// TempDir holds a snapshot while it is checked and encrypted (twice its
	// size); empty means the system's temporary directory.
	TempDir string
	// RetryAfter is how long after a failed attempt the next one starts;
	// zero means DefaultRetryAfter.
	RetryAfter time.Duration
	// Transport carries the S3 requests; nil means Go's default.
	Transport http.RoundTripper

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosEtcdBackup]
	// killPoint is the chaos test's hook (nil elsewhere): asked at every
	// step boundary of an attempt (killedAt), true kills the controller there.
	killPoint atomic.Pointer[func(backup, step string) bool]
}

// SetupWithManager registers the reconciler.
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

	r.skeleton = r.controller()

	return watchRestoreDeletions(ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosEtcdBackup{}).
		Watches(&ichorv1alpha1.TalosCluster{}, reconcile.ClusterMembers(mgr.GetClient(), &ichorv1alpha1.TalosEtcdBackupList{}))).
		Complete(r)
}

// controller is the reconciler on the skeleton: it owns Ready, Stale,
// StoreInCluster, Paused and the whole status.
func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosEtcdBackup] {
	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	return &reconcile.Controller[*ichorv1alpha1.TalosEtcdBackup]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader, Clock: r.Clock,
		New:     func() *ichorv1alpha1.TalosEtcdBackup { return &ichorv1alpha1.TalosEtcdBackup{} },
		Owned:   []string{ichorv1alpha1.ReadyCondition, ichorv1alpha1.StaleCondition, ichorv1alpha1.StoreInClusterCondition},
		Primary: true,
		OwnStatus: func(dst, src *ichorv1alpha1.TalosEtcdBackup) {
			conds, gen := dst.Status.Conditions, dst.Status.ObservedGeneration
			dst.Status = *src.Status.DeepCopy()
			dst.Status.Conditions, dst.Status.ObservedGeneration = conds, gen
		},
		Phases: []reconcile.Phase[*ichorv1alpha1.TalosEtcdBackup]{r.reconcileStoreLocation, r.reconcileBackup},
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	if r.killPoint.Load() != nil {
		// A kill cancels this context: nothing after it is written, as
		// when the process dies there.
		var cancel context.CancelFunc

		ctx, cancel = context.WithCancel(ctx)
		defer cancel()

		ctx = context.WithValue(ctx, killKey{}, cancel)
	}

	return r.skeleton.Reconcile(ctx, req)
}

// The step boundaries of an attempt, the chaos test's kill points.
const (
	stepRecorded     = "attempt recorded"
	stepStoreChecked = "store checked"
	stepSnapshotRead = "snapshot read"
	stepVerified     = "snapshot verified"
	stepEncrypted    = "snapshot encrypted"
	stepUploaded     = "snapshot uploaded"
)

// killedAt is a step boundary of an attempt: it reports whether the chaos
// test killed the controller there, and then cancels the reconcile's
// context, so the reconcile ends writing nothing more.
func (r *Reconciler) killedAt(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, step string) bool {
	k := r.killPoint.Load()
	if k == nil || !(*k)(b.Name, step) {
		return false
	}

	if cancel, ok := ctx.Value(killKey{}).(context.CancelFunc); ok {
		cancel()
	}

	return true
}

type killKey struct{}

// errKilled ends a reconcile the chaos test killed.
var errKilled = errors.New("killed by the chaos test")

func (r *Reconciler) retryAfter() time.Duration {
	if r.RetryAfter > 0 {
		return r.RetryAfter
	}

	return DefaultRetryAfter
}

// reconcileStoreLocation sets StoreInCluster: True when the store is a
// Service or an address in the cluster's pod or service range (a restore
// into the live cluster refuses such a store), False otherwise.
func (r *Reconciler) reconcileStoreLocation(_ context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosEtcdBackup]) (ctrl.Result, error) {
	b := s.Object

	cond := metav1.Condition{
		Type: ichorv1alpha1.StoreInClusterCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.StoreOutsideClusterReason,
		Message: "the store is neither a Service nor an address of the cluster's pod or service range",
	}
	if why := guard.BackupStoreInCluster(b, s.Cluster); why != "" {
		cond.Status, cond.Reason = metav1.ConditionTrue, ichorv1alpha1.StoreInClusterReason
		cond.Message = fmt.Sprintf("the store lives inside the cluster it backs up (%s): snapshots are still taken, "+
			"but a restore into the live cluster will be refused, since it writes its marker to the store after the API server is down; "+
			"point spec.s3.endpoint at a store outside the cluster", why)
	}

	apimeta.SetStatusCondition(&b.Status.Conditions, cond)

	return ctrl.Result{}, nil
}

// failure is an attempt or a check that failed: the reason is a condition
// reason, the message names what to fix and never a secret.
type failure struct {
	reason, msg string
	// killed: the chaos test killed the controller during the attempt.
	killed bool
}

func (f *failure) Error() string { return f.msg }

func fail(reason, format string, args ...any) *failure {
	return &failure{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// reconcileBackup recreates the operations of restores the API rolled back
// past (markers.go), then takes a snapshot when one is due, applies
// retention (never to a snapshot a running restore uses), lists the
// snapshots and sets Ready and Stale. While a restore of the backup runs,
// its markers are looked at again every markerRecheck.
func (r *Reconciler) reconcileBackup(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosEtcdBackup]) (ctrl.Result, error) {
	var rst restores
	if st, f := r.openStore(ctx, s.Object); f == nil {
		rst = r.reconcileRestoreMarkers(ctx, s.Object, st)
	}

	res, err := r.reconcileSnapshots(ctx, s, rst.inUse)
	if rst.running && (res.RequeueAfter == 0 || res.RequeueAfter > markerRecheck) {
		res.RequeueAfter = markerRecheck
	}

	return res, err
}

// reconcileSnapshots takes a snapshot when one is due, applies retention,
// lists the snapshots and sets Ready and Stale.
func (r *Reconciler) reconcileSnapshots(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosEtcdBackup], inUse map[string]bool) (ctrl.Result, error) {
	b, now := s.Object, s.Now
	log := logf.FromContext(ctx)

	seed(b)

	sched, serr := etcdbackup.ParseSchedule(b.Spec.Schedule)
	if serr != nil {
		// The webhook refuses such a schedule; one written without it
		// waits for a spec change, which the watch brings.
		r.setReady(b, metav1.ConditionFalse, ichorv1alpha1.InvalidScheduleReason, serr.Error()+"; fix spec.schedule")

		return ctrl.Result{}, nil //nolint:nilerr // recorded in Ready; retrying cannot fix a spec
	}

	st, f := r.openStore(ctx, b)

	var interruptedAt time.Time
	if b.Status.LastScheduleTime != nil {
		interruptedAt = b.Status.LastScheduleTime.Time
	}

	if kind := r.due(b, sched, now); kind != "" {
		if f == nil && s.Cluster == nil {
			f = fail(ichorv1alpha1.UnknownClusterReason, "TalosCluster %q does not exist in namespace %q; name an existing cluster in spec.clusterName",
				b.Spec.ClusterName, b.Namespace)
		}

		// The attempt is recorded before it starts, so a second reconcile
		// (or a restarted controller that read this) does not start another.
		start := metav1.NewTime(now)
		b.Status.LastScheduleTime = &start

		if err := s.Persist(ctx); err != nil {
			return ctrl.Result{}, err
		}

		if kind == kindInterrupted {
			// Only after the strict write: a reconcile that read a stale
			// copy of the backup (its attempt's end not cached yet) fails it.
			r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ichorv1alpha1.SnapshotInterruptedReason, "Snapshot",
				"the attempt recorded at %s never ended (the controller stopped during it); trying again", interruptedAt.UTC().Format(time.RFC3339))
		}

		if r.killedAt(ctx, b, stepRecorded) {
			return ctrl.Result{}, errKilled
		}

		if f == nil {
			f = r.attempt(ctx, b, s.Cluster, st, now)
		}

		if f != nil && f.killed {
			return ctrl.Result{}, errKilled
		}

		r.finishAttempt(ctx, b, kind, f)
	}

	if f != nil && f.reason != "" && st == nil {
		// no store to list: the Secrets or the endpoint are wrong
		r.setReady(b, metav1.ConditionFalse, f.reason, f.msg)
		r.setStale(b, sched, now)

		return ctrl.Result{RequeueAfter: min(storeRecheck, r.wait(b, sched, now))}, nil
	}

	if lf := r.retain(ctx, b, st, now, inUse); lf != nil {
		r.setReady(b, metav1.ConditionFalse, lf.reason, lf.msg)
		r.setStale(b, sched, now)

		return ctrl.Result{RequeueAfter: min(storeRecheck, r.wait(b, sched, now))}, nil //nolint:nilerr // recorded in Ready, looked at again soon
	}

	switch {
	case failedLast(b):
		r.setReady(b, metav1.ConditionFalse, readyReasonOfFailure(b), "the last snapshot failed: "+b.Status.LastFailure)
	case b.Status.LastSuccessfulTime != nil:
		r.setReady(b, metav1.ConditionTrue, ichorv1alpha1.SnapshotStoredReason, fmt.Sprintf("the last snapshot was stored at %s; the next is due at %s",
			b.Status.LastSuccessfulTime.UTC().Format(time.RFC3339), r.nextRun(b, sched).Format(time.RFC3339)))
	default:
		r.setReady(b, metav1.ConditionTrue, ichorv1alpha1.WaitingForFirstSnapshotReason,
			"the store answers; the first snapshot is due at "+r.nextRun(b, sched).Format(time.RFC3339))
	}

	r.setStale(b, sched, now)
	log.V(1).Info("backup reconciled", "snapshots", len(b.Status.Snapshots))

	return ctrl.Result{RequeueAfter: r.wait(b, sched, now)}, nil
}

// readyReasonOfFailure is the Ready reason after a failed attempt, kept in
// the attempt's own words (LastFailure is "<Reason>: <message>").
func readyReasonOfFailure(b *ichorv1alpha1.TalosEtcdBackup) string {
	if c := apimeta.FindStatusCondition(b.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil && c.Status == metav1.ConditionFalse {
		return c.Reason
	}

	return ichorv1alpha1.SnapshotFailedReason
}

// failedLast reports whether the last attempt failed.
func failedLast(b *ichorv1alpha1.TalosEtcdBackup) bool {
	return b.Status.LastFailureTime != nil &&
		(b.Status.LastSuccessfulTime == nil || !b.Status.LastSuccessfulTime.After(b.Status.LastFailureTime.Time))
}

// Kinds of attempt.
const (
	kindRequested   = "requested"
	kindScheduled   = "scheduled"
	kindRetry       = "retry"
	kindInterrupted = "interrupted"
)

// due says why a snapshot is due now ("" when none is): a new request
// token, the schedule (unless suspended), or a retry after a failure.
func (r *Reconciler) due(b *ichorv1alpha1.TalosEtcdBackup, sched cron.Schedule, now time.Time) string {
	if tok := b.Annotations[ichorv1alpha1.BackupRequestedAnnotation]; tok != "" && tok != b.Status.LastHandledRequest {
		return kindRequested
	}

	if b.Spec.Suspend {
		return ""
	}

	if interrupted(b) {
		return kindInterrupted
	}

	if !now.Before(r.nextRun(b, sched)) {
		return kindScheduled
	}

	if failedLast(b) && !now.Before(b.Status.LastFailureTime.Add(r.retryAfter())) {
		return kindRetry
	}

	return ""
}

// interrupted reports whether the last attempt was recorded (it is, before
// it starts) but never ended: neither a success nor a failure is as recent.
// The controller stopped during it; without this the schedule would wait
// for its next run, and the one this attempt stood for would be lost.
// (A reconcile that read a stale copy fails its strict record of the new
// attempt, so a cache behind the attempt's end starts none.)
func interrupted(b *ichorv1alpha1.TalosEtcdBackup) bool {
	st := b.Status
	if st.LastScheduleTime == nil {
		return false
	}

	after := func(t *metav1.Time) bool { return t == nil || st.LastScheduleTime.After(t.Time) }

	return after(st.LastSuccessfulTime) && after(st.LastFailureTime)
}

func (r *Reconciler) nextRun(b *ichorv1alpha1.TalosEtcdBackup, sched cron.Schedule) time.Time {
	var last *time.Time
	if b.Status.LastScheduleTime != nil {
		last = &b.Status.LastScheduleTime.Time
	}

	return etcdbackup.NextRun(sched, last, b.CreationTimestamp.Time)
}

// wait is how long until something changes by itself: the next run, the
// next retry, or the moment the backup turns stale.
func (r *Reconciler) wait(b *ichorv1alpha1.TalosEtcdBackup, sched cron.Schedule, now time.Time) time.Duration {
	at := []time.Time{r.staleAfter(b, sched)}
	if !b.Spec.Suspend {
		at = append(at, r.nextRun(b, sched))

		if failedLast(b) {
			at = append(at, b.Status.LastFailureTime.Add(r.retryAfter()))
		}
	}

	d := time.Duration(1<<63 - 1)

	for _, t := range at {
		if w := t.Sub(now); w > 0 && w < d {
			d = w
		}
	}

	if d == time.Duration(1<<63-1) {
		d = storeRecheck
	}

	// A second past the time, so the reconcile sees it has come.
	return d + time.Second
}

func (r *Reconciler) staleAfter(b *ichorv1alpha1.TalosEtcdBackup, sched cron.Schedule) time.Time {
	var last *time.Time
	if b.Status.LastSuccessfulTime != nil {
		last = &b.Status.LastSuccessfulTime.Time
	}

	return etcdbackup.StaleAfter(sched, last, b.CreationTimestamp.Time)
}

func (r *Reconciler) setStale(b *ichorv1alpha1.TalosEtcdBackup, sched cron.Schedule, now time.Time) {
	labels := []string{b.Namespace, b.Name, b.Spec.ClusterName}
	at := r.staleAfter(b, sched)

	cond := metav1.Condition{
		Type: ichorv1alpha1.StaleCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.SnapshotRecentReason,
		Message: "a snapshot is as recent as the schedule asks; stale from " + at.UTC().Format(time.RFC3339) + " without a new one",
	}

	if !now.Before(at) {
		since := "since the backup was created"
		if b.Status.LastSuccessfulTime != nil {
			since = "since " + b.Status.LastSuccessfulTime.UTC().Format(time.RFC3339)
		}

		cond.Status, cond.Reason = metav1.ConditionTrue, ichorv1alpha1.SnapshotOverdueReason
		cond.Message = "no snapshot was stored " + since + ", and two scheduled runs have passed; see the Ready condition for why (`ichor etcd backup now " + b.Name + " --wait` tries at once)"

		stale.WithLabelValues(labels...).Set(1)
	} else {
		stale.WithLabelValues(labels...).Set(0)
	}

	apimeta.SetStatusCondition(&b.Status.Conditions, cond)
}

func (r *Reconciler) setReady(b *ichorv1alpha1.TalosEtcdBackup, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.ReadyCondition, Status: status, Reason: reason, Message: msg,
	})
}

// finishAttempt records the attempt's outcome: status, the Event, the metrics.
func (r *Reconciler) finishAttempt(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, kind string, f *failure) {
	log := logf.FromContext(ctx)
	labels := []string{b.Namespace, b.Name, b.Spec.ClusterName}

	if kind == kindRequested {
		b.Status.LastHandledRequest = b.Annotations[ichorv1alpha1.BackupRequestedAnnotation]
	}

	now := metav1.NewTime(r.now())

	if f != nil {
		b.Status.LastFailureTime = &now
		b.Status.LastFailure = truncate(f.reason + ": " + f.msg)
		r.setReady(b, metav1.ConditionFalse, f.reason, "the last snapshot failed: "+b.Status.LastFailure)
		failures.WithLabelValues(append(labels, f.reason)...).Inc()
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, f.reason, "Snapshot", "the %s snapshot failed: %s", kind, f.msg)
		log.Info("etcd snapshot failed", "kind", kind, "reason", f.reason, "message", f.msg)

		return
	}

	b.Status.LastSuccessfulTime = &now
	snapshotsTaken.WithLabelValues(labels...).Inc()
	lastSuccess.WithLabelValues(labels...).Set(float64(now.Unix()))
}

func (r *Reconciler) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}

	return r.Clock.Now()
}

func truncate(s string) string {
	const maxLen = 1024
	if len(s) <= maxLen {
		return s
	}

	return s[:maxLen-3] + "..."
}

// openStore reads the credentials Secret and connects to the bucket.
func (r *Reconciler) openStore(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup) (*store.Store, *failure) {
	st, f := backupstore.Open(ctx, r.APIReader, b, r.Transport)
	if f != nil {
		return nil, fail(f.Reason, "%s", f.Msg)
	}

	return st, nil
}

// apiReason is an API error's reason alone (its message may quote a request).
func apiReason(err error) string { return backupstore.APIReason(err) }
