// Package teardown runs the finalizer of a TalosCluster: once the cluster is
// deleted (the webhook admits that only with ichor.maesh.dev/allow-delete:
// "true"), it removes what Ichor keeps for the cluster in its namespace, in
// an order where nothing still acting on the nodes outlives what it needs:
//
//  1. the cluster's TalosOperations (nothing new starts on the nodes);
//  2. its TalosEtcdBackups and TalosCredentialRequests (the snapshots in the
//     stores are outside the cluster and stay);
//  3. only when the cluster carries ichor.maesh.dev/teardown-reset-machines:
//     "true", a graceful reset of each machine that runs its configuration,
//     recorded in the machine's status before it is sent (reset.go);
//  4. its TalosMachines, each with allow-delete: their own finalizer sees
//     the cluster going and leaves the node as it is, neither drained nor
//     reset (lifecycle, remove.go);
//  5. its TalosConfigPatches and the cluster lock's Lease;
//  6. last, the secrets bundle Secret (spec.secretsBundleRef), only when no
//     machine was left running the cluster: otherwise it is kept, with a
//     Warning Event, because it holds the only copy of the CAs of a cluster
//     that still runs;
//
// and then drops the finalizer. Each step deletes what remains and waits
// until it is gone, so a controller restarted at any point resumes at the
// first step with something left. No Talos call is made unless the resets
// are asked.
package teardown

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// ControllerName names the controller in Events and logs.
const ControllerName = "ichor-teardown"

// annotationTrue is the value of a consent annotation that gives it.
const annotationTrue = "true"

// pollWait is how long a step waits before it looks again at what it deleted.
const pollWait = 2 * time.Second

// LeftRunningAnnotation on a TalosCluster being torn down lists the
// machines that were left running its configuration when their TalosMachines
// were deleted; the teardown writes it before it deletes them, and it keeps
// the secrets bundle Secret when it is set.
const LeftRunningAnnotation = "ichor.maesh.dev/teardown-left-running"

// Event reasons.
const (
	// TearingDownReason: a step of the teardown deleted something.
	TearingDownReason = "TearingDown"
	// TornDownReason: the teardown finished and dropped the finalizer.
	TornDownReason = "TornDown"
	// BundleKeptReason: the bundle Secret was kept because machines still run the cluster.
	BundleKeptReason = "SecretsBundleKept"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosoperations;talosetcdbackups;taloscredentialrequests;talosconfigpatches,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;delete

// Reconciler is the TalosCluster finalizer.
type Reconciler struct {
	Client client.Client
	// APIReader lists the cluster's TalosMachines uncached: whether a machine
	// was reset (status.resetRequestedAt, written one step earlier in the
	// same reconcile) decides whether the bundle Secret is kept, and the
	// cache may not have seen that write yet. Nil means the manager's.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Dialer reaches the nodes for the resets the teardown-reset-machines
	// annotation asks; nil dials Talos's port with the bundle's admin identity.
	Dialer *talos.Dialer
}

// SetupWithManager registers the controller: it sees TalosClusters only.
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
	return ctrl.NewControllerManagedBy(mgr).Named("teardown").
		For(&ichorv1alpha1.TalosCluster{}).
		Complete(r)
}

// Reconcile adds the finalizer to a live cluster and tears a deleted one down.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := &ichorv1alpha1.TalosCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if c.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(c, ichorv1alpha1.ClusterFinalizer) {
			return ctrl.Result{}, nil
		}
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(c, ichorv1alpha1.ClusterFinalizer)
		return ctrl.Result{}, r.Client.Patch(ctx, c, patch)
	}
	if !controllerutil.ContainsFinalizer(c, ichorv1alpha1.ClusterFinalizer) {
		return ctrl.Result{}, nil
	}
	for _, step := range []func(context.Context, *ichorv1alpha1.TalosCluster) (bool, error){
		r.operations, r.backupsAndCredentials, r.resetMachines, r.machines, r.configuration, r.bundle,
	} {
		done, err := step(ctx, c)
		if err != nil {
			return ctrl.Result{}, err
		}
		if !done {
			return ctrl.Result{RequeueAfter: pollWait}, nil
		}
	}
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(c, ichorv1alpha1.ClusterFinalizer)
	if err := r.Client.Patch(ctx, c, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, TornDownReason, "Teardown", "cluster %s was torn down", c.Name)
	return ctrl.Result{}, nil
}

// ofCluster lists list in the cluster's namespace and keeps the items whose
// cluster (clusterOf) is c.
func ofCluster[T client.Object](ctx context.Context, r client.Reader, c *ichorv1alpha1.TalosCluster, list client.ObjectList, clusterOf func(T) string) ([]T, error) {
	if err := r.List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("listing %T in %s: %w", list, c.Namespace, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, o := range items {
		if t, ok := o.(T); ok && clusterOf(t) == c.Name {
			out = append(out, t)
		}
	}
	return out, nil
}

// deleteAll deletes objs that are not being deleted yet and reports whether
// none is left.
func (r *Reconciler) deleteAll(ctx context.Context, c *ichorv1alpha1.TalosCluster, what string, objs []client.Object) (bool, error) {
	if len(objs) == 0 {
		return true, nil
	}
	var names []string
	for _, o := range objs {
		if !o.GetDeletionTimestamp().IsZero() {
			continue
		}
		if err := r.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("deleting %s %s: %w", what, o.GetName(), err)
		}
		names = append(names, o.GetName())
	}
	if len(names) > 0 {
		slices.Sort(names)
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, TearingDownReason, "Teardown", "deleted %s %v", what, names)
	}
	return false, nil
}

func asObjects[T client.Object](in []T) []client.Object {
	out := make([]client.Object, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

// operations deletes the cluster's TalosOperations.
func (r *Reconciler) operations(ctx context.Context, c *ichorv1alpha1.TalosCluster) (bool, error) {
	ops, err := ofCluster(ctx, r.Client, c, &ichorv1alpha1.TalosOperationList{},
		func(o *ichorv1alpha1.TalosOperation) string { return o.Spec.ClusterName })
	if err != nil {
		return false, err
	}
	return r.deleteAll(ctx, c, "TalosOperations", asObjects(ops))
}

// backupsAndCredentials deletes the cluster's TalosEtcdBackups and
// TalosCredentialRequests; the snapshots in the stores stay.
func (r *Reconciler) backupsAndCredentials(ctx context.Context, c *ichorv1alpha1.TalosCluster) (bool, error) {
	backups, err := ofCluster(ctx, r.Client, c, &ichorv1alpha1.TalosEtcdBackupList{},
		func(o *ichorv1alpha1.TalosEtcdBackup) string { return o.Spec.ClusterName })
	if err != nil {
		return false, err
	}
	reqs, err := ofCluster(ctx, r.Client, c, &ichorv1alpha1.TalosCredentialRequestList{},
		func(o *ichorv1alpha1.TalosCredentialRequest) string { return o.Spec.ClusterName })
	if err != nil {
		return false, err
	}
	doneB, err := r.deleteAll(ctx, c, "TalosEtcdBackups (their snapshots stay in the store)", asObjects(backups))
	if err != nil {
		return false, err
	}
	doneR, err := r.deleteAll(ctx, c, "TalosCredentialRequests", asObjects(reqs))
	return doneB && doneR, err
}

// machines deletes the cluster's TalosMachines, each with allow-delete
// first; their own finalizer leaves the nodes as they are.
func (r *Reconciler) machines(ctx context.Context, c *ichorv1alpha1.TalosCluster) (bool, error) {
	ms, err := ofCluster(ctx, r.machineReader(), c, &ichorv1alpha1.TalosMachineList{},
		func(o *ichorv1alpha1.TalosMachine) string { return o.Spec.ClusterName })
	if err != nil {
		return false, err
	}
	// Recorded before any machine goes: which of them keep running the
	// cluster (configuration sent, never reset), so that the last step keeps
	// their CAs.
	var running []string
	for _, m := range ms {
		if leftRunning(m) {
			running = append(running, m.Name)
		}
	}
	if len(running) > 0 && c.Annotations[LeftRunningAnnotation] == "" {
		slices.Sort(running)
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[LeftRunningAnnotation] = strings.Join(running, ",")
		if err := r.Client.Patch(ctx, c, patch); err != nil {
			return false, fmt.Errorf("recording the machines left running: %w", err)
		}
	}
	for _, m := range ms {
		if !m.DeletionTimestamp.IsZero() || m.Annotations[ichorv1alpha1.AllowDeleteAnnotation] == annotationTrue {
			continue
		}
		patch := client.MergeFrom(m.DeepCopy())
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = annotationTrue
		if err := r.Client.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("allowing the deletion of TalosMachine %s: %w", m.Name, err)
		}
	}
	return r.deleteAll(ctx, c, "TalosMachines (their nodes are left as they are)", asObjects(ms))
}

// machineReader reads TalosMachines past the cache (APIReader), or through
// Client when there is none.
func (r *Reconciler) machineReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// configuration deletes the cluster's TalosConfigPatches and its lock Lease.
func (r *Reconciler) configuration(ctx context.Context, c *ichorv1alpha1.TalosCluster) (bool, error) {
	patches, err := ofCluster(ctx, r.Client, c, &ichorv1alpha1.TalosConfigPatchList{},
		func(o *ichorv1alpha1.TalosConfigPatch) string { return o.Spec.ClusterName })
	if err != nil {
		return false, err
	}
	done, err := r.deleteAll(ctx, c, "TalosConfigPatches", asObjects(patches))
	if err != nil || !done {
		return done, err
	}
	lease := &coordinationv1.Lease{}
	key := types.NamespacedName{Namespace: c.Namespace, Name: lock.LeaseName(types.NamespacedName{Namespace: c.Namespace, Name: c.Name})}
	switch err := r.Client.Get(ctx, key, lease); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading the cluster lock Lease %s: %w", key.Name, err)
	}
	if err := r.Client.Delete(ctx, lease); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting the cluster lock Lease %s: %w", key.Name, err)
	}
	return true, nil
}

// bundle deletes the secrets bundle Secret, last, unless a machine of the
// cluster was left running its configuration (provisioned and not reset):
// the Secret then holds the only copy of that cluster's CAs and is kept.
func (r *Reconciler) bundle(ctx context.Context, c *ichorv1alpha1.TalosCluster) (bool, error) {
	name := c.Spec.SecretsBundleRef.Name
	if name == "" {
		return true, nil
	}
	if c.Annotations[LeftRunningAnnotation] != "" {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, BundleKeptReason, "Teardown",
			"kept the secrets bundle Secret %s: machines %s still run this cluster's configuration and it holds the only copy of its CAs; "+
				"export what you need (`ichor secrets export`) and delete it by hand when they are reset", name, c.Annotations[LeftRunningAnnotation])
		return true, nil
	}
	s := &corev1.Secret{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, s); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading the secrets bundle Secret %s: %w", name, err)
	}
	if err := r.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting the secrets bundle Secret %s: %w", name, err)
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, TearingDownReason, "Teardown", "deleted the secrets bundle Secret %s", name)
	return true, nil
}
