// Package cnistatus keeps a TalosCluster's CNI facts (architecture, "CNI"):
//
//   - the CNIUnsupported condition: true when the stored spec.cni.preset is
//     one Ichor does not manage (cni.Unsupported). The reconcile skeleton
//     then keeps every other controller off the cluster's objects (no
//     render, no apply, no operation); this controller is the one that runs,
//     to say so;
//   - status.cni.detected, the CNI that runs in the cluster, read from its
//     DaemonSets (cni.Detect) on a slow requeue (Interval, minutes), not on
//     every reconcile; and, for a cluster of the cilium preset running
//     Cilium, status.cni.ciliumVersion from the agent's image, the Cilium the
//     Kubernetes ↔ Cilium pair check holds a Kubernetes upgrade to.
//
// It reads the cluster and writes only the TalosCluster's status; it never
// writes to the cluster.
package cnistatus

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "cnistatus"

// DefaultInterval is how often the CNI that runs is read again: the
// detection is for display, and a CNI changes rarely.
const DefaultInterval = 5 * time.Minute

// retryInterval is how soon a cluster whose Kubernetes API could not be
// reached is tried again.
const retryInterval = 30 * time.Second

// Reconciler reports a cluster's CNI facts.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Interval is the time between two detections; zero means DefaultInterval.
	Interval time.Duration

	// last is when each cluster's CNI was last read (in memory: a restarted
	// controller reads once at once, then on the interval).
	last sync.Map

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]
}

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines;talosoperations,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations,verbs=create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// SetupWithManager registers the reconciler on TalosClusters: a change of a
// cluster's spec or annotations (the adoption annotation decides whether
// the unmanaged preset is allowed) is handled at once; the detection runs
// on its interval.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// Only spec and annotations wake it (its own status writes do not),
		// so the kube-proxy record the kube-proxy operation moves is read
		// through the operation's end below.
		// A cni operation that ended (a chart upgrade) changed what runs:
		// read it again at once rather than on the interval.
		Watches(&ichorv1alpha1.TalosOperation{}, handler.EnqueueRequestsFromMapFunc(r.cniOperationEnded)).
		Complete(r)
}

// cniOperationEnded maps a cni operation that has ended to its cluster, and
// forgets when that cluster was last read.
func (r *Reconciler) cniOperationEnded(_ context.Context, o client.Object) []ctrlreconcile.Request {
	op, ok := o.(*ichorv1alpha1.TalosOperation)
	if !ok || (op.Spec.Type != ichorv1alpha1.OperationCNI && op.Spec.Type != ichorv1alpha1.OperationKubeProxy) ||
		(op.Status.Phase != ichorv1alpha1.OperationSucceeded && op.Status.Phase != ichorv1alpha1.OperationFailed) {
		return nil
	}

	key := types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName}
	r.last.Delete(key)

	return []ctrlreconcile.Request{{NamespacedName: key}}
}

// controller is the reconciler on the skeleton. It owns CNIUnsupported and
// status.cni.detected and status.cni.ciliumVersion, and it is the one
// controller that runs on a cluster of an unsupported preset (ReportsCNI).
func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosCluster] {
	return &reconcile.Controller[*ichorv1alpha1.TalosCluster]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
		New:        func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
		Owned:      []string{ichorv1alpha1.CNIUnsupportedCondition, ichorv1alpha1.KubeProxyConsistentCondition},
		ReportsCNI: true,
		OwnStatus: func(dst, src *ichorv1alpha1.TalosCluster) {
			dst.Status.CNI.Detected, dst.Status.CNI.CiliumVersion = src.Status.CNI.Detected, src.Status.CNI.CiliumVersion
		},
		Phases: []reconcile.Phase[*ichorv1alpha1.TalosCluster]{r.reconcile},
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

func (r *Reconciler) interval() time.Duration {
	if r.Interval <= 0 {
		return DefaultInterval
	}

	return r.Interval
}

// reconcile sets CNIUnsupported (and stops there for an unsupported preset:
// nothing of the cluster is read), then reads the CNI when the interval has
// passed since the last reading.
func (r *Reconciler) reconcile(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object

	if msg := cni.Unsupported(c); msg != "" {
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.CNIUnsupportedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.CNIPresetUnsupportedReason, Message: msg,
		})

		return ctrl.Result{}, nil
	}

	apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.CNIUnsupportedCondition)

	if err := r.kubeProxySwitch(ctx, c); err != nil {
		return ctrl.Result{}, err
	}

	key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	if v, ok := r.last.Load(key); ok {
		if wait := v.(time.Time).Add(r.interval()).Sub(s.Now); wait > 0 { //nolint:forcetypeassert // only times are stored
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}

	if !r.detect(ctx, c) {
		// Not reachable yet (a cluster being built): sooner than the
		// interval, but still not on every reconcile.
		return ctrl.Result{RequeueAfter: min(retryInterval, r.interval())}, nil
	}

	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetCilium && c.Status.CNI.CiliumVersion == "" {
		// Cilium comes after the cluster answers (the bootstrap manifest,
		// the hand-over's Helm release): until its agent is seen, look again
		// as soon as for an unreachable cluster, not after the interval.
		return ctrl.Result{RequeueAfter: min(retryInterval, r.interval())}, nil
	}

	r.last.Store(key, s.Now)

	return ctrl.Result{RequeueAfter: r.interval()}, nil
}

// detect reads the cluster's DaemonSets through a control plane's admin
// kubeconfig and records what runs. A cluster that cannot be reached yet
// (no bundle, no control plane answering) keeps what was read before, and
// detect returns false.
func (r *Reconciler) detect(ctx context.Context, c *ichorv1alpha1.TalosCluster) bool {
	log := ctrl.LoggerFrom(ctx)

	_, k, err := workload.ForCluster(ctx, r.APIReader, r.Client, r.Nodes, c)
	if err != nil {
		log.V(1).Info("the cluster's Kubernetes API is not reachable yet", "reason", err.Error())

		return false
	}

	list, err := k.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		log.V(1).Info("listing the cluster's DaemonSets", "reason", err.Error())

		return false
	}

	d := cni.Detect(list.Items)
	if d.Detected != c.Status.CNI.Detected {
		log.Info("CNI detected", "cni", d.Detected, "daemonSet", d.Via)
	}

	c.Status.CNI.Detected = d.Detected

	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetCilium && d.CiliumVersion != "" {
		c.Status.CNI.CiliumVersion = d.CiliumVersion
	}

	return r.kubeProxy(ctx, k, c, d, list.Items)
}

// kubeProxy sets KubeProxyConsistent on a cluster whose Cilium runs: the
// health check of kube-proxy's two owners (cni.CheckKubeProxy). Without
// Cilium's config (no Cilium, or another CNI) there is nothing to compare.
func (r *Reconciler) kubeProxy(ctx context.Context, k kubernetes.Interface, c *ichorv1alpha1.TalosCluster, d cni.Detection, dss []appsv1.DaemonSet) bool {
	if c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetCilium || d.Detected != cni.DetectedCilium {
		apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition)

		return true
	}

	cm, err := k.CoreV1().ConfigMaps("kube-system").Get(ctx, cni.CiliumConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition)

		return true
	}

	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("reading Cilium's config", "reason", err.Error())

		return false
	}

	proxy := slices.ContainsFunc(dss, func(ds appsv1.DaemonSet) bool {
		return ds.Namespace == "kube-system" && ds.Name == cni.KubeProxyDaemonSet
	})

	if guard.KubeProxySwitchPending(c) {
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.KubeProxyConsistentCondition,
			Status: metav1.ConditionUnknown, Reason: ichorv1alpha1.KubeProxySwitchingReason,
			Message: fmt.Sprintf("spec.cni.kubeProxy asks for %s; Talos's side runs %s until the kube-proxy operation's step %s (`ichor operation list`)",
				guard.KubeProxyMode(c), guard.RenderedKubeProxy(c), guard.KubeProxyStepTalos)})

		return true
	}

	cond := metav1.Condition{Type: ichorv1alpha1.KubeProxyConsistentCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.KubeProxyConsistentReason,
		Message: "Cilium's config and Talos's kube-proxy agree with spec.cni.kubeProxy " + c.Spec.CNI.KubeProxy}
	if msg := cni.CheckKubeProxy(c.Spec.CNI.KubeProxy, cm.Data, proxy); msg != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ichorv1alpha1.KubeProxyMismatchReason, msg
	}

	apimeta.SetStatusCondition(&c.Status.Conditions, cond)

	return true
}

// kubeProxySwitch records the mode Talos's side runs when it was never
// recorded (spec.cni.kubeProxy then), and starts the kube-proxy operation
// when spec.cni.kubeProxy asks for another mode and no cni or kube-proxy
// operation of the cluster is unfinished (read past the cache, so a
// restarted or lagging controller never starts a second one).
func (r *Reconciler) kubeProxySwitch(ctx context.Context, c *ichorv1alpha1.TalosCluster) error {
	if c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetCilium {
		return nil
	}

	if c.Status.CNI.KubeProxy == "" {
		// Only this field, and only on the version read: the operation is
		// the other writer of the record.
		patch := fmt.Appendf(nil, `{"metadata":{"resourceVersion":%q},"status":{"cni":{"kubeProxy":%q}}}`, c.ResourceVersion, guard.KubeProxyMode(c))
		if err := r.Client.Status().Patch(ctx, c.DeepCopy(), client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("recording status.cni.kubeProxy: %w", err)
		}

		c.Status.CNI.KubeProxy = guard.KubeProxyMode(c)

		return nil
	}

	if !guard.KubeProxySwitchPending(c) {
		return nil
	}

	var ops ichorv1alpha1.TalosOperationList
	if err := r.APIReader.List(ctx, &ops, client.InNamespace(c.Namespace)); err != nil {
		return fmt.Errorf("listing TalosOperations in %s: %w", c.Namespace, err)
	}

	if busy := guard.UnfinishedCNI(c.Name, "", ops.Items); len(busy) > 0 {
		return nil
	}

	target := guard.KubeProxyMode(c)
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: "kube-proxy-" + target + "-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: c.Name, Type: ichorv1alpha1.OperationKubeProxy,
			KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: target},
		},
	}

	if err := r.Client.Create(ctx, op); err != nil {
		return fmt.Errorf("starting the kube-proxy operation to %s: %w", target, err)
	}

	ctrl.LoggerFrom(ctx).Info("started the kube-proxy switch", "operation", op.Name, "from", c.Status.CNI.KubeProxy, "to", target)

	return nil
}
