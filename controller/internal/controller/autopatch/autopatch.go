// Package autopatch writes automatic patch upgrades (architecture, principle
// 5, and issue 33 item 5). When a TalosCluster has spec.autoPatch.enabled, it
// moves spec.talosVersion and spec.kubernetesVersion to the newest patch of
// the running minor that the release tables embedded in this build list
// (contracts/pkg/release, release.Pinned: no network), once the component is
// settled at its spec version. The decision is guard.PlanAutoPatch.
//
// The controller never writes spec under its own identity: the write is a
// merge patch of the two fields (and the resourceVersion it was decided on),
// sent through a client that impersonates the ServiceAccount
// ichor-auto-patch. RBAC lets the controller impersonate that one
// ServiceAccount (its Role in Ichor's namespace, resourceNames), the
// ServiceAccount may only update and patch talosclusters
// (kustomize/base/rbac/autopatch.yaml), and the validating webhook lets it
// change only the two versions to a newer patch of the running minor
// (guard.CheckAutoPatch, guard.CheckAutoPatchMetadata) and refuses every spec
// change by the controller's own ServiceAccount (guard.CheckControllerWrite).
// The API server's audit log records the write with user ichor-controller and
// impersonatedUser ichor-auto-patch; a Normal Event AutoPatchWritten on the
// cluster names the delegated user too. The talosupgrade and
// kubernetesupgrade reconcilers then start the operations as for any spec
// change.
package autopatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// The controller may impersonate the auto-patch ServiceAccount and no other
// user; what that ServiceAccount may do is in kustomize/base/rbac/autopatch.yaml.
// +kubebuilder:rbac:groups="",namespace=ichor-system,resources=serviceaccounts,verbs=impersonate,resourceNames=ichor-auto-patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

const (
	// ControllerName names the reconciler and its Events.
	ControllerName = "autopatch"
	// WrittenReason is the Normal Event of a written patch upgrade.
	WrittenReason = "AutoPatchWritten"
	// RefusedReason is the Warning Event of a write the API server refused.
	RefusedReason = "AutoPatchRefused"
	// RetryAfterRefusal is how long a write the webhook or RBAC refused
	// waits before it is tried again (a change of the cluster tries at once).
	RetryAfterRefusal = 10 * time.Minute
)

// Reconciler writes automatic patch upgrades.
type Reconciler struct {
	// Client reads TalosClusters (cached) with the controller's identity.
	Client client.Client
	// Writer writes the versions as the auto-patch ServiceAccount; nil means
	// a client built from the manager's config with Impersonate set to
	// guard.AutoPatchUsername(Namespace).
	Writer client.Client
	// Namespace is Ichor's namespace, where the ServiceAccount lives.
	Namespace string
	Recorder  events.EventRecorder
	// Talos and Kubernetes are the releases a patch may move to; nil means
	// the pinned set's (release.Pinned).
	Talos, Kubernetes []string
}

// ImpersonatingConfig returns a copy of cfg that acts as the auto-patch
// ServiceAccount of namespace. The API server adds the ServiceAccount's
// groups itself (system:serviceaccounts, system:serviceaccounts:<namespace>).
func ImpersonatingConfig(cfg *rest.Config, namespace string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: guard.AutoPatchUsername(namespace)}

	return out
}

// SetupWithManager registers the reconciler for TalosClusters.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	if r.Writer == nil {
		w, err := client.New(ImpersonatingConfig(mgr.GetConfig(), r.Namespace), client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return fmt.Errorf("the auto-patch client: %w", err)
		}

		r.Writer = w
	}

	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName).For(&ichorv1alpha1.TalosCluster{}).Complete(r)
}

// Reconcile writes the patch upgrade guard.PlanAutoPatch decides, if any.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	c := &ichorv1alpha1.TalosCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	if !c.Spec.AutoPatch.Enabled {
		return ctrl.Result{}, nil
	}

	talos, kube := r.Talos, r.Kubernetes
	if talos == nil {
		talos = []string{release.Pinned.Talos}
	}

	if kube == nil {
		kube = []string{release.Pinned.Kubernetes}
	}

	plan := guard.PlanAutoPatch(c, talos, kube)
	if plan.TalosVersion == "" && plan.KubernetesVersion == "" {
		log.V(1).Info("no automatic patch upgrade", "why", plan.Why)

		return ctrl.Result{}, nil
	}

	body, moves := Patch(c, plan)

	user := guard.AutoPatchUsername(r.Namespace)
	if err := r.Writer.Patch(ctx, c.DeepCopy(), client.RawPatch(types.MergePatchType, body)); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return ctrl.Result{}, nil
		case !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
			// A conflict (the cluster changed since it was read: decide again
			// on the new one) or the API server out of reach: back off.
			return ctrl.Result{}, fmt.Errorf("writing %s as %s: %w", moves, user, err)
		}

		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, RefusedReason, "AutoPatch",
			"writing %s as %s was refused: %s; check the ServiceAccount %s and the controller's right to impersonate it (kustomize/base/rbac/autopatch.yaml), or turn spec.autoPatch.enabled off",
			moves, user, truncate(err.Error(), 512), guard.AutoPatchServiceAccount)

		return ctrl.Result{RequeueAfter: RetryAfterRefusal}, nil
	}

	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, WrittenReason, "AutoPatch", "%s, written as %s", moves, user)
	log.Info("wrote an automatic patch upgrade", "moves", moves, "as", user)

	return ctrl.Result{}, nil
}

// Patch is the JSON merge patch of plan on c: the resourceVersion the plan
// was decided on (so a write over a newer object is a conflict) and the
// version fields that move, nothing else; and a sentence naming the moves.
func Patch(c *ichorv1alpha1.TalosCluster, plan guard.AutoPatchPlan) ([]byte, string) {
	spec := map[string]string{}

	var moves []string

	if plan.TalosVersion != "" {
		spec["talosVersion"] = plan.TalosVersion
		moves = append(moves, fmt.Sprintf("spec.talosVersion %s → %s", c.Spec.TalosVersion, plan.TalosVersion))
	}

	if plan.KubernetesVersion != "" {
		spec["kubernetesVersion"] = plan.KubernetesVersion
		moves = append(moves, fmt.Sprintf("spec.kubernetesVersion %s → %s", c.Spec.KubernetesVersion, plan.KubernetesVersion))
	}

	body, err := json.Marshal(map[string]any{
		"metadata": map[string]string{"resourceVersion": c.ResourceVersion},
		"spec":     spec,
	})
	if err != nil {
		panic(err) // maps of strings always marshal
	}

	return body, strings.Join(moves, ", ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}

	return s[:n-3] + "..."
}
