// Package cnihandover makes Ichor's Helm release the owner of Cilium
// (architecture, "CNI"; issue #20 item 1). `ichor init` boots Cilium from a
// Talos inline manifest, which Talos applies create-only and never again, so
// nothing would own the running Cilium. Once the bootstrap Cilium DaemonSet
// has rolled out, this controller runs the `ichor-cni` Job (the installer
// image's `ichor-installer cni apply`, in kube-system, host network) that
// installs release kube-system/cilium with the Helm SDK, taking over the
// bootstrapped objects with the same chart and values, so no pod restarts.
//
// The Job's exit code is not trusted: the hand-over is done when Helm's own
// release record (cilium.Deployed) says the release is deployed with the
// chart version and values this controller asked for. Then CNIHandover is
// True and status.cni.valuesHash records the values; the control planes'
// render drops the inline entry (render.LoadInput). A later change of the
// values (spec.cni.cilium.values, the Node count the operator's replicas
// follow) is applied the same way. A Job that fails is retried with a growing
// back-off, the reason in the condition. The Job runs under the cluster lock
// as lock.CNIHelmIdentity, which this controller takes before it creates the
// Job and releases when the Job has ended.
package cnihandover

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
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
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/controller/internal/cnijob"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "cnihandover"

const (
	// attemptLabel on a Job counts the attempts at one request.
	attemptLabel = "ichor.maesh.dev/attempt"
	// requestAnnotation on a Job is the hash of the request it carries.
	requestAnnotation = "ichor.maesh.dev/cni-request"

	// DefaultJobTimeout bounds one Helm run (its waits for the rollout included).
	DefaultJobTimeout = 10 * time.Minute

	pollInterval = 10 * time.Second
	// settledInterval is how often a handed-over cluster is looked at again
	// (a release changed by hand, a Node joining).
	settledInterval = 5 * time.Minute
	firstBackoff    = 30 * time.Second
	maxBackoff      = 10 * time.Minute
)

// Reconciler hands Cilium over to Ichor's Helm release and keeps the
// release's values those the cluster asks for.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Locker takes the cluster lock; nil means one on Client.
	Locker *lock.Locker
	// Image is the installer image the Job runs; empty means this build's.
	Image string
	// JobTimeout bounds one Helm run; zero means DefaultJobTimeout.
	JobTimeout time.Duration
	// FirstBackoff is the wait after a first failed Job, doubled for each
	// further one up to ten minutes; zero means 30 s.
	FirstBackoff time.Duration

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]
}

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines;talosoperations,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=ichor-system,resources=leases,verbs=get;list;watch;create;update;patch

// SetupWithManager registers the reconciler on TalosClusters.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	r.defaults()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCluster{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A cni operation (a chart upgrade) changes the release: its end
		// wakes the cluster, so the condition names the chart that runs.
		Watches(&ichorv1alpha1.TalosOperation{}, handler.EnqueueRequestsFromMapFunc(cniOperationCluster)).
		Complete(r)
}

// cniOperationCluster maps a cni operation to its cluster.
func cniOperationCluster(_ context.Context, o client.Object) []ctrlreconcile.Request {
	op, ok := o.(*ichorv1alpha1.TalosOperation)
	if !ok || op.Spec.Type != ichorv1alpha1.OperationCNI {
		return nil
	}

	return []ctrlreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: op.Namespace, Name: op.Spec.ClusterName}}}
}

func (r *Reconciler) defaults() {
	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	if r.Locker == nil {
		r.Locker = &lock.Locker{Client: r.Client, Check: lock.ClientChecker(r.APIReader)}
	}

	if r.Image == "" {
		r.Image = install.InstallerImage(version.Get().Version)
	}

	if r.JobTimeout <= 0 {
		r.JobTimeout = DefaultJobTimeout
	}

	if r.FirstBackoff <= 0 {
		r.FirstBackoff = firstBackoff
	}

	if r.skeleton == nil {
		r.skeleton = &reconcile.Controller[*ichorv1alpha1.TalosCluster]{
			Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
			New:   func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
			Owned: []string{ichorv1alpha1.CNIHandoverCondition},
			OwnStatus: func(dst, src *ichorv1alpha1.TalosCluster) {
				dst.Status.CNI.ValuesHash = src.Status.CNI.ValuesHash
			},
			Phases: []reconcile.Phase[*ichorv1alpha1.TalosCluster]{r.reconcile},
		}
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.defaults()

	return r.skeleton.Reconcile(ctx, req)
}

// pendingf reports a hand-over not done yet, or failing. Once Cilium runs as
// the release, CNIHandover stays True whatever a later values change does
// (the render must not take the bootstrap entry back): the change's progress
// or failure goes into its message, and status.cni.valuesHash keeps the
// values last applied.
func (r *Reconciler) pendingf(c *ichorv1alpha1.TalosCluster, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)

	if apimeta.IsStatusConditionTrue(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition) {
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.CNIHandoverCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.CNIHandoverDoneReason,
			Message: fmt.Sprintf("Cilium runs as Helm release %s/%s; new values are not applied yet: %s", cilium.Namespace, cilium.ReleaseName, msg),
		})

		return
	}

	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.CNIHandoverCondition, Status: metav1.ConditionFalse, Reason: reason, Message: msg,
	})
}

// waitingf reports what the hand-over waits for; a handed-over cluster's
// condition is left as it is (a rolling DaemonSet, an API server briefly
// away are not news about the release).
func (r *Reconciler) waitingf(c *ichorv1alpha1.TalosCluster, format string, args ...any) {
	if !apimeta.IsStatusConditionTrue(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition) {
		r.pendingf(c, ichorv1alpha1.CNIHandoverPendingReason, format, args...)
	}
}

func (r *Reconciler) reconcile(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object
	// Only the Cilium `ichor init` booted, or the one `ichor adopt` found
	// running and wrote the cluster to take over, is handed over; a cluster
	// made otherwise has no Cilium of Ichor's to take over.
	if !cilium.HandsOver(c) {
		apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition)

		return ctrl.Result{}, nil
	}

	cfg, k, err := workload.ForCluster(ctx, r.APIReader, r.Client, r.Nodes, c)
	if err != nil {
		r.waitingf(c, "the cluster's Kubernetes API is not reachable yet: %v", err)

		return ctrl.Result{RequeueAfter: pollInterval}, nil
	}

	ds, err := k.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading DaemonSet %s/cilium: %w", cilium.Namespace, err)
		}

		r.waitingf(c, "waiting for the bootstrap Cilium (DaemonSet %s/cilium) to be created", cilium.Namespace)

		return ctrl.Result{RequeueAfter: pollInterval}, nil
	}

	if ok, why, err := workload.DaemonSetRolledOut(ctx, k, cilium.Namespace, "cilium"); err != nil || !ok {
		if err != nil {
			why = err.Error()
		}

		r.waitingf(c, "waiting for Cilium's DaemonSet %s/cilium to roll out: %s", cilium.Namespace, why)

		return ctrl.Result{RequeueAfter: pollInterval}, nil
	}

	deployed, err := cilium.Deployed(ctx, cfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading Helm's release %s/%s: %w", cilium.Namespace, cilium.ReleaseName, err)
	}

	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the cluster's Nodes: %w", err)
	}

	// Cilium's kubeProxyReplacement follows the mode Talos's side runs, not
	// a pending switch of spec.cni.kubeProxy: the kube-proxy operation moves
	// the two in order, under the cluster lock, and a switch called off
	// before its Talos step is put back here.
	settled := c.DeepCopy()
	settled.Spec.CNI.KubeProxy = guard.RenderedKubeProxy(c)

	req, err := cnijob.Request(settled, ds, deployed, len(nodes.Items))
	if err != nil {
		r.pendingf(c, ichorv1alpha1.CNIHandoverFailedReason, "%v", err)

		return ctrl.Result{RequeueAfter: settledInterval}, nil
	}

	hash, err := cnijob.ValuesHash(req)
	if err != nil {
		r.pendingf(c, ichorv1alpha1.CNIHandoverFailedReason, "%v", err)

		return ctrl.Result{RequeueAfter: settledInterval}, nil
	}

	if cnijob.Applied(deployed, req, hash) {
		return r.done(ctx, s, k, deployed, hash)
	}

	return r.runJob(ctx, s, k, req, hash, deployed)
}

func (r *Reconciler) done(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster], k kubernetes.Interface,
	deployed *cilium.ReleaseState, hash string,
) (ctrl.Result, error) {
	c := s.Object
	if !apimeta.IsStatusConditionTrue(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition) {
		ctrl.LoggerFrom(ctx).Info("Cilium runs as Ichor's Helm release", "chart", deployed.Version, "revision", deployed.Revision)
	}

	apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.CNIHandoverCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.CNIHandoverDoneReason,
		Message: fmt.Sprintf("Cilium runs as Helm release %s/%s (chart %s, revision %d)", cilium.Namespace, cilium.ReleaseName, deployed.Version, deployed.Revision),
	})
	c.Status.CNI.ValuesHash = hash

	// The Jobs and their requests are of no use once applied; a failed
	// one's log was in the condition.
	if err := r.cleanup(ctx, k, ""); err != nil {
		return ctrl.Result{}, err
	}

	if _, err := r.Locker.Release(ctx, clusterKey(c), lock.CNIHelmIdentity); err != nil {
		return ctrl.Result{}, fmt.Errorf("releasing the cluster lock: %w", err)
	}

	return ctrl.Result{RequeueAfter: settledInterval}, nil
}

func clusterKey(c *ichorv1alpha1.TalosCluster) types.NamespacedName {
	return types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
}

// jobName names the Job of one request and attempt.
func jobName(requestHash string, attempt int) string {
	return fmt.Sprintf("ichor-cni-%s-%d", requestHash[:10], attempt)
}

func requestHash(req cilium.Request, valuesHash string) string {
	sum := sha256.Sum256([]byte(req.Version + "\x00" + req.KubernetesVersion + "\x00" + valuesHash))

	return hex.EncodeToString(sum[:])
}

// runJob starts, follows or retries the Job of the request.
func (r *Reconciler) runJob(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster], k kubernetes.Interface,
	req cilium.Request, valuesHash string, deployed *cilium.ReleaseState,
) (ctrl.Result, error) {
	c := s.Object
	rh := requestHash(req, valuesHash)

	jobs, err := k.BatchV1().Jobs(cilium.Namespace).List(ctx, metav1.ListOptions{LabelSelector: cnijob.HandoverSelector})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the ichor-cni Jobs: %w", err)
	}

	// The latest attempt at this request; Jobs of other requests are stale.
	var (
		last    *batchv1.Job
		attempt int
	)

	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Annotations[requestAnnotation] != rh {
			continue
		}

		if n, _ := strconv.Atoi(j.Labels[attemptLabel]); n > attempt {
			last, attempt = j, n
		}
	}

	if err := r.cleanup(ctx, k, rh); err != nil {
		return ctrl.Result{}, err
	}

	if last != nil {
		st, msg := cnijob.State(last)
		switch st {
		case cnijob.Running:
			if res, err := r.lock(ctx, c); err != nil || !res.Acquired {
				return ctrl.Result{RequeueAfter: pollInterval}, err
			}

			r.pendingf(c, ichorv1alpha1.CNIHandoverPendingReason, "the Job %s/%s applies Helm release %s (chart %s, attempt %d)",
				cilium.Namespace, last.Name, cilium.ReleaseName, req.Version, attempt)

			return ctrl.Result{RequeueAfter: pollInterval}, nil
		case cnijob.Succeeded:
			// The release record disagrees (checked by the caller): the Job's
			// claim is not taken on trust.
			msg = fmt.Sprintf("the Job ended without error, but Helm's release record says %s", cnijob.Describe(deployed))
		}

		if _, err := r.Locker.Release(ctx, clusterKey(c), lock.CNIHelmIdentity); err != nil {
			return ctrl.Result{}, fmt.Errorf("releasing the cluster lock: %w", err)
		}

		wait := r.backoff(attempt)
		ended := cnijob.Ended(last)

		if left := ended.Add(wait).Sub(s.Now); left > 0 {
			r.pendingf(c, ichorv1alpha1.CNIHandoverFailedReason, "attempt %d of the Job %s/%s failed: %s; the next attempt starts in %s (see `kubectl -n %s logs job/%s`)",
				attempt, cilium.Namespace, last.Name, msg, left.Round(time.Second), cilium.Namespace, last.Name)

			return ctrl.Result{RequeueAfter: left}, nil
		}
	}

	res, err := r.lock(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}

	if !res.Acquired {
		r.pendingf(c, ichorv1alpha1.CNIHandoverPendingReason, "waiting for the cluster lock, held by %s", res.Holder)

		return ctrl.Result{RequeueAfter: pollInterval}, nil
	}

	name := jobName(rh, attempt+1)
	if err := cnijob.Create(ctx, k, r.Image, r.JobTimeout, req, name,
		map[string]string{attemptLabel: strconv.Itoa(attempt + 1)}, map[string]string{requestAnnotation: rh}); err != nil {
		return ctrl.Result{}, err
	}

	ctrl.LoggerFrom(ctx).Info("started the Cilium Helm Job", "job", name, "chart", req.Version, "attempt", attempt+1)
	r.pendingf(c, ichorv1alpha1.CNIHandoverPendingReason, "the Job %s/%s applies Helm release %s (chart %s, attempt %d)",
		cilium.Namespace, name, cilium.ReleaseName, req.Version, attempt+1)

	return ctrl.Result{RequeueAfter: pollInterval}, nil
}

func (r *Reconciler) lock(ctx context.Context, c *ichorv1alpha1.TalosCluster) (lock.Result, error) {
	res, err := r.Locker.Acquire(ctx, clusterKey(c), lock.CNIHelmIdentity)
	if errors.Is(err, lock.ErrConflict) {
		return lock.Result{Holder: "(changing)"}, nil
	}

	if err != nil {
		return res, fmt.Errorf("taking the cluster lock: %w", err)
	}

	return res, nil
}

func (r *Reconciler) backoff(attempt int) time.Duration {
	d := r.FirstBackoff
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}

	return min(d, maxBackoff)
}

// cleanup deletes the ichor-cni Jobs and ConfigMaps that are not of the
// request keep (all of them when keep is empty). A running Job of another
// request is left to finish: two Helm runs at once would fight over the
// release. A request ConfigMap without its Job (a controller stopped between
// creating the two) is deleted too; Create makes it again with the Job.
func (r *Reconciler) cleanup(ctx context.Context, k kubernetes.Interface, keep string) error {
	jobs, err := k.BatchV1().Jobs(cilium.Namespace).List(ctx, metav1.ListOptions{LabelSelector: cnijob.HandoverSelector})
	if err != nil {
		return fmt.Errorf("listing the ichor-cni Jobs: %w", err)
	}

	kept := map[string]bool{}

	for i := range jobs.Items {
		j := &jobs.Items[i]
		if keep != "" && j.Annotations[requestAnnotation] == keep {
			kept[j.Name] = true

			continue
		}

		if st, _ := cnijob.State(j); st == cnijob.Running {
			kept[j.Name] = true

			continue
		}

		if err := cnijob.Delete(ctx, k, j.Name); err != nil {
			return err
		}
	}

	cms, err := k.CoreV1().ConfigMaps(cilium.Namespace).List(ctx, metav1.ListOptions{LabelSelector: cnijob.HandoverSelector})
	if err != nil {
		return fmt.Errorf("listing the ichor-cni requests: %w", err)
	}

	for i := range cms.Items {
		if kept[cms.Items[i].Name] {
			continue
		}

		if err := k.CoreV1().ConfigMaps(cilium.Namespace).Delete(ctx, cms.Items[i].Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ConfigMap %s/%s: %w", cilium.Namespace, cms.Items[i].Name, err)
		}
	}

	return nil
}
