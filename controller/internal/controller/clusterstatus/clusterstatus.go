// Package clusterstatus keeps a TalosCluster's summary of its machines:
// status.controlPlanes and status.workers (approved and Ready), the oldest
// Talos version a machine runs, and the Ready condition that the CLI's
// `cluster get` and the console's health badge show. It runs on the reconcile
// skeleton, which writes only what it owns, only when it changed.
package clusterstatus

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/attention"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "clusterstatus"

// maxNamed is how many machines a condition message names.
const maxNamed = 5

// certificateRecheck bounds how long the certificates phase waits before it
// reads the bundle again: the bundle Secret is not watched (a rotation that
// replaces it may touch no machine at once), and a wait as long as a CA's
// validity would outlive any clock correction.
const certificateRecheck = time.Hour

// Reconciler summarises a cluster's machines in its status.
type Reconciler struct {
	Client client.Client
	// APIReader reads a cluster again after a write conflict; nil means the manager's.
	APIReader client.Reader
	// Clock is the controller's clock, against which the CAs' expiry is
	// judged; nil means the real one.
	Clock clock.PassiveClock

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]
}

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// SetupWithManager registers the reconciler: a cluster is summarised again
// when it or one of its machines changes.
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
		For(&ichorv1alpha1.TalosCluster{}).
		Watches(&ichorv1alpha1.TalosMachine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrlreconcile.Request {
			m, ok := o.(*ichorv1alpha1.TalosMachine)
			if !ok || m.Spec.ClusterName == "" {
				return nil
			}

			return []ctrlreconcile.Request{{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}}}
		})).
		Complete(r)
}

// controller is the reconciler on the skeleton. It owns the cluster's Ready,
// CertificatesExpiring and Paused conditions and the machine counts, Talos
// version and certificate expiry of its status; the cluster's spec.paused
// stops the summary too.
func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosCluster] {
	return &reconcile.Controller[*ichorv1alpha1.TalosCluster]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader, Clock: r.Clock,
		New:     func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
		Owned:   []string{ichorv1alpha1.ReadyCondition, ichorv1alpha1.CertificatesExpiringCondition},
		Primary: true,
		OwnStatus: func(dst, src *ichorv1alpha1.TalosCluster) {
			dst.Status.ControlPlanes, dst.Status.Workers, dst.Status.TalosVersion = src.Status.ControlPlanes, src.Status.Workers, src.Status.TalosVersion
			dst.Status.Certificates = src.Status.Certificates
		},
		Phases: []reconcile.Phase[*ichorv1alpha1.TalosCluster]{r.summarise, r.certificates},
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// summarise computes the summary of the cluster's machines; the skeleton
// writes it when it changed.
func (r *Reconciler) summarise(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	var list ichorv1alpha1.TalosMachineList
	// Read, never kept or changed (Summarise only counts): no copy of each
	// machine. Every machine's status change wakes this summary, so with a
	// copy a thousand machines provisioning cost a million copies.
	if err := r.Client.List(ctx, &list, client.InNamespace(s.Object.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}

	Summarise(s.Object, list.Items)

	return ctrl.Result{}, nil
}

// certificates sets status.certificates from the certificates of the
// cluster's secrets bundle (its CAs' expiry; never a key) and, from what
// status then records, the CertificatesExpiring condition
// (attention.CertificatesCondition at the reconcile's time: the rule the
// console and the CLI apply too). A bundle that cannot be read leaves the
// expiry as it was: the machine reconcilers report a missing or broken
// bundle, this summary does not stall on it; the condition still follows
// the clock. It looks again when a CA enters its warning window or expires,
// and at least every certificateRecheck.
func (r *Reconciler) certificates(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	b, err := machinestate.LoadBundle(ctx, r.APIReader, s.Object)
	if err != nil && !machinestate.IsStalled(err) {
		return ctrl.Result{}, err
	}

	if err == nil {
		// A broken bundle is reported by the machine reconcilers.
		if certs, err := bundle.CertificateExpiry(b); err == nil {
			certs.ClientCertificateExpiry = s.Object.Status.Certificates.ClientCertificateExpiry
			s.Object.Status.Certificates = certs
		}
	}

	certs := s.Object.Status.Certificates
	if len(attention.CAs(certs)) == 0 {
		// Nothing recorded yet: no verdict, rather than a "valid" one.
		return ctrl.Result{}, nil
	}

	cond := attention.CertificatesCondition(s.Object.Name, certs, s.Now)
	cond.ObservedGeneration = s.Object.Generation
	apimeta.SetStatusCondition(&s.Object.Status.Conditions, cond)

	next := certificateRecheck
	if at := attention.NextCertificateChange(certs, s.Now); !at.IsZero() && at.Sub(s.Now) < next {
		next = at.Sub(s.Now)
	}

	return ctrl.Result{RequeueAfter: next}, nil
}

// Summarise sets c's machine counts, oldest Talos version and Ready
// condition from the machines (those of other clusters are ignored).
func Summarise(c *ichorv1alpha1.TalosCluster, machines []ichorv1alpha1.TalosMachine) {
	var cps, workers ichorv1alpha1.MachineCounts

	var notReady []string

	oldest := ""

	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName != c.Name || m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved {
			continue
		}

		counts := &workers
		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			counts = &cps
		}

		counts.Approved++

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			counts.Ready++
		} else {
			notReady = append(notReady, m.Name)
		}

		oldest = olderVersion(oldest, m.Status.TalosVersion)
	}

	c.Status.ControlPlanes, c.Status.Workers, c.Status.TalosVersion = cps, workers, oldest

	cond := metav1.Condition{Type: ichorv1alpha1.ReadyCondition, ObservedGeneration: c.Generation}
	counts := fmt.Sprintf("%d/%d control planes and %d/%d workers Ready (the cluster declares %d control planes)",
		cps.Ready, cps.Approved, workers.Ready, workers.Approved, c.Spec.ControlPlane.Count)

	switch {
	case cps.Ready == 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ichorv1alpha1.NoControlPlaneReadyReason
		cond.Message = "no control plane is Ready: " + counts
	case len(notReady) > 0:
		sort.Strings(notReady)

		named := notReady
		if len(named) > maxNamed {
			named = append(named[:maxNamed:maxNamed], fmt.Sprintf("and %d more", len(notReady)-maxNamed))
		}

		cond.Status, cond.Reason = metav1.ConditionFalse, ichorv1alpha1.MachinesNotReadyReason
		cond.Message = fmt.Sprintf("%s; not Ready: %s (`ichor machine get NAME` says why)", counts, strings.Join(named, ", "))
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ichorv1alpha1.AllMachinesReadyReason, counts
	}

	apimeta.SetStatusCondition(&c.Status.Conditions, cond)
}

// olderVersion returns the older of two Talos versions (v1.14.1); an empty or
// unparsable one does not count.
func olderVersion(a, b string) string {
	vb, err := semver.ParseTolerant(b)
	if err != nil {
		return a
	}

	va, err := semver.ParseTolerant(a)
	if err != nil || vb.LT(va) {
		return b
	}

	return a
}
