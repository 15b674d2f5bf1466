// Package storagestatus keeps a TalosStorage's status: how many machines it
// selects, and the informational ExtensionsPresent condition read from those
// machines' Nodes' extensions.talos.dev/* labels (architecture, "Storage"),
// with the extensions some node lacks. It is the kind's primary controller
// on the reconcile skeleton. It does not write Ready.
package storagestatus

import (
	"context"
	"net"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "storagestatus"

// DefaultResync is how often the Nodes' labels are read again: they change
// on the workload cluster (an upgrade to a new schematic), where no event
// reaches Ichor's API server.
const DefaultResync = time.Minute

// ConfigFunc returns the REST configuration of a cluster's own Kubernetes API.
type ConfigFunc func(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (*rest.Config, error)

// Reconciler keeps TalosStorages' status.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	// Nodes dials control planes for the admin kubeconfig; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Config reaches the cluster's Kubernetes API; nil means through a
	// control plane's admin kubeconfig (workload.Config).
	Config ConfigFunc
	// Resync is how often the labels are read again; zero means DefaultResync.
	Resync time.Duration

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosStorage]
}

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosstorages,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosstorages/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch

// SetupWithManager registers the reconciler: a TalosStorage is looked at
// again when it or a machine of its namespace changes, and every Resync.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosStorage{}).
		Watches(&ichorv1alpha1.TalosMachine{}, handler.EnqueueRequestsFromMapFunc(r.storagesOf)).
		Complete(r)
}

// storagesOf maps a machine to the TalosStorages of its namespace and cluster.
func (r *Reconciler) storagesOf(ctx context.Context, o client.Object) []ctrlreconcile.Request {
	m, ok := o.(*ichorv1alpha1.TalosMachine)
	if !ok {
		return nil
	}

	var list ichorv1alpha1.TalosStorageList
	if err := r.Client.List(ctx, &list, client.InNamespace(m.Namespace)); err != nil {
		return nil
	}

	var out []ctrlreconcile.Request

	for _, s := range list.Items {
		if s.Spec.ClusterName == m.Spec.ClusterName {
			out = append(out, ctrlreconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}

	return out
}

func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosStorage] {
	return &reconcile.Controller[*ichorv1alpha1.TalosStorage]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
		New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
		Owned: []string{
			ichorv1alpha1.ExtensionsPresentCondition, ichorv1alpha1.NodesPreparedCondition, ichorv1alpha1.StorageConsistentCondition,
		},
		Primary: true,
		OwnStatus: func(dst, src *ichorv1alpha1.TalosStorage) {
			dst.Status.Nodes, dst.Status.MissingExtensions = src.Status.Nodes, src.Status.MissingExtensions
			dst.Status.ReadyNodes, dst.Status.UnpreparedNodes = src.Status.ReadyNodes, src.Status.UnpreparedNodes
		},
		Summarize: ichorv1alpha1.SummarizeTalosStorage,
		Phases:    []reconcile.Phase[*ichorv1alpha1.TalosStorage]{r.status},
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// status runs the three reports, each on its own (one waiting on the
// workload cluster does not stop the others), and requeues at the soonest.
func (r *Reconciler) status(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
	var out ctrl.Result

	for _, p := range []reconcile.Phase[*ichorv1alpha1.TalosStorage]{r.extensions, r.prepared, r.consistency} {
		res, err := p(ctx, s)
		if err != nil {
			return res, err
		}

		if res.RequeueAfter > 0 && (out.RequeueAfter == 0 || res.RequeueAfter < out.RequeueAfter) {
			out.RequeueAfter = res.RequeueAfter
		}
	}

	return out, nil
}

// extensions counts the selected machines and sets ExtensionsPresent
// (storage.CheckExtensions) from their Nodes' labels.
func (r *Reconciler) extensions(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
	ts := s.Object
	resync := r.Resync

	if resync <= 0 {
		resync = DefaultResync
	}

	selected, err := r.selected(ctx, ts)
	if err != nil {
		return ctrl.Result{}, err
	}

	ts.Status.Nodes = int32(len(selected)) //nolint:gosec // a namespace's machines

	set := func(rep storage.ExtensionsReport) {
		ts.Status.MissingExtensions = rep.Missing
		apimeta.SetStatusCondition(&ts.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.ExtensionsPresentCondition, Status: rep.Status, Reason: rep.Reason, Message: rep.Message,
			ObservedGeneration: ts.Generation,
		})
	}

	if len(storage.RequiredExtensions(ts.Spec.Preset)) == 0 {
		set(storage.CheckExtensions(ts.Spec.Preset, nil))

		return ctrl.Result{}, nil
	}

	if s.Cluster == nil {
		set(storage.ExtensionsReport{Status: metav1.ConditionUnknown, Reason: storage.NodesUnreadableReason,
			Message: "TalosCluster " + ts.Spec.ClusterName + " does not exist: there are no Nodes to read"})

		return ctrl.Result{RequeueAfter: resync}, nil
	}

	nodes, err := r.nodes(ctx, s.Cluster)
	if err != nil {
		// The condition says why; the status write must not wait for the
		// workload cluster, so this is no reconcile error.
		set(storage.ExtensionsReport{Status: metav1.ConditionUnknown, Reason: storage.NodesUnreadableReason,
			Message: "cannot read the cluster's Nodes, whose extensions.talos.dev/* labels name the installed extensions: " + err.Error()})

		return ctrl.Result{RequeueAfter: resync}, nil //nolint:nilerr // the condition carries the error; the next resync reads again
	}

	exts := make([]storage.NodeExtensions, 0, len(selected))

	for i := range selected {
		n := nodeOf(&selected[i], nodes)
		e := storage.NodeExtensions{Machine: selected[i].Name, Found: n != nil}

		if n != nil {
			e.Labels = n.Labels
		}

		exts = append(exts, e)
	}

	set(storage.CheckExtensions(ts.Spec.Preset, exts))

	return ctrl.Result{RequeueAfter: resync}, nil
}

// selected are the approved machines, not being deleted, that ts selects.
func (r *Reconciler) selected(ctx context.Context, ts *ichorv1alpha1.TalosStorage) ([]ichorv1alpha1.TalosMachine, error) {
	var list ichorv1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(ts.Namespace)); err != nil {
		return nil, err
	}

	var selected []ichorv1alpha1.TalosMachine

	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved || m.DeletionTimestamp != nil {
			continue
		}

		ok, err := render.StorageSelects(ts, m)
		if err != nil {
			return nil, reconcile.Terminal(err)
		}

		if ok {
			selected = append(selected, *m)
		}
	}

	return selected, nil
}

// workloadConfig is the REST configuration of the cluster's Kubernetes API.
func (r *Reconciler) workloadConfig(ctx context.Context, cl *ichorv1alpha1.TalosCluster) (*rest.Config, error) {
	b, err := machinestate.LoadBundle(ctx, r.APIReader, cl)
	if err != nil {
		return nil, err
	}

	var cfg *rest.Config

	if r.Config != nil {
		cfg, err = r.Config(ctx, cl, b)
	} else {
		var cps []ichorv1alpha1.TalosMachine

		cps, err = machinestate.Machines(ctx, r.Client, cl.Namespace, cl.Name, func(m *ichorv1alpha1.TalosMachine) bool {
			return m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Address != "" && m.Status.ConfigSentAt != nil && m.DeletionTimestamp == nil
		})
		if err == nil {
			nodes := r.Nodes
			if nodes == nil {
				nodes = &talos.Dialer{}
			}

			cfg, err = workload.Config(ctx, nodes, cl.Name, cps, b)
		}
	}

	if err != nil {
		return nil, err
	}

	return cfg, nil
}

// nodes lists the workload cluster's Nodes.
func (r *Reconciler) nodes(ctx context.Context, cl *ichorv1alpha1.TalosCluster) ([]corev1.Node, error) {
	cfg, err := r.workloadConfig(ctx, cl)
	if err != nil {
		return nil, err
	}

	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}

	list, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}

	return list.Items, nil
}

// nodeOf is the Node of machine m: by the node name it recorded, else by its address.
func nodeOf(m *ichorv1alpha1.TalosMachine, nodes []corev1.Node) *corev1.Node {
	for i := range nodes {
		if m.Status.NodeName != "" && nodes[i].Name == m.Status.NodeName {
			return &nodes[i]
		}
	}

	want := net.ParseIP(m.Spec.Address)

	for i := range nodes {
		for _, a := range nodes[i].Status.Addresses {
			if m.Status.NodeName == "" && a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).Equal(want) {
				return &nodes[i]
			}
		}
	}

	return nil
}
