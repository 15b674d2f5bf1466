// Package talosmachine holds the TalosMachine reconciler: it renders each
// configured machine's configuration, compares it with the node's over COSI,
// applies the changes that need no reboot, reports the ones that wait for a
// config operation, and reports (or, under AutoCorrect, corrects) drift
// (architecture, "Configuration reconcile").
package talosmachine

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters;talosconfigpatches;talosstorages,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller, its Events and its field manager.
const ControllerName = "talosmachine"

// DefaultDriftInterval is how often a configured machine's node is read for drift.
const DefaultDriftInterval = 5 * time.Minute

// clusterIndex indexes TalosMachines and TalosConfigPatches by spec.clusterName.
const clusterIndex = machinestate.ClusterIndex

// Reconciler reconciles TalosMachines.
type Reconciler struct {
	Client client.Client
	// APIReader reads the bundle Secret uncached: the controller may get a
	// Secret, not list or watch every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// DriftInterval is the drift polling period (jittered by up to 20%);
	// zero means DefaultDriftInterval.
	DriftInterval time.Duration
	// Nodes connects to Talos nodes; nil means a Dialer.
	Nodes *talos.Dialer
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock
	// Workers is how many machines are reconciled at once; zero means
	// machinestate.DefaultWorkers.
	Workers int
	// LookRate bounds the drift looks per second, all machines together
	// (machinestate.Pace); zero means machinestate.DefaultLookRate.
	LookRate float64

	pace machinestate.Pace
	// renders keeps each machine's render until its inputs change: a drift
	// look at a machine at rest renders nothing.
	renders machinestate.Renders
}

// SetupWithManager registers the reconciler. Only spec, label and
// provisioning changes of a machine and a reconcile request wake it, never
// its own status writes.
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

	r.pace.Reader, r.pace.Rate = r.Client, r.LookRate

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: machinestate.Workers(r.Workers)}).
		For(&ichorv1alpha1.TalosMachine{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, provisioningChanged{}, reconcileRequested{}, holdChanged{}))).
		Watches(&ichorv1alpha1.TalosConfigPatch{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfCluster),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&ichorv1alpha1.TalosCluster{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfCluster),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, kubeProxyRecordChanged{}))).
		Watches(&ichorv1alpha1.TalosStorage{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfStorage),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The default drift policy is read live (settings.Read) and the
		// published issuer goes into the render: either changing reaches
		// every machine at once, not at its next drift check.
		Watches(&ichorv1alpha1.IchorInstallation{}, handler.EnqueueRequestsFromMapFunc(r.allMachines),
			builder.WithPredicates(installationChanged{})).
		Complete(r)
}

// allMachines maps the IchorInstallation to every TalosMachine.
func (r *Reconciler) allMachines(ctx context.Context, _ client.Object) []reconcile.Request {
	var list ichorv1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the machines after a change of the IchorInstallation")

		return nil
	}

	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}

	return out
}

// installationChanged passes a created IchorInstallation and a change of
// what the machines read of it: the default drift policy, the issuer.
type installationChanged struct {
	predicate.Funcs
}

func (installationChanged) Create(event.CreateEvent) bool { return true }

func (installationChanged) Update(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*ichorv1alpha1.IchorInstallation)
	n, okNew := e.ObjectNew.(*ichorv1alpha1.IchorInstallation)

	if !okOld || !okNew {
		return false
	}

	return o.Spec.Settings.DefaultDriftPolicy != n.Spec.Settings.DefaultDriftPolicy ||
		!equality.Semantic.DeepEqual(o.Status.Issuer, n.Status.Issuer)
}

// machinesOfCluster maps a cluster or a patch to the machines of its cluster.
func (r *Reconciler) machinesOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	name := o.GetName()
	if p, ok := o.(*ichorv1alpha1.TalosConfigPatch); ok {
		name = p.Spec.ClusterName
	}

	var list ichorv1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{clusterIndex: name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the machines of a cluster", "cluster", name)

		return nil
	}

	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}

	return out
}

// machinesOfStorage maps a TalosStorage to the machines of its cluster it
// selects: their system layer carries its preset. An update maps the old and
// the new object, so machines a changed nodeSelector no longer selects are
// re-rendered too; a storage being deleted still maps to the machines it
// selected.
func (r *Reconciler) machinesOfStorage(ctx context.Context, o client.Object) []reconcile.Request {
	s, ok := o.(*ichorv1alpha1.TalosStorage)
	if !ok {
		return nil
	}

	s = s.DeepCopy()
	s.DeletionTimestamp = nil

	var list ichorv1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingFields{clusterIndex: s.Spec.ClusterName}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the machines of a cluster", "cluster", s.Spec.ClusterName)

		return nil
	}

	var out []reconcile.Request

	for i := range list.Items {
		selected, err := render.StorageSelects(s, &list.Items[i])
		if err != nil {
			// The render reports the bad selector on every machine of the cluster.
			selected = true
		}

		if selected {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}

	return out
}

// provisioningChanged passes a status update that changes whether the machine
// is configured (Provisioned, stage, address), which the provisioning
// reconciler writes.
type provisioningChanged struct {
	predicate.Funcs
}

func (provisioningChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*ichorv1alpha1.TalosMachine)
	n, ok2 := e.ObjectNew.(*ichorv1alpha1.TalosMachine)

	if !ok1 || !ok2 {
		return false
	}

	return configured(o) != configured(n) || o.Status.Stage != n.Status.Stage
}

// reconcileRequested passes a change of the reconcile-request annotation (a
// config operation sets it when it leaves a machine, so that the machine's
// status follows at once, not at the next drift poll).
type reconcileRequested struct {
	predicate.Funcs
}

func (reconcileRequested) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}

	k := ichorv1alpha1.ReconcileRequestedAnnotation

	return e.ObjectOld.GetAnnotations()[k] != e.ObjectNew.GetAnnotations()[k]
}

// holdChanged passes a change of the hold-apply annotation: a hold set or
// lifted shows in AdoptionHeld at once, and a lifted hold applies what waited.
// kubeProxyRecordChanged passes a cluster whose status.cni.kubeProxy moved:
// the render of Talos's kube-proxy follows it (render.TalosKubeProxy), and the
// kube-proxy operation waits for the control planes to run it.
type kubeProxyRecordChanged struct {
	predicate.Funcs
}

func (kubeProxyRecordChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*ichorv1alpha1.TalosCluster)
	n, ok2 := e.ObjectNew.(*ichorv1alpha1.TalosCluster)

	return ok1 && ok2 && o.Status.CNI.KubeProxy != n.Status.CNI.KubeProxy
}

type holdChanged struct {
	predicate.Funcs
}

func (holdChanged) Update(e event.UpdateEvent) bool {
	if e.ObjectOld == nil || e.ObjectNew == nil {
		return false
	}

	_, was := e.ObjectOld.GetAnnotations()[ichorv1alpha1.HoldApplyAnnotation]
	_, is := e.ObjectNew.GetAnnotations()[ichorv1alpha1.HoldApplyAnnotation]

	return was != is
}

// held reports whether the hold-apply annotation stops applies to m.
func held(m *ichorv1alpha1.TalosMachine) bool {
	_, ok := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]

	return ok
}

// configured is true for an approved machine with an address that has been
// provisioned: only then does it run a configuration the reconciler owns.
func configured(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.Spec.Address != "" &&
		apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition)
}

// scope is what the steps of one configuration reconcile share.
type scope struct {
	machine *ichorv1alpha1.TalosMachine
	cluster *ichorv1alpha1.TalosCluster
	result  *render.Result
	// storages are the TalosStorages the render read.
	storages []ichorv1alpha1.TalosStorage
	node     *talos.Verified
	// active and persistent are the node's running and stored configurations.
	active, persistent []byte
}

// Reconcile runs the reconciler on the skeleton (reconcile.Controller).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.controller().Reconcile(ctx, req)
}

// controller is the reconciler on the skeleton. It is the TalosMachine's
// primary controller (Paused, status.observedGeneration) and owns the
// configuration conditions and fields; Ready, Reconciling and Stalled are the
// summary of every controller's conditions (SummarizeTalosMachine). It keeps
// no finalizer: it leaves nothing outside the API to clean up.
func (r *Reconciler) controller() *ichorreconcile.Controller[*ichorv1alpha1.TalosMachine] {
	return &ichorreconcile.Controller[*ichorv1alpha1.TalosMachine]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader, Clock: r.Clock,
		New:     func() *ichorv1alpha1.TalosMachine { return &ichorv1alpha1.TalosMachine{} },
		Primary: true,
		Owned: []string{
			ichorv1alpha1.InSyncCondition, ichorv1alpha1.DriftedCondition, ichorv1alpha1.RebootRequiredCondition,
			ichorv1alpha1.APIServerRestartRequiredCondition, ichorv1alpha1.DiskRolesEffectiveCondition,
			ichorv1alpha1.AdoptionHeldCondition,
		},
		OwnStatus: func(dst, src *ichorv1alpha1.TalosMachine) {
			dst.Status.RenderedConfigHash, dst.Status.AppliedConfigHash = src.Status.RenderedConfigHash, src.Status.AppliedConfigHash
			dst.Status.RenderVersion = src.Status.RenderVersion
			dst.Status.DriftPaths, dst.Status.RebootRequiredPaths = src.Status.DriftPaths, src.Status.RebootRequiredPaths
		},
		Summarize: ichorv1alpha1.SummarizeTalosMachine,
		Phases:    []ichorreconcile.Phase[*ichorv1alpha1.TalosMachine]{r.reconcileConfig},
	}
}

// reconcileConfig renders, reads the node and acts on the difference; a
// machine that is not configured (not approved, not provisioned, being
// deleted) is left alone.
func (r *Reconciler) reconcileConfig(ctx context.Context, sk *ichorreconcile.Scope[*ichorv1alpha1.TalosMachine]) (ctrl.Result, error) {
	m := sk.Object
	markHeld(m)

	if !m.DeletionTimestamp.IsZero() || !configured(m) {
		ctrl.LoggerFrom(ctx).V(1).Info("not configured: nothing to apply")

		return ctrl.Result{}, nil
	}

	s := &scope{machine: m}

	defer func() {
		if s.node != nil {
			s.node.Close()
		}
	}()

	for _, step := range []func(context.Context, *scope) (ctrl.Result, error){r.reconcileRender, r.reconcileNode, r.reconcileDiskRoles} {
		res, err := step(ctx, s)
		if err != nil || res.RequeueAfter > 0 {
			return res, err
		}
	}

	return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
}

// driftInterval is the polling period with up to 20% jitter, so machines do
// not poll in step, stretched past DriftInterval by the pace of looks
// (machinestate.Pace) in a large fleet.
func (r *Reconciler) driftInterval() time.Duration {
	d := r.DriftInterval
	if d <= 0 {
		d = DefaultDriftInterval
	}

	return r.pace.Every(context.Background(), d)
}

// reconcileRender loads the cluster, its bundle and the patches, renders,
// and reads the node's configuration.
func (r *Reconciler) reconcileRender(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine

	st, err := r.renders.Load(ctx, r.Client, r.APIReader, m)
	if err != nil {
		if machinestate.IsStalled(err) {
			markStalled(m, err.Error())

			return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
		}

		return ctrl.Result{}, err
	}

	s.cluster, s.result, s.storages = st.Cluster, st.Result, st.Storages
	m.Status.RenderedConfigHash = st.Result.Hash

	node, err := r.Nodes.Dial(ctx, m.Spec.Address, st.Bundle)
	if err != nil {
		markUnreachable(m, err)

		return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
	}

	// Every call this reconciler makes to change the node goes through the
	// verified handle: the node at the address must be this machine.
	v, err := node.VerifyIdentity(ctx, talos.MachineIdentity(m))
	if err != nil {
		node.Close()

		if mm := talos.AsIdentityMismatch(err); mm != nil {
			r.identityMismatch(m, mm)

			return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
		}

		markUnreachable(m, err)

		return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
	}

	s.node = v

	if s.active, s.persistent, err = node.Config(ctx); err != nil {
		markUnreachable(m, err)

		return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
	}

	return ctrl.Result{}, nil
}
