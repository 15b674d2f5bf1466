// Package impersonation bounds in RBAC whom ichor-ui may impersonate
// (architecture, "Trust"): the ClusterRole ichor-ui-impersonate-users, bound
// to ichor-ui's ServiceAccount, has one rule, `impersonate` on `users`, whose
// resourceNames this reconciler keeps equal to ichor:<name> for every
// IchorUser of the install namespace that is not disabled, plus the user
// names the deployment gives (--impersonate-user, the chart's
// ichorUI.impersonation.users, e.g. oidc:alice for the external provider).
// ichor-ui checks the same rule in Go (uiserver/internal/identity); RBAC is
// the bound that holds even if that check is wrong.
//
// An empty resourceNames list means "every name" in RBAC, so with no user at
// all the rule names only Placeholder, a name that no sign-in can produce.
//
// The controller may change this one ClusterRole only: `get`, `update` and
// `escalate` with resourceNames (escalate because it does not hold
// `impersonate` itself, and the API server refuses a role update that grants
// more than the writer holds otherwise). It cannot create it: the manifests
// install it, and a missing role is logged and tried again at the next resync.
package impersonation

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorusers,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;update;escalate,resourceNames=ichor-ui-impersonate-users

const (
	// ControllerName names the reconciler.
	ControllerName = "impersonation"
	// DefaultRoleName is the ClusterRole whose users rule is kept (kustomize/base/rbac/ui.yaml).
	DefaultRoleName = "ichor-ui-impersonate-users"
	// Placeholder is the only name of the rule when no user may be
	// impersonated: ichor-ui impersonates ichor:<name> and oidc:<name> only,
	// so no sign-in yields it.
	Placeholder = "ichor-ui:impersonates-nobody"
	// DefaultResync bounds the time until a hand edit of the role is undone.
	DefaultResync = 10 * time.Minute
	// IchorPrefix is the user name prefix of Ichor's own users.
	IchorPrefix = "ichor:"
	// OIDCPrefix is the user name prefix of an external provider's users.
	OIDCPrefix = "oidc:"
)

// CheckExtraUser returns an error when name may not be given as an extra
// user: only ichor:<name> and oidc:<name>, never a system: name.
func CheckExtraUser(name string) error {
	rest, ok := strings.CutPrefix(name, IchorPrefix)
	if !ok {
		rest, ok = strings.CutPrefix(name, OIDCPrefix)
	}
	if !ok || rest == "" || strings.ContainsAny(rest, ":\n\r ") {
		return fmt.Errorf("--impersonate-user %q: give ichor:<name> or oidc:<name> (ichor-ui impersonates no other user, never a system: name)", name)
	}
	return nil
}

// Reconciler keeps the users rule of RoleName.
type Reconciler struct {
	// Client lists IchorUsers (cached).
	Client client.Client
	// Reader reads the ClusterRole uncached: the controller may not list ClusterRoles.
	Reader client.Reader
	// Namespace holds the IchorUsers (the install namespace).
	Namespace string
	// RoleName is the ClusterRole; empty means DefaultRoleName.
	RoleName string
	// ExtraUsers are names the deployment gives (checked with CheckExtraUser).
	ExtraUsers []string
	// Resync is the time between two checks without an event; zero means DefaultResync.
	Resync time.Duration
}

// Users returns the sorted names the rule must list for users (IchorUsers of
// the namespace) and extra: ichor:<name> of each user neither disabled nor
// being deleted, then extra; Placeholder alone when that is empty.
func Users(users []ichorv1alpha1.IchorUser, extra []string) []string {
	var out []string
	for i := range users {
		u := &users[i]
		if u.Spec.Disabled || !u.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, IchorPrefix+u.Name)
	}
	out = append(out, extra...)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return []string{Placeholder}
	}
	return out
}

// Rules are the ClusterRole's rules for names.
func Rules(names []string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"},
		ResourceNames: names,
	}}
}

// Reconcile writes the rule when it differs from what the users call for.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	resync := r.Resync
	if resync == 0 {
		resync = DefaultResync
	}
	list := &ichorv1alpha1.IchorUserList{}
	if err := r.Client.List(ctx, list, client.InNamespace(r.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing IchorUsers: %w", err)
	}
	want := Rules(Users(list.Items, r.ExtraUsers))
	role := &rbacv1.ClusterRole{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: r.roleName()}, role); err != nil {
		if apierrors.IsNotFound(err) {
			// Nothing to keep: ichor-ui is not installed from Ichor's manifests
			// here (the demo runs it as a local process). Said once per resync,
			// not retried as an error.
			ctrl.LoggerFrom(ctx).Info("the ClusterRole is not installed: no impersonation rights to keep", "clusterRole", r.roleName())

			return reconcile.Result{RequeueAfter: resync}, nil
		}

		return reconcile.Result{}, fmt.Errorf("reading the ClusterRole %s (installed with Ichor's manifests; reinstall them if it was deleted): %w", r.roleName(), err)
	}
	if equalRules(role.Rules, want) {
		return reconcile.Result{RequeueAfter: resync}, nil
	}
	role.Rules = want
	if err := r.Client.Update(ctx, role); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating the ClusterRole %s: %w", r.roleName(), err)
	}
	log.Info("updated the users ichor-ui may impersonate", "clusterRole", r.roleName(), "users", len(want[0].ResourceNames))
	return reconcile.Result{RequeueAfter: resync}, nil
}

func equalRules(a, b []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacv1.PolicyRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) &&
			slices.Equal(x.Verbs, y.Verbs) && slices.Equal(x.ResourceNames, y.ResourceNames) &&
			slices.Equal(x.NonResourceURLs, y.NonResourceURLs)
	})
}

func (r *Reconciler) roleName() string {
	if r.RoleName == "" {
		return DefaultRoleName
	}
	return r.RoleName
}

// SetupWithManager registers the reconciler: every IchorUser event of the
// namespace and one event at start (no user at all still writes the
// placeholder and the extra users) reconcile the one role.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	for _, u := range r.ExtraUsers {
		if err := CheckExtraUser(u); err != nil {
			return err
		}
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	key := reconcile.Request{NamespacedName: types.NamespacedName{Name: r.roleName()}}
	toRole := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetNamespace() != r.Namespace {
			return nil
		}
		return []reconcile.Request{key}
	})
	start := make(chan event.GenericEvent, 1)
	start <- event.GenericEvent{Object: &rbacv1.ClusterRole{}}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&ichorv1alpha1.IchorUser{}, toRole).
		WatchesRawSource(source.Channel(start, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{key}
		}))).
		Complete(r)
}
