// Package kube holds ichor-ui's two ways to the API server: a read cache
// under the backend's own identity (list and watch of Ichor's objects, no
// Secret) guarded by an access review made as the signed-in user, and a
// client that acts as the signed-in user through Kubernetes impersonation for
// every write. A request without a signed-in user is never sent: the client
// fails closed rather than fall back to the backend's identity.
package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// ErrNoIdentity is returned for a request made without a signed-in user.
var ErrNoIdentity = errors.New("no signed-in user: ichor-ui sends no request to the API server under its own identity on a user's behalf")

// impersonator sets the impersonation headers of the identity the request's
// context carries (client-go's impersonating round tripper, the same as
// rest.ImpersonationConfig), after checking the policy.
type impersonator struct {
	policy identity.Policy
	next   http.RoundTripper
}

func (t *impersonator) RoundTrip(req *http.Request) (*http.Response, error) {
	id, ok := identity.From(req.Context())
	if !ok {
		return nil, ErrNoIdentity
	}
	if err := t.policy.Check(id); err != nil {
		return nil, err
	}
	imp := rest.ImpersonationConfig{UserName: id.Username, Groups: id.Groups}
	return transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{
		UserName: imp.UserName,
		Groups:   imp.Groups,
	}, t.next).RoundTrip(req)
}

// UserConfig returns a copy of cfg whose requests impersonate the identity of
// their context. cfg must not impersonate already.
func UserConfig(cfg *rest.Config, policy identity.Policy) (*rest.Config, error) {
	if cfg.Impersonate.UserName != "" || len(cfg.Impersonate.Groups) > 0 {
		return nil, errors.New("the backend's own configuration impersonates already; give ichor-ui its ServiceAccount's credentials")
	}
	out := rest.CopyConfig(cfg)
	prev := out.WrapTransport
	out.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return &impersonator{policy: policy, next: rt}
	}
	return out, nil
}

// Options configure New.
type Options struct {
	// Config is the backend's own identity (its ServiceAccount).
	Config *rest.Config
	// Scheme holds Ichor's types and client-go's.
	Scheme *runtime.Scheme
	// Namespace is the namespace of the cluster ichor-ui serves.
	Namespace string
	// Policy says whom the backend may impersonate.
	Policy identity.Policy
	// ReviewTTL is how long an allowed access review answer is reused (a
	// refusal is reused for a fifth of it); zero means 5 s. A role revoked
	// takes effect within ReviewTTL, a role granted within ReviewTTL/5.
	ReviewTTL time.Duration
}

// unlimitUsers lifts client-go's default client-side limit (5/s, a burst of
// 10) from the impersonating client when cfg sets none, as ctrl.GetConfig
// does for ichor-ui in a cluster (QPS -1). The one client acts for every
// user: under the default, 200 users signing in together queued their first
// access reviews for seconds behind each other ("client-side throttling" in
// the load test, whose envtest configuration sets no limit). The API server's
// priority and fairness sees the impersonated user (impersonation is
// resolved before it classifies a request), so each user gets a fair share
// there instead. A limit the configuration sets is kept.
func unlimitUsers(cfg *rest.Config) {
	if cfg.QPS == 0 && cfg.Burst == 0 && cfg.RateLimiter == nil {
		cfg.QPS = -1
	}
}

// Clients are the backend's reads and the user's writes.
type Clients struct {
	// Cache reads Ichor's objects of the namespace under the backend's identity.
	Cache cache.Cache
	// User acts as the identity of the request's context.
	User client.WithWatch
	// Namespace is the namespace of the cluster.
	Namespace string

	reviews *reviewCache
}

// New builds the clients; start Cache before use.
func New(o Options) (*Clients, error) {
	httpClient, err := rest.HTTPClientFor(o.Config)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(o.Config, httpClient)
	if err != nil {
		return nil, err
	}
	c, err := cache.New(o.Config, cache.Options{
		HTTPClient:        httpClient,
		Scheme:            o.Scheme,
		Mapper:            mapper,
		DefaultNamespaces: map[string]cache.Config{o.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			// The UI needs no managed fields; dropping them halves the cache.
			&ichorv1alpha1.TalosMachine{}:   {Transform: cache.TransformStripManagedFields()},
			&ichorv1alpha1.TalosCluster{}:   {Transform: cache.TransformStripManagedFields()},
			&ichorv1alpha1.TalosOperation{}: {Transform: cache.TransformStripManagedFields()},
			&ichorv1alpha1.IchorUISession{}: {Transform: cache.TransformStripManagedFields()},
		},
	})
	if err != nil {
		return nil, err
	}
	ucfg, err := UserConfig(o.Config, o.Policy)
	if err != nil {
		return nil, err
	}
	unlimitUsers(ucfg)
	uhttp, err := rest.HTTPClientFor(ucfg)
	if err != nil {
		return nil, err
	}
	user, err := client.NewWithWatch(ucfg, client.Options{HTTPClient: uhttp, Scheme: o.Scheme, Mapper: mapper})
	if err != nil {
		return nil, err
	}
	ttl := o.ReviewTTL
	if ttl == 0 {
		ttl = 5 * time.Second
	}
	return &Clients{Cache: c, User: user, Namespace: o.Namespace, reviews: newReviewCache(ttl)}, nil
}

// Forbidden is a read the signed-in user may not make.
type Forbidden struct {
	// Username is who asked.
	Username string
	// Verb and Resource are what they asked for.
	Verb, Resource string
	// Namespace is where.
	Namespace string
	// Reason is the authorizer's reason, if any.
	Reason string
}

func (f *Forbidden) Error() string {
	msg := fmt.Sprintf("user %q may not %s %s in namespace %q", f.Username, f.Verb, f.Resource, f.Namespace)
	if f.Reason != "" {
		msg += ": " + f.Reason
	}
	return msg + "; ask an administrator for a role that grants it (ichor-viewer reads everything in Ichor's group)"
}

// Authorize checks, as the signed-in user, that they may verb resource in the
// namespace (a SelfSubjectAccessReview sent with impersonation, so the
// backend needs no right to review others). Answers are reused for ReviewTTL.
func (c *Clients) Authorize(ctx context.Context, verb, resource string) error {
	id, ok := identity.From(ctx)
	if !ok {
		return ErrNoIdentity
	}
	return c.authorize(ctx, id, &authorizationv1.ResourceAttributes{
		Namespace: c.Namespace, Verb: verb, Group: ichorv1alpha1.GroupVersion.Group, Resource: resource,
	}, resource)
}

// authorize answers whether id may do attrs, from the review cache or by a
// SelfSubjectAccessReview sent as id; shown names the resource in a refusal.
func (c *Clients) authorize(ctx context.Context, id identity.Identity, attrs *authorizationv1.ResourceAttributes, shown string) error {
	key := reviewKey(id, attrs.Verb, shown, attrs.Namespace)
	e, err := c.reviews.decide(ctx, key, func(ctx context.Context) (reviewEntry, error) {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
		if err := c.User.Create(ctx, r); err != nil {
			return reviewEntry{}, err
		}
		return reviewEntry{allowed: r.Status.Allowed, reason: r.Status.Reason}, nil
	})
	if err != nil {
		return fmt.Errorf("checking whether %s may %s %s: %w", id.Username, attrs.Verb, shown, err)
	}
	if !e.allowed {
		return &Forbidden{Username: id.Username, Verb: attrs.Verb, Resource: shown, Namespace: attrs.Namespace, Reason: e.reason}
	}
	return nil
}

// LastSyncResourceVersion returns the resourceVersion the cache's informer
// for obj last synced at: a watch from it sees every later change. Empty when
// the informer does not tell.
func (c *Clients) LastSyncResourceVersion(ctx context.Context, obj client.Object) string {
	inf, err := c.Cache.GetInformer(ctx, obj)
	if err != nil {
		return ""
	}
	if v, ok := inf.(interface{ LastSyncResourceVersion() string }); ok {
		return v.LastSyncResourceVersion()
	}
	return ""
}
