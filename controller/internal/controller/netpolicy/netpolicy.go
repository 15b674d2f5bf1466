// Package netpolicy applies Ichor's CiliumNetworkPolicies in its own
// namespace (architecture, "Deployment", Network policy, and "Network policy
// gate"): the egress policies written from the objects that name what lies
// outside the cluster (contracts/pkg/netpol.LoadTargets, EgressPolicies),
// then the static set (netpol.Policies), the default deny last
// (netpol.Ordered), so that no flow in use is cut on the way.
//
// It reconciles TalosClusters on the skeleton and owns their
// NetworkPoliciesApplied condition, which it writes only on the cluster
// Ichor runs in: the TalosCluster one of whose TalosMachines is the Node
// this controller runs on (status.nodeName equal to OwnNode, the downward
// API's spec.nodeName, the rule the shutdown order uses too). A controller
// that runs elsewhere (OwnNode empty, or no machine is its node) writes
// nothing and applies nothing: no cluster of its is the one whose
// ichor-system it would isolate.
//
// On that cluster the policies are applied only when the API server serves
// cilium.io/v2 CiliumNetworkPolicy (Cilium's CRD exists) and the cluster's
// detected CNI (status.cni.detected) is Cilium; otherwise the condition is
// False with CiliumCRDMissing or CNINotCilium. A target that cannot be
// written (a URL that does not parse) or an apply that fails is False with
// ApplyFailed, and nothing is applied when the targets cannot be built. With
// a Helm-managed Ichor (IchorInstallation spec.deployment.manager: helm) the
// static set is the chart's (networkPolicy.cilium.enabled) and only the
// egress policies are written.
//
// Writes are server-side applies with field manager ichor-controller,
// forcing ownership: a hand edit is put back at the next reconcile (a
// change of a TalosCluster, TalosMachine or TalosEtcdBackup, or Resync).
// Policies are not watched: the kind may not exist when the manager starts.
package netpolicy

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters;talosmachines;talosetcdbackups;ichorinstallations,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get,namespace=ichor-system
// +kubebuilder:rbac:groups=cilium.io,resources=ciliumnetworkpolicies,verbs=get;create;patch,namespace=ichor-system

const (
	// ControllerName names the reconciler.
	ControllerName = "netpolicy"
	// FieldOwner is the field manager of its applies.
	FieldOwner = "ichor-controller"
	// DefaultResync is how often the policies are applied again without a change.
	DefaultResync = 5 * time.Minute
	// CRDRecheck is how soon a cluster whose API server does not serve
	// Cilium's CRD yet is looked at again: Cilium registers its CRDs when
	// its agent and operator start, seconds after the DaemonSet is Ready,
	// and a CRD's creation is no event this controller watches.
	CRDRecheck = 20 * time.Second
)

// Reconciler applies the policies and reports NetworkPoliciesApplied.
type Reconciler struct {
	Client client.Client
	// APIReader reads ichor-ui's Deployment (not cached).
	APIReader client.Reader
	// Namespace is Ichor's namespace.
	Namespace string
	// OwnNode is the Node the controller runs on; empty outside a cluster.
	OwnNode string
	// ReleaseSources are the controller's --release-source and
	// --kubernetes-release-source (empty: the defaults).
	ReleaseSources []string
	// Resync is how often the policies are applied again; zero means DefaultResync.
	Resync time.Duration

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]
}

// SetupWithManager registers the reconciler: every TalosCluster is looked at
// again when a TalosMachine or a TalosEtcdBackup changes (they name targets).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	r.skeleton = r.controller()
	all := handler.EnqueueRequestsFromMapFunc(r.allClusters)

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCluster{}).
		Watches(&ichorv1alpha1.TalosMachine{}, all).
		Watches(&ichorv1alpha1.TalosEtcdBackup{}, all).
		Complete(r)
}

func (r *Reconciler) allClusters(ctx context.Context, _ client.Object) []ctrlreconcile.Request {
	var list ichorv1alpha1.TalosClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}

	out := make([]ctrlreconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		out = append(out, ctrlreconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}

	return out
}

func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosCluster] {
	return &reconcile.Controller[*ichorv1alpha1.TalosCluster]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
		New:    func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
		Owned:  []string{ichorv1alpha1.NetworkPoliciesAppliedCondition},
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

func (r *Reconciler) resync() time.Duration {
	if r.Resync <= 0 {
		return DefaultResync
	}

	return r.Resync
}

// reconcile sets NetworkPoliciesApplied on the cluster Ichor runs in (and
// removes it from any other), applying the policies when the gate passes.
func (r *Reconciler) reconcile(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object

	local, err := machinestate.RunsOn(ctx, r.Client, c, r.OwnNode)
	if err != nil {
		return ctrl.Result{}, err
	}

	if !local {
		apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.NetworkPoliciesAppliedCondition)

		return ctrl.Result{}, nil
	}

	set := func(status metav1.ConditionStatus, reason, msg string) {
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.NetworkPoliciesAppliedCondition, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: c.Generation,
		})
	}

	if _, err := r.Client.RESTMapper().RESTMapping(netpol.GVK.GroupKind(), netpol.GVK.Version); err != nil {
		if !apimeta.IsNoMatchError(err) {
			return ctrl.Result{}, fmt.Errorf("asking the API server whether it serves %s: %w", netpol.GVK.Kind, err)
		}

		set(metav1.ConditionFalse, ichorv1alpha1.CiliumCRDMissingReason, fmt.Sprintf(
			"the API server does not serve %s %s (CRD %s): %s is not isolated by Ichor",
			netpol.GVK.GroupVersion(), netpol.GVK.Kind, netpol.CRDName, r.Namespace))

		return ctrl.Result{RequeueAfter: min(CRDRecheck, r.resync())}, nil
	}

	if d := c.Status.CNI.Detected; d != cni.DetectedCilium {
		if d == "" {
			d = "not detected yet"
		}

		set(metav1.ConditionFalse, ichorv1alpha1.CNINotCiliumReason, fmt.Sprintf(
			"the cluster's CNI is %s, not Cilium: %s is not isolated by Ichor", d, r.Namespace))

		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}

	applied, err := r.apply(ctx)
	if err != nil {
		set(metav1.ConditionFalse, ichorv1alpha1.NetworkPoliciesFailedReason, err.Error())

		return ctrl.Result{}, err
	}

	set(metav1.ConditionTrue, ichorv1alpha1.NetworkPoliciesInPlaceReason, applied)

	return ctrl.Result{RequeueAfter: r.resync()}, nil
}

// apply builds every policy first (a target that cannot be written applies
// nothing), then applies them in order; it returns what it applied.
func (r *Reconciler) apply(ctx context.Context) (string, error) {
	targets, err := netpol.LoadTargets(ctx, readers{cache: r.Client, api: r.APIReader, namespace: r.Namespace}, netpol.LoadOptions{
		Namespace: r.Namespace, ReleaseSources: r.ReleaseSources, ClusterNodes: true,
	})
	if err != nil {
		return "", fmt.Errorf("reading the egress targets: %w", err)
	}

	egress, err := netpol.EgressPolicies(r.Namespace, targets)
	if err != nil {
		return "", fmt.Errorf("building the egress policies: %w", err)
	}

	helm, err := r.helmManaged(ctx)
	if err != nil {
		return "", err
	}

	var static []*unstructured.Unstructured
	if !helm {
		static = netpol.Policies(r.Namespace, netpol.Options{})
	}

	names := make([]string, 0, len(egress)+len(static))

	for _, o := range netpol.Ordered(egress, static) {
		if err := r.Client.Patch(ctx, o, client.Apply, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil { //nolint:staticcheck // Apply of unstructured objects
			return "", fmt.Errorf("applying %s %s/%s: %w", netpol.GVK.Kind, r.Namespace, o.GetName(), err)
		}

		names = append(names, o.GetName())
	}

	msg := fmt.Sprintf("applied %s in %s (egress to %d controller and %d ichor-ui targets)",
		strings.Join(names, ", "), r.Namespace, len(targets.Controller), len(targets.UI))
	if helm {
		msg += "; the static set is the Helm chart's (networkPolicy.cilium.enabled)"
	}

	return msg, nil
}

func (r *Reconciler) helmManaged(ctx context.Context) (bool, error) {
	ii := &ichorv1alpha1.IchorInstallation{}

	err := r.Client.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii)
	if apierrors.IsNotFound(err) {
		return false, nil
	}

	if err != nil {
		return false, fmt.Errorf("reading IchorInstallation %s: %w", ichorv1alpha1.IchorInstallationName, err)
	}

	return ii.Spec.Deployment.Manager == ichorv1alpha1.ManagerHelm, nil
}

// readers reads Ichor's kinds from the cache and everything else (ichor-ui's
// Deployment, which the controller may read in its namespace only) uncached.
type readers struct {
	cache, api client.Reader
	namespace  string
}

func (r readers) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ours := obj.(interface{ GetConditions() []metav1.Condition }); ours {
		return r.cache.Get(ctx, key, obj, opts...)
	}

	return r.api.Get(ctx, key, obj, opts...)
}

func (r readers) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.cache.List(ctx, list, opts...)
}
