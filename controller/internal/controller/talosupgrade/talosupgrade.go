// Package talosupgrade watches a TalosCluster's Talos version (architecture,
// "Upgrades"): it reads the upgrade candidates from the release source into
// status.talosUpgrade, and starts a talos TalosOperation when spec.talosVersion
// or spec.schematic moves away from what the machines were last upgraded to.
// The operation does the upgrade (controller/internal/controller/operation,
// talos.go); this reconciler never touches a node, and never changes the
// version contract.
package talosupgrade

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// ControllerName names the controller, its Events and its field manager.
const ControllerName = "talosupgrade"

// DefaultRefreshInterval is how often the release source is read again.
const DefaultRefreshInterval = 6 * time.Hour

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler keeps status.talosUpgrade and starts talos operations.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	// ReleaseSource is the Image Factory whose /versions lists the Talos
	// releases; empty means the cluster's spec.registry.imageFactoryURL,
	// else release.DefaultReleaseSource.
	ReleaseSource string
	// HTTP reads the release source; nil means a client with a 30 s timeout.
	HTTP *http.Client
	// RefreshInterval is how often the release source is read again; zero
	// means DefaultRefreshInterval.
	RefreshInterval time.Duration

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]

	mu sync.Mutex
	// basis is, per cluster, the running version the stored candidates
	// were computed for: a change reads the source again.
	basis map[types.NamespacedName]string
}

// SetupWithManager registers the reconciler: a cluster is looked at again
// when it or one of its talos operations changes.
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

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCluster{}).
		Watches(&ichorv1alpha1.TalosOperation{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrlreconcile.Request {
			op, ok := o.(*ichorv1alpha1.TalosOperation)
			if !ok || op.Spec.Type != ichorv1alpha1.OperationTalos && op.Spec.Type != ichorv1alpha1.OperationShutdown {
				return nil
			}

			return []ctrlreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName}}}
		})).
		Complete(r)
}

func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosCluster] {
	if r.HTTP == nil {
		r.HTTP = &http.Client{Timeout: 30 * time.Second}
	}

	if r.RefreshInterval <= 0 {
		r.RefreshInterval = DefaultRefreshInterval
	}

	return &reconcile.Controller[*ichorv1alpha1.TalosCluster]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
		New: func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
		OwnStatus: func(dst, src *ichorv1alpha1.TalosCluster) {
			dst.Status.TalosUpgrade = *src.Status.TalosUpgrade.DeepCopy()
		},
		Phases: []reconcile.Phase[*ichorv1alpha1.TalosCluster]{r.startPhase, r.candidatesPhase},
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// Source is the release source of cluster c.
func (r *Reconciler) Source(c *ichorv1alpha1.TalosCluster) string {
	switch {
	case r.ReleaseSource != "":
		return r.ReleaseSource
	case c.Spec.Registry.ImageFactoryURL != "":
		return c.Spec.Registry.ImageFactoryURL
	default:
		return release.DefaultReleaseSource
	}
}

// candidatesPhase reads the release source when the candidates are older
// than RefreshInterval, come from another source, or were computed for
// another running version. A source that cannot be read leaves the last
// candidates and says why in status.talosUpgrade.message.
func (r *Reconciler) candidatesPhase(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object
	u := &c.Status.TalosUpgrade
	key := client.ObjectKeyFromObject(c)
	source := r.Source(c)

	current := u.Version
	if current == "" {
		current = c.Spec.TalosVersion
	}

	r.mu.Lock()
	basis := r.basis[key]
	r.mu.Unlock()

	if u.CheckedAt != nil && u.Source == source && basis == current && s.Now.Sub(u.CheckedAt.Time) < r.RefreshInterval {
		return ctrl.Result{RequeueAfter: r.RefreshInterval - s.Now.Sub(u.CheckedAt.Time)}, nil
	}

	now := metav1.NewTime(s.Now)
	u.Source, u.CheckedAt = source, &now

	vs, err := release.FetchVersions(ctx, r.HTTP, source)
	if err != nil {
		u.Message = truncate(err.Error()+"; the candidates are from the last successful read", 1024)

		return ctrl.Result{RequeueAfter: r.RefreshInterval / 12}, nil //nolint:nilerr // an unreadable source is reported in status and read again later
	}

	cs, err := release.TalosCandidates(current, release.Pinned.Talos, vs)
	if err != nil {
		u.Message = truncate(err.Error(), 1024)

		return ctrl.Result{RequeueAfter: r.RefreshInterval}, nil
	}

	u.Message = ""
	u.Candidates = make([]ichorv1alpha1.VersionCandidate, 0, len(cs))

	for _, cand := range cs {
		u.Candidates = append(u.Candidates, ichorv1alpha1.VersionCandidate{Version: cand.Version, Group: cand.Group, Default: cand.Default})
	}

	r.mu.Lock()
	if r.basis == nil {
		r.basis = map[types.NamespacedName]string{}
	}

	r.basis[key] = current
	r.mu.Unlock()

	return ctrl.Result{RequeueAfter: r.RefreshInterval}, nil
}

// startPhase records the target the machines were last upgraded to, and
// starts a talos operation when the spec moved away from it. A cluster seen
// for the first time records its spec (it was installed at it). One
// operation per target: none is started while another talos operation of
// the cluster is unfinished, or when one for the same target exists (a
// failed one is not retried by itself), nor while the cluster's shutdown has
// not completed.
func (r *Reconciler) startPhase(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object
	u := &c.Status.TalosUpgrade

	if u.Version == "" {
		u.Version, u.Schematic = c.Spec.TalosVersion, c.Spec.Schematic

		return ctrl.Result{}, nil
	}

	var ops ichorv1alpha1.TalosOperationList
	if err := r.Client.List(ctx, &ops, client.InNamespace(c.Namespace)); err != nil {
		return ctrl.Result{}, err
	}

	if s := guard.UnfinishedShutdown(c.Name, "", ops.Items); s != nil {
		// The admission webhook refuses every operation of a cluster being
		// shut down; the shutdown's end wakes this reconciler (the watch).
		return ctrl.Result{}, nil
	}

	var forSpec *ichorv1alpha1.TalosOperation

	for i := range ops.Items {
		op := &ops.Items[i]
		if op.Spec.ClusterName != c.Name || op.Spec.Type != ichorv1alpha1.OperationTalos || op.DeletionTimestamp != nil {
			continue
		}

		if !finished(op) {
			return ctrl.Result{}, nil
		}

		if targets(op, c) && (forSpec == nil || forSpec.CreationTimestamp.Before(&op.CreationTimestamp)) {
			forSpec = op
		}
	}

	if u.Version == c.Spec.TalosVersion && u.Schematic == c.Spec.Schematic {
		return ctrl.Result{}, nil
	}

	if forSpec != nil {
		if forSpec.Status.Phase == ichorv1alpha1.OperationSucceeded {
			u.Version, u.Schematic = c.Spec.TalosVersion, c.Spec.Schematic
		}

		return ctrl.Result{}, nil
	}

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: "talos-" + strings.ReplaceAll(c.Spec.TalosVersion, ".", "-") + "-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: c.Name, Type: ichorv1alpha1.OperationTalos,
			Talos: &ichorv1alpha1.TalosUpgrade{Version: c.Spec.TalosVersion, Schematic: c.Spec.Schematic},
		},
	}

	if err := r.Client.Create(ctx, op); err != nil {
		return ctrl.Result{}, fmt.Errorf("start the talos operation to %s: %w", c.Spec.TalosVersion, err)
	}

	r.Recorder.Eventf(c, op, corev1.EventTypeNormal, "TalosUpgradeStarted", "Start",
		"spec.talosVersion %s (was %s): started operation %s", c.Spec.TalosVersion, u.Version, op.Name)

	return ctrl.Result{}, nil
}

// targets reports whether op upgrades to c's spec.
func targets(op *ichorv1alpha1.TalosOperation, c *ichorv1alpha1.TalosCluster) bool {
	t := op.Spec.Talos
	return t != nil && t.Version == c.Spec.TalosVersion && t.Schematic == c.Spec.Schematic
}

func finished(op *ichorv1alpha1.TalosOperation) bool {
	return op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}

	return s[:n-3] + "..."
}
