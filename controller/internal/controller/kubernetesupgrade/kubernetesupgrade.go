// Package kubernetesupgrade watches a TalosCluster's Kubernetes version
// (architecture, "Upgrades"; issue 22), as talosupgrade watches its Talos
// version: it reads the upgrade candidates (the kubelet image's tags) into
// status.kubernetesUpgrade, records the version the machines run, and starts
// a kubernetes TalosOperation when spec.kubernetesVersion moves away from
// it. The operation does the upgrade (controller/internal/controller/operation,
// kubernetes.go); until it reaches a machine's components, their renders keep
// status.kubernetesUpgrade.version (kubeupgrade.Pins). This reconciler never
// touches a node.
package kubernetesupgrade

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
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// ControllerName names the controller, its Events and its field manager.
const ControllerName = "kubernetesupgrade"

// DefaultRefreshInterval is how often the registry is read again.
const DefaultRefreshInterval = 6 * time.Hour

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler keeps status.kubernetesUpgrade and starts kubernetes operations.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	// ReleaseSource is the registry whose kubelet image tags list the
	// Kubernetes releases; empty means release.DefaultKubernetesReleaseSource.
	ReleaseSource string
	// HTTP reads the registry; nil means a client with a 30 s timeout.
	HTTP *http.Client
	// RefreshInterval is how often the registry is read again; zero means DefaultRefreshInterval.
	RefreshInterval time.Duration

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]

	mu    sync.Mutex
	basis map[types.NamespacedName]string
}

// SetupWithManager registers the reconciler: a cluster is looked at again
// when it or one of its kubernetes operations changes.
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
			if !ok || op.Spec.Type != ichorv1alpha1.OperationKubernetes {
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
			dst.Status.KubernetesUpgrade = *src.Status.KubernetesUpgrade.DeepCopy()
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

// Source is the registry the Kubernetes releases are read from.
func (r *Reconciler) Source() string {
	if r.ReleaseSource != "" {
		return r.ReleaseSource
	}

	return release.DefaultKubernetesReleaseSource
}

// candidatesPhase reads the registry when the candidates are older than
// RefreshInterval, come from another registry, or were computed for another
// running version or Talos. A registry that cannot be read leaves the last
// candidates and says why in status.kubernetesUpgrade.message.
func (r *Reconciler) candidatesPhase(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object
	u := &c.Status.KubernetesUpgrade
	key := client.ObjectKeyFromObject(c)
	source := r.Source()
	current := kubeupgrade.Running(c)
	basisNow := current + "@" + c.Spec.TalosVersion

	r.mu.Lock()
	basis := r.basis[key]
	r.mu.Unlock()

	if u.CheckedAt != nil && u.Source == source && basis == basisNow && s.Now.Sub(u.CheckedAt.Time) < r.RefreshInterval {
		return ctrl.Result{RequeueAfter: r.RefreshInterval - s.Now.Sub(u.CheckedAt.Time)}, nil
	}

	now := metav1.NewTime(s.Now)
	u.Source, u.CheckedAt = source, &now

	vs, err := release.FetchKubernetesVersions(ctx, r.HTTP, source)
	if err != nil {
		u.Message = truncate(err.Error()+"; the candidates are from the last successful read", 1024)

		return ctrl.Result{RequeueAfter: r.RefreshInterval / 12}, nil //nolint:nilerr // an unreadable registry is reported in status and read again later
	}

	cs, err := release.KubernetesCandidates(current, release.Pinned.Kubernetes, c.Spec.TalosVersion, vs)
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

	r.basis[key] = basisNow
	r.mu.Unlock()

	return ctrl.Result{RequeueAfter: r.RefreshInterval}, nil
}

// startPhase records the version the machines run, and starts a kubernetes
// operation when the spec moved away from it. A cluster seen for the first
// time records its spec (it was installed at it). One operation per target:
// none is started while another kubernetes operation of the cluster is
// unfinished, or when one for the same target exists (a failed one is not
// retried by itself); a succeeded one moves the recorded version.
func (r *Reconciler) startPhase(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object
	u := &c.Status.KubernetesUpgrade

	if u.Version == "" {
		u.Version = kubeupgrade.Normalize(c.Spec.KubernetesVersion)

		return ctrl.Result{}, nil
	}

	var ops ichorv1alpha1.TalosOperationList
	if err := r.Client.List(ctx, &ops, client.InNamespace(c.Namespace)); err != nil {
		return ctrl.Result{}, err
	}

	if op := kubeupgrade.Governing(c, ops.Items); op != nil && op.Status.Phase == ichorv1alpha1.OperationSucceeded {
		u.Version = kubeupgrade.Normalize(c.Spec.KubernetesVersion)

		return ctrl.Result{}, nil
	}

	if kubeupgrade.Unfinished(c, ops.Items) != nil || kubeupgrade.Same(u.Version, c.Spec.KubernetesVersion) {
		return ctrl.Result{}, nil
	}

	if kubeupgrade.Governing(c, ops.Items) != nil {
		// A failed operation for this target: a person decides what next.
		return ctrl.Result{}, nil
	}

	target := kubeupgrade.Normalize(c.Spec.KubernetesVersion)
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: "kubernetes-" + strings.ReplaceAll(target, ".", "-") + "-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: c.Name, Type: ichorv1alpha1.OperationKubernetes,
			Kubernetes: &ichorv1alpha1.KubernetesUpgrade{Version: target},
		},
	}

	if err := r.Client.Create(ctx, op); err != nil {
		return ctrl.Result{}, fmt.Errorf("start the kubernetes operation to %s: %w", target, err)
	}

	r.Recorder.Eventf(c, op, corev1.EventTypeNormal, "KubernetesUpgradeStarted", "Start",
		"spec.kubernetesVersion %s (the machines run %s): started operation %s", target, u.Version, op.Name)

	return ctrl.Result{}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}

	return s[:n-3] + "..."
}
