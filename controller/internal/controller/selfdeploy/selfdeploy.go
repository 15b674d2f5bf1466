// Package selfdeploy keeps Ichor's own Deployments as available as the
// cluster allows (architecture, "Deployment"): the controller and ichor-ui
// run two replicas with a PodDisruptionBudget when two or more nodes can run
// their pods, and one replica with none on a single schedulable node (two
// replicas and minAvailable 1 on one node would make a drain of that node
// wait forever). The installer decides this at install time; this
// reconciler follows nodes joining and leaving, with the same decision
// (contracts/pkg/install.Decide), and records it in the IchorInstallation's
// status: schedulableNodes, replicas and the HighlyAvailable condition.
//
// It is the IchorInstallation's primary controller on the reconcile
// skeleton. It changes only spec.replicas of the two Deployments and
// creates or deletes their PodDisruptionBudgets (as the install manifest
// defines them); a Helm-managed Ichor is left to the chart's values, and a
// controller that runs elsewhere (no Deployments in its namespace) changes
// nothing. The Deployments and PodDisruptionBudgets are read uncached (the
// controller may read them in its namespace only) and looked at again every
// Resync, so a hand edit is undone.
package selfdeploy

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;patch,namespace=ichor-system
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;create;delete,namespace=ichor-system

const (
	// ControllerName names the reconciler.
	ControllerName = "selfdeploy"
	// FieldOwner is the field manager of its writes.
	FieldOwner = "ichor-controller"
	// DefaultResync is how often the Deployments are looked at without a change of nodes.
	DefaultResync = 5 * time.Minute
	// ReplicasAdjustedReason is the reason of the Event a change of replicas records.
	ReplicasAdjustedReason = "ReplicasAdjusted"
)

// Reconciler adjusts the replicas and PodDisruptionBudgets of the
// controller and ichor-ui.
type Reconciler struct {
	Client client.Client
	// APIReader reads the Deployments and PodDisruptionBudgets uncached.
	APIReader client.Reader
	// Namespace is Ichor's namespace.
	Namespace string
	// Resync is how often the Deployments are looked at; zero means DefaultResync.
	Resync time.Duration
	// Recorder records an Event on the IchorInstallation for each change.
	Recorder events.EventRecorder

	skeleton *reconcile.Controller[*ichorv1alpha1.IchorInstallation]
}

// SetupWithManager registers the reconciler: the IchorInstallation is looked
// at again when a Node joins, leaves or changes its taints or labels.
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
		For(&ichorv1alpha1.IchorInstallation{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrlreconcile.Request {
			return []ctrlreconcile.Request{{NamespacedName: client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}}}
		}), builder.WithPredicates(nodeChanges())).
		Complete(r)
}

// nodeChanges passes the Node events that can change the count: created,
// deleted, and a change of taints, labels or deletion.
func nodeChanges() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)

			return !ok1 || !ok2 || fmt.Sprint(o.Spec.Taints) != fmt.Sprint(n.Spec.Taints) ||
				fmt.Sprint(o.Labels) != fmt.Sprint(n.Labels) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
	}
}

func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.IchorInstallation] {
	return &reconcile.Controller[*ichorv1alpha1.IchorInstallation]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
		New:        func() *ichorv1alpha1.IchorInstallation { return &ichorv1alpha1.IchorInstallation{} },
		Owned:      []string{ichorv1alpha1.HighlyAvailableCondition},
		Primary:    true,
		SkipPaused: true,
		OwnStatus: func(dst, src *ichorv1alpha1.IchorInstallation) {
			dst.Status.SchedulableNodes, dst.Status.Replicas = src.Status.SchedulableNodes, src.Status.Replicas
		},
		Phases: []reconcile.Phase[*ichorv1alpha1.IchorInstallation]{r.adjust},
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

func setHA(ii *ichorv1alpha1.IchorInstallation, status metav1.ConditionStatus, reason, message string) {
	apimeta.SetStatusCondition(&ii.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.HighlyAvailableCondition, Status: status, Reason: reason, Message: message, ObservedGeneration: ii.Generation,
	})
}

// adjust counts the schedulable nodes and sets each Deployment's replicas
// and PodDisruptionBudget to match; it sets HighlyAvailable, schedulableNodes
// and replicas (the controller's).
func (r *Reconciler) adjust(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.IchorInstallation]) (ctrl.Result, error) {
	ii := s.Object

	if ii.Spec.Deployment.Manager == ichorv1alpha1.ManagerHelm {
		setHA(ii, metav1.ConditionUnknown, ichorv1alpha1.ManagedByHelmReason,
			"Helm manages Ichor: the replicas and PodDisruptionBudgets follow the chart's values (controller.replicas, ichorUI.replicas)")

		return ctrl.Result{}, nil
	}

	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the nodes: %w", err)
	}

	var (
		done    []string
		primary *install.Availability
	)

	for _, name := range []string{install.ControllerName, install.UIName} {
		d := &appsv1.Deployment{}

		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, d)
		if apierrors.IsNotFound(err) {
			continue
		}

		if err != nil {
			return ctrl.Result{}, fmt.Errorf("reading Deployment %s/%s: %w", r.Namespace, name, err)
		}

		pod := &d.Spec.Template.Spec
		a := install.Decide(install.SchedulableNodes(nodes.Items, pod), install.MustStaySingle(pod))

		if err := r.apply(ctx, ii, d, a); err != nil {
			return ctrl.Result{}, err
		}

		if primary == nil {
			primary = &a
		}

		done = append(done, name)
	}

	if primary == nil {
		ii.Status.SchedulableNodes, ii.Status.Replicas = 0, 0
		setHA(ii, metav1.ConditionUnknown, ichorv1alpha1.NotDeployedReason,
			fmt.Sprintf("no Deployment %s or %s in %s: the controller runs elsewhere, and there is nothing to adjust",
				install.ControllerName, install.UIName, r.Namespace))

		return ctrl.Result{RequeueAfter: r.resync()}, nil
	}

	ii.Status.SchedulableNodes = int32(primary.SchedulableNodes) //nolint:gosec // a cluster's nodes
	ii.Status.Replicas = primary.Replicas

	msg := primary.String() + " (" + strings.Join(done, ", ") + ")"
	if primary.HighlyAvailable() {
		setHA(ii, metav1.ConditionTrue, ichorv1alpha1.MultipleNodesReason, msg)
	} else {
		setHA(ii, metav1.ConditionFalse, ichorv1alpha1.SingleNodeReason, msg+": a drain of a single node must be able to evict the only replica")
	}

	return ctrl.Result{RequeueAfter: r.resync()}, nil
}

// apply sets one Deployment's replicas and its PodDisruptionBudget.
func (r *Reconciler) apply(ctx context.Context, ii *ichorv1alpha1.IchorInstallation, d *appsv1.Deployment, a install.Availability) error {
	log := ctrl.LoggerFrom(ctx)

	if d.Spec.Replicas == nil || *d.Spec.Replicas != a.Replicas {
		before := d.DeepCopy()
		from := int32(1)

		if d.Spec.Replicas != nil {
			from = *d.Spec.Replicas
		}

		d.Spec.Replicas = &a.Replicas

		if err := r.Client.Patch(ctx, d, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
			return fmt.Errorf("setting the replicas of Deployment %s/%s: %w", d.Namespace, d.Name, err)
		}

		log.Info("replicas adjusted", "deployment", d.Name, "from", from, "to", a.Replicas, "schedulableNodes", a.SchedulableNodes)
		r.Recorder.Eventf(ii, nil, corev1.EventTypeNormal, ReplicasAdjustedReason, "Scale",
			"Deployment %s: %d to %d replicas (%s)", d.Name, from, a.Replicas, a)
	}

	pdb := &policyv1.PodDisruptionBudget{}

	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: d.Namespace, Name: d.Name}, pdb)

	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading PodDisruptionBudget %s/%s: %w", d.Namespace, d.Name, err)
	case err == nil && !a.PDB:
		if err := r.Client.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting PodDisruptionBudget %s/%s: %w", d.Namespace, d.Name, err)
		}

		log.Info("PodDisruptionBudget deleted", "deployment", d.Name, "schedulableNodes", a.SchedulableNodes)
		r.Recorder.Eventf(ii, nil, corev1.EventTypeNormal, ReplicasAdjustedReason, "DeletePodDisruptionBudget",
			"PodDisruptionBudget %s deleted (%s)", d.Name, a)
	case apierrors.IsNotFound(err) && a.PDB:
		want, err := manifestPDB(d.Name, d.Namespace)
		if err != nil {
			return err
		}

		if err := r.Client.Create(ctx, want, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PodDisruptionBudget %s/%s: %w", d.Namespace, d.Name, err)
		}

		log.Info("PodDisruptionBudget created", "deployment", d.Name, "schedulableNodes", a.SchedulableNodes)
		r.Recorder.Eventf(ii, nil, corev1.EventTypeNormal, ReplicasAdjustedReason, "CreatePodDisruptionBudget",
			"PodDisruptionBudget %s created (%s)", d.Name, a)
	}

	return nil
}

// manifestPDB is the PodDisruptionBudget name of the install manifest.
func manifestPDB(name, namespace string) (*policyv1.PodDisruptionBudget, error) {
	objs, err := install.Objects()
	if err != nil {
		return nil, err
	}

	for _, o := range objs {
		if o.GetKind() != "PodDisruptionBudget" || o.GetName() != name {
			continue
		}

		pdb := &policyv1.PodDisruptionBudget{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, pdb); err != nil {
			return nil, fmt.Errorf("the install manifest's PodDisruptionBudget %s: %w", name, err)
		}

		pdb.Namespace = namespace

		return pdb, nil
	}

	return nil, fmt.Errorf("the install manifest has no PodDisruptionBudget %s", name)
}
