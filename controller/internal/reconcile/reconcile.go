// Package reconcile is the one skeleton every Ichor reconciler runs on
// (STYLE.md, habit 3; Cluster API's cluster controller and Flux's
// kustomize-controller are the models):
//
//	get → paused check (the object's own and its TalosCluster's) → finalizer
//	→ []Phase in order → one deferred status write
//
// The status write carries only what this controller owns: the condition
// types listed in Controller.Owned and the status fields Controller.OwnStatus
// copies. It is merged onto the object as it is in the API server and written
// with an optimistic lock, re-read and re-merged on a conflict, so two
// controllers that write conditions on one kind never overwrite each other's.
// status.observedGeneration (written by the kind's primary controller) moves
// only when every phase succeeded.
//
// A cross-cutting rule (pause, ownership, observedGeneration) therefore lives
// here once, and a reconciler cannot forget it.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
)

// Object is a kind the skeleton reconciles: every Ichor kind (the accessors
// are in contracts/api/v1alpha1/accessors.go).
type Object interface {
	client.Object
	GetConditions() []metav1.Condition
	SetConditions(c []metav1.Condition)
	GetObservedGeneration() int64
	SetObservedGeneration(g int64)
}

// ClusterMember is an object that belongs to a TalosCluster; the cluster's
// spec.paused stops every controller acting on it.
type ClusterMember interface {
	GetClusterName() string
}

// Scope is what the phases of one reconcile share.
type Scope[T Object] struct {
	// Object is the object being reconciled; phases change its status, and
	// the skeleton writes the part this controller owns when they return.
	Object T
	// Cluster is the object's TalosCluster, when it names one that exists.
	Cluster *ichorv1alpha1.TalosCluster
	// Now is the time the reconcile started, from the controller's clock.
	Now time.Time

	persist func(ctx context.Context) error
}

// Persist writes the owned status now, before a side effect that must be
// recorded first (a certificate handed out, a Talos call that cannot be
// repeated: engineering rule 10). It is strict: the write carries the
// resourceVersion the reconcile read, and a conflict (someone, or an earlier
// reconcile the cache had not shown yet, wrote in between) is returned, so
// the caller does not go on to the side effect on a stale decision. The
// deferred write at the end of the reconcile writes only what changed after it.
func (s *Scope[T]) Persist(ctx context.Context) error { return s.persist(ctx) }

// Phase is one step of a reconcile. A phase that returns an error or a
// requeue stops the ones after it.
type Phase[T Object] func(ctx context.Context, s *Scope[T]) (ctrl.Result, error)

// Controller describes one reconciler on the skeleton.
type Controller[T Object] struct {
	// Name names the controller (its Events, logs and metrics).
	Name string
	// Client reads (from the cache) and writes.
	Client client.Client
	// APIReader reads the object again, uncached, after a write conflict; nil
	// means Client.
	APIReader client.Reader
	// New returns an empty object of the kind.
	New func() T
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock

	// Owned are the condition types this controller writes. Conditions of
	// other types are never written, whatever the phases did to them.
	Owned []string
	// OwnStatus copies the status fields other than conditions that this
	// controller owns from src to dst; nil means it owns none.
	OwnStatus func(dst, src T)
	// Primary makes this controller the owner of the kind's Paused condition
	// and status.observedGeneration; one controller per kind is primary, the
	// others (several reconcile a TalosCluster or a TalosMachine) own only
	// their conditions and fields.
	Primary bool
	// SkipPaused leaves the pause check out, for controllers that act on
	// objects of no Ichor cluster (their own spec may still pause them
	// through Paused).
	SkipPaused bool
	// Paused reports the object's own pause (TalosOperation.spec.paused);
	// nil means the object has none.
	Paused func(T) bool
	// ReportsCNI marks the one controller that runs on a cluster whose CNI
	// preset Ichor does not manage (cni.Unsupported), to say so in its
	// CNIUnsupported condition. Every other controller does nothing on such
	// a cluster's objects (architecture, "CNI": refused, not guessed at).
	ReportsCNI bool

	// Summarize, when set, computes the kind's summary conditions (Ready)
	// from the others on the object about to be written, after this
	// controller's part was merged onto the current one. It is the same
	// function for every controller of the kind (one place decides Ready),
	// so whichever controller writes last writes the summary of what the
	// API server holds.
	Summarize func(T)

	// Finalizer, when set, is added before the phases run and removed after
	// Finalize succeeds on a deleted object.
	Finalizer string
	// NeedsFinalizer, when set, says whether an object needs the finalizer
	// yet (a machine needs it once it is approved, before anything is sent
	// to its node); nil means every object does.
	NeedsFinalizer func(T) bool
	// Finalize runs instead of the phases once the object is being deleted.
	// The finalizer is removed when it returns neither an error nor a requeue.
	Finalize Phase[T]

	// Phases run in order on an object that is not being deleted.
	Phases []Phase[T]
}

// UnsupportedRecheck is how often a controller looks again at an object it
// leaves alone because its cluster's CNI preset is not one Ichor manages.
const UnsupportedRecheck = 5 * time.Minute

// conflictBackoff paces the re-reads after a status write conflict: several
// controllers write conditions of one object, often in the same second.
var conflictBackoff = wait.Backoff{Steps: 12, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 2 * time.Second}

// NextStep is the result of a phase that finished a step of a longer task and
// wants the next one to run at once (after the status write).
func NextStep() ctrl.Result { return ctrl.Result{RequeueAfter: time.Millisecond} }

// Terminal marks an error that no retry can fix (a bad spec): the controller
// records it and does not requeue.
func Terminal(err error) error { return ctrlreconcile.TerminalError(err) }

func (c *Controller[T]) clock() clock.PassiveClock {
	if c.Clock == nil {
		return clock.RealClock{}
	}

	return c.Clock
}

func (c *Controller[T]) apiReader() client.Reader {
	if c.APIReader == nil {
		return c.Client
	}

	return c.APIReader
}

// Reconcile runs the skeleton for one object.
func (c *Controller[T]) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	obj := c.New()
	if err := c.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	s := &Scope[T]{Object: obj, Now: c.clock().Now()}

	cluster, err := c.cluster(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}

	s.Cluster = cluster

	before := obj.DeepCopyObject().(T) //nolint:forcetypeassert // DeepCopyObject of T is a T

	// A strict write that failed means this reconcile decided on a stale
	// object: it writes nothing more, and the next one starts afresh.
	stale := false

	s.persist = func(ctx context.Context) error {
		written, ok, err := c.writeStatus(ctx, before, obj, false, true)
		if err != nil {
			stale = true

			return err
		}

		if ok {
			// What the API server now holds is the base of the next write.
			before = written
			obj.SetResourceVersion(written.GetResourceVersion())
		}

		return nil
	}

	defer func() {
		if stale {
			return
		}

		if _, _, err := c.writeStatus(ctx, before, obj, retErr == nil, false); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	if why := c.pausedBy(obj, cluster); why != "" {
		ctrl.LoggerFrom(ctx).V(1).Info("paused: nothing done", "by", why)
		c.setPaused(obj, why)
		CountPausedSkip(c.Name)

		// Unpausing is a change of the object or of its cluster, which the
		// controller watches: nothing to requeue.
		return ctrl.Result{}, nil
	}

	c.setPaused(obj, "")

	if why := c.unsupportedBy(obj, cluster); why != "" {
		ctrl.LoggerFrom(ctx).V(1).Info("the cluster's CNI preset is not one Ichor manages: nothing done", "preset", why)
		CountPausedSkip(c.Name)

		// The preset is immutable; the adoption annotation (for the
		// unmanaged preset) ends this without a spec change, which not
		// every controller watches: look again now and then.
		return ctrl.Result{RequeueAfter: UnsupportedRecheck}, nil
	}

	if !obj.GetDeletionTimestamp().IsZero() {
		return c.finalize(ctx, s)
	}

	if c.Finalizer != "" && !controllerutil.ContainsFinalizer(obj, c.Finalizer) && (c.NeedsFinalizer == nil || c.NeedsFinalizer(obj)) {
		if err := c.addFinalizer(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}

		// The status writes start from the object the patch returned.
		before.SetResourceVersion(obj.GetResourceVersion())
		before.SetFinalizers(obj.GetFinalizers())
	}

	return c.runPhases(ctx, s, c.Phases)
}

func (c *Controller[T]) runPhases(ctx context.Context, s *Scope[T], phases []Phase[T]) (ctrl.Result, error) {
	for _, p := range phases {
		r, err := p(ctx, s)
		if err != nil || r.RequeueAfter > 0 {
			return r, err
		}
	}

	return ctrl.Result{}, nil
}

func (c *Controller[T]) finalize(ctx context.Context, s *Scope[T]) (ctrl.Result, error) {
	obj := s.Object
	if c.Finalizer == "" || !controllerutil.ContainsFinalizer(obj, c.Finalizer) {
		return ctrl.Result{}, nil
	}

	if c.Finalize != nil {
		r, err := c.Finalize(ctx, s)
		if err != nil || r.RequeueAfter > 0 {
			return r, err
		}
	}

	patch := client.MergeFrom(obj.DeepCopyObject().(T)) //nolint:forcetypeassert // DeepCopyObject of T is a T
	controllerutil.RemoveFinalizer(obj, c.Finalizer)

	return ctrl.Result{}, client.IgnoreNotFound(c.Client.Patch(ctx, obj, patch))
}

func (c *Controller[T]) addFinalizer(ctx context.Context, obj T) error {
	patch := client.MergeFrom(obj.DeepCopyObject().(T)) //nolint:forcetypeassert // DeepCopyObject of T is a T
	controllerutil.AddFinalizer(obj, c.Finalizer)

	return c.Client.Patch(ctx, obj, patch)
}

// cluster returns the object's TalosCluster, nil when it names none or the
// cluster does not exist.
func (c *Controller[T]) cluster(ctx context.Context, obj T) (*ichorv1alpha1.TalosCluster, error) {
	if tc, ok := any(obj).(*ichorv1alpha1.TalosCluster); ok {
		return tc, nil
	}

	m, ok := any(obj).(ClusterMember)
	if !ok || m.GetClusterName() == "" {
		return nil, nil
	}

	tc := &ichorv1alpha1.TalosCluster{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: m.GetClusterName()}, tc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}

		return nil, fmt.Errorf("read TalosCluster %s/%s: %w", obj.GetNamespace(), m.GetClusterName(), err)
	}

	return tc, nil
}

// pausedBy says why the object is paused ("" when it is not).
func (c *Controller[T]) pausedBy(obj T, cluster *ichorv1alpha1.TalosCluster) string {
	if c.Paused != nil && c.Paused(obj) {
		return "its spec.paused"
	}

	if !c.SkipPaused {
		return pausedMessage(cluster)
	}

	return ""
}

// unsupportedBy returns the preset of the object's cluster when that is one
// Ichor does not manage (cni.Unsupported) and this controller must leave the
// object alone, "" otherwise. Once the cluster is being deleted, an object
// that is being deleted too runs its finalizer: the teardown leaves the
// nodes as they are (no Talos call, no drain), and it is the way out the
// CNIUnsupported condition names.
func (c *Controller[T]) unsupportedBy(obj T, cluster *ichorv1alpha1.TalosCluster) string {
	if c.ReportsCNI || cluster == nil || cni.Unsupported(cluster) == "" {
		return ""
	}

	if !cluster.DeletionTimestamp.IsZero() && !obj.GetDeletionTimestamp().IsZero() {
		return ""
	}

	return fmt.Sprintf("%q", cluster.Spec.CNI.Preset)
}

// setPaused sets the Paused condition (why != "") or removes it, when this
// controller owns it.
func (c *Controller[T]) setPaused(obj T, why string) {
	if !c.Primary {
		return
	}

	conds := obj.GetConditions()
	if why == "" {
		apimeta.RemoveStatusCondition(&conds, ichorv1alpha1.PausedCondition)
	} else {
		apimeta.SetStatusCondition(&conds, PausedCondition(why))
	}

	obj.SetConditions(conds)
}

// owns reports whether the controller writes condition type t.
func (c *Controller[T]) owns(t string) bool {
	if t == ichorv1alpha1.PausedCondition {
		return c.Primary
	}

	for _, o := range c.Owned {
		if o == t {
			return true
		}
	}

	return false
}

// writeStatus writes what this controller owns of after's status, when it
// differs from before: its conditions (stamped with the generation they were
// computed from), its status fields and, on success, observedGeneration. The
// write is an update of the current object with its resourceVersion; on a
// conflict the object is read again and the owned part merged onto it anew.
// It returns the object as written, and whether anything was. A strict write
// returns a conflict instead of merging again.
func (c *Controller[T]) writeStatus(ctx context.Context, before, after T, succeeded, strict bool) (T, bool, error) {
	conds := after.GetConditions()
	for i := range conds {
		if c.owns(conds[i].Type) {
			conds[i].ObservedGeneration = after.GetGeneration()
		}
	}

	after.SetConditions(conds)

	if succeeded && c.Primary {
		after.SetObservedGeneration(after.GetGeneration())
	}

	base := before

	var (
		written T
		wrote   bool
	)

	attempt := func() error {
		next := base.DeepCopyObject().(T) //nolint:forcetypeassert // DeepCopyObject of T is a T
		c.merge(next, before, after, succeeded)

		if c.Summarize != nil {
			c.Summarize(next)
		}

		if equality.Semantic.DeepEqual(base, next) {
			return nil
		}

		err := c.Client.Status().Update(ctx, next)
		if err == nil {
			written, wrote = next, true
		}

		return err
	}

	if strict {
		// Nothing written, not even to an object that is gone, lets the
		// caller go on.
		return written, wrote, attempt()
	}

	err := retry.RetryOnConflict(conflictBackoff, func() error {
		err := attempt()
		if apierrors.IsConflict(err) {
			fresh := c.New()
			if gerr := c.apiReader().Get(ctx, client.ObjectKeyFromObject(after), fresh); gerr != nil {
				return client.IgnoreNotFound(gerr)
			}

			base = fresh
		}

		return client.IgnoreNotFound(err)
	})

	return written, wrote, err
}

// merge copies the owned part of src's status onto dst; from is the object
// as the reconcile read it, so an owned condition the phases removed is
// removed (and one a stale read did not show is left alone).
//
// Only what this reconcile changed is copied: an owned field or condition
// the phases left as they read it is not written back over a newer value
// (a reconcile that read a stale cache does not undo the one before it).
func (c *Controller[T]) merge(dst, from, src T, succeeded bool) {
	if c.OwnStatus != nil {
		probe := from.DeepCopyObject().(T) //nolint:forcetypeassert // DeepCopyObject of T is a T
		c.OwnStatus(probe, src)

		if !equality.Semantic.DeepEqual(probe, from) {
			c.OwnStatus(dst, src)
		}
	}

	if succeeded && c.Primary {
		dst.SetObservedGeneration(src.GetObservedGeneration())
	}

	conds := dst.GetConditions()

	for _, fc := range from.GetConditions() {
		if c.owns(fc.Type) && apimeta.FindStatusCondition(src.GetConditions(), fc.Type) == nil {
			apimeta.RemoveStatusCondition(&conds, fc.Type)
		}
	}

	for _, sc := range src.GetConditions() {
		if !c.owns(sc.Type) {
			continue
		}

		if fc := apimeta.FindStatusCondition(from.GetConditions(), sc.Type); fc != nil && sameCondition(*fc, sc) {
			continue
		}

		// SetStatusCondition keeps lastTransitionTime while the status holds.
		apimeta.SetStatusCondition(&conds, sc)
	}

	dst.SetConditions(conds)
}

// sameCondition reports whether a condition says the same (the generation it
// was computed from included).
func sameCondition(a, b metav1.Condition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
}
