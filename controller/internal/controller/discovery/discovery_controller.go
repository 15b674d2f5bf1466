// Package discovery holds the discovery reconciler: for each TalosCluster it
// scans spec.discovery.subnets every interval and probes
// spec.discovery.addresses, and turns every node found in maintenance mode
// into a pending TalosMachine (architecture, "Nodes"). It never registers a
// weak or repeated identity silently: such a machine is pending with
// IdentityConflict true for a person to resolve. A configured node is
// reported AlreadyConfigured and nothing is created.
//
// A person can ask for a scan now (the ichor.maesh.dev/scan-requested-at
// annotation, `ichor cluster discovery scan`, the console's Scan now): the
// request is answered within seconds, or guard.MinScanRequestGap after the
// last scan when that was more recent, and status.discovery records which
// request the last scan answered and when the next one is due.
package discovery

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its Events and its field manager.
const ControllerName = "discovery"

// Defaults of the Reconciler's zero fields.
const (
	// DefaultInterval is the scan period when spec.discovery.interval is empty.
	DefaultInterval = 5 * time.Minute
	// DefaultRecheckInterval is how often the address of a removed machine is probed again.
	DefaultRecheckInterval = 15 * time.Second
	// DefaultRecheckWindow is how long the address of a removed machine is
	// probed again: long enough for a reset and a reboot into maintenance.
	DefaultRecheckWindow = 15 * time.Minute
	// maxResults caps status.discovery.addresses (the CRD's MaxItems).
	maxResults = 512
)

// Reconciler reconciles the discovery of one TalosCluster.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Port is the Talos API port probed; zero means 50000.
	Port int
	// Concurrency bounds the probes in flight; zero means probe.DefaultConcurrency.
	Concurrency int
	// ProbeTimeout bounds one address's probe; zero means probe.DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// DefaultInterval replaces DefaultInterval (tests); zero means DefaultInterval.
	DefaultInterval time.Duration
	// RecheckInterval and RecheckWindow: how often and how long the address of
	// a removed TalosMachine is probed again; zero means the defaults.
	RecheckInterval, RecheckWindow time.Duration
	// ScanRequestGap replaces guard.MinScanRequestGap (tests); zero means
	// guard.MinScanRequestGap.
	ScanRequestGap time.Duration

	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock

	mu       sync.Mutex
	clusters map[types.NamespacedName]*clusterState
	skeleton *ichorreconcile.Controller[*ichorv1alpha1.TalosCluster]
}

// clusterState is what the reconciler remembers of one cluster between reconciles.
type clusterState struct {
	// scannedGeneration and lastScan say when and for which spec the last full scan ran.
	scannedGeneration int64
	lastScan          time.Time
	// removed maps the address of a removed machine to when its rechecks stop.
	removed map[netip.Addr]time.Time
}

// SetupWithManager registers the reconciler: a cluster's spec changes wake it
// (an added address is probed at once), and so do a scan request and the
// deletion of one of its TalosMachines (whose address is probed again until
// the node returns).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCluster{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, scanRequested()))).
		Watches(&ichorv1alpha1.TalosMachine{}, handler.Funcs{DeleteFunc: r.machineDeleted}).
		Complete(r)
}

// machineDeleted remembers the removed machine's address for rechecks and wakes its cluster.
func (r *Reconciler) machineDeleted(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	m, ok := e.Object.(*ichorv1alpha1.TalosMachine)
	if !ok || m.Spec.ClusterName == "" {
		return
	}

	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}

	if a, err := netip.ParseAddr(m.Spec.Address); err == nil {
		r.mu.Lock()
		st := r.stateLocked(key)
		st.removed[a] = time.Now().Add(r.recheckWindow())
		r.mu.Unlock()
	}

	q.Add(reconcile.Request{NamespacedName: key})
}

// scanRequested lets through an update that changes the cluster's scan request.
func scanRequested() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return false
			}

			k := ichorv1alpha1.ScanRequestedAnnotation

			return e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k]
		},
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func (r *Reconciler) scanRequestGap() time.Duration {
	if r.ScanRequestGap > 0 {
		return r.ScanRequestGap
	}

	return guard.MinScanRequestGap
}

func (r *Reconciler) stateLocked(key types.NamespacedName) *clusterState {
	if r.clusters == nil {
		r.clusters = map[types.NamespacedName]*clusterState{}
	}

	st := r.clusters[key]
	if st == nil {
		st = &clusterState{removed: map[netip.Addr]time.Time{}}
		r.clusters[key] = st
	}

	return st
}

func (r *Reconciler) recheckWindow() time.Duration {
	if r.RecheckWindow > 0 {
		return r.RecheckWindow
	}

	return DefaultRecheckWindow
}

func (r *Reconciler) recheckInterval() time.Duration {
	if r.RecheckInterval > 0 {
		return r.RecheckInterval
	}

	return DefaultRecheckInterval
}

func (r *Reconciler) interval(c *ichorv1alpha1.TalosCluster) time.Duration {
	if i := c.Spec.Discovery.Interval; i != nil && i.Duration > 0 {
		// Admission refuses less; a cluster written before that rule is held to it too.
		return max(i.Duration, guard.MinDiscoveryInterval)
	}

	if r.DefaultInterval > 0 {
		return r.DefaultInterval
	}

	return DefaultInterval
}

// controller is discovery on the skeleton: it owns status.discovery and
// status.pendingMachines of the cluster, and the cluster's spec.paused stops
// it.
func (r *Reconciler) controller() *ichorreconcile.Controller[*ichorv1alpha1.TalosCluster] {
	return &ichorreconcile.Controller[*ichorv1alpha1.TalosCluster]{
		Name: ControllerName, Client: r.Client, Clock: r.Clock,
		New: func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
		OwnStatus: func(dst, src *ichorv1alpha1.TalosCluster) {
			dst.Status.Discovery, dst.Status.PendingMachines = src.Status.Discovery, src.Status.PendingMachines
		},
		Phases: []ichorreconcile.Phase[*ichorv1alpha1.TalosCluster]{r.discover},
	}
}

// Reconcile forgets a cluster that is gone, and runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Client.Get(ctx, req.NamespacedName, &ichorv1alpha1.TalosCluster{}); apierrors.IsNotFound(err) {
		r.mu.Lock()
		delete(r.clusters, req.NamespacedName)
		r.mu.Unlock()

		return ctrl.Result{}, nil
	}

	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// discover scans when a scan is due (first sight, a spec change, the
// interval passed, a scan request at least the request gap after the last
// scan) and otherwise only rechecks the addresses of removed machines; it
// sets status.discovery and status.pendingMachines. A scan request that
// comes sooner is deferred to the gap's end (status.discovery.nextScanTime),
// never dropped.
func (r *Reconciler) discover(ctx context.Context, sc *ichorreconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := sc.Object
	key := client.ObjectKeyFromObject(c)
	now := sc.Now
	interval := r.interval(c)

	r.mu.Lock()
	st := r.stateLocked(key)
	full := st.lastScan.IsZero() || st.scannedGeneration != c.Generation || now.Sub(st.lastScan) >= interval

	// A scan request waits for the gap after the last scan; any scan answers it.
	request := c.PendingScanRequest()

	var deferredTo time.Time

	if request != "" && !full {
		if due := st.lastScan.Add(r.scanRequestGap()); now.Before(due) {
			deferredTo = due
		} else {
			full = true
		}
	}

	var removed []netip.Addr

	for a, until := range st.removed {
		if now.After(until) {
			delete(st.removed, a)
		} else {
			removed = append(removed, a)
		}
	}
	r.mu.Unlock()

	slices.SortFunc(removed, func(a, b netip.Addr) int { return a.Compare(b) })

	run := &scan{r: r, cluster: c, now: now}

	err := run.do(ctx, full, removed)
	if full && request != "" {
		// The scan ran (its results are in the status even when acting on
		// one of them failed): the request is answered.
		c.Status.Discovery.LastHandledScanRequest = request
	}

	if err != nil {
		return ctrl.Result{}, err
	}

	r.mu.Lock()
	if full {
		st.lastScan, st.scannedGeneration = now, c.Generation
	}

	for _, a := range run.returned {
		delete(st.removed, a)
	}

	nextScan := st.lastScan.Add(interval)
	if !deferredTo.IsZero() {
		nextScan = deferredTo
	}

	next := nextScan.Sub(now)
	if len(st.removed) > 0 {
		next = min(next, r.recheckInterval())
	}
	r.mu.Unlock()

	setTime(&c.Status.Discovery.NextScanTime, nextScan)

	return ctrl.Result{RequeueAfter: max(next, time.Second)}, nil
}

// setTime sets *p to t unless it already says the same second (the API keeps
// seconds), so that an unchanged time is not written again.
func setTime(p **metav1.Time, t time.Time) {
	if *p != nil && (*p).Unix() == t.Unix() {
		return
	}

	v := metav1.NewTime(t.Truncate(time.Second))
	*p = &v
}

// eventf records an Event on the cluster.
func (s *scan) eventf(eventType, reason, note string, args ...any) {
	s.r.Recorder.Eventf(s.cluster, nil, eventType, reason, "Discover", note, args...)
}
