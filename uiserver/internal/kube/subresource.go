package kube

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// AuthorizeSubresource is Authorize for a (possibly virtual) subresource,
// for example `update` on talosconfigpatches/privileged: the verbs that the
// admission webhook checks and that the console shows controls for.
func (c *Clients) AuthorizeSubresource(ctx context.Context, verb, resource, subresource string) error {
	id, ok := identity.From(ctx)
	if !ok {
		return ErrNoIdentity
	}
	shown := resource + "/" + subresource
	key := reviewKey(id, verb, shown, c.Namespace)
	if e, ok := c.reviews.get(key); ok {
		if e.allowed {
			return nil
		}
		return &Forbidden{Username: id.Username, Verb: verb, Resource: shown, Namespace: c.Namespace, Reason: e.reason}
	}
	r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: c.Namespace, Verb: verb, Group: ichorv1alpha1.GroupVersion.Group, Resource: resource, Subresource: subresource,
		},
	}}
	if err := c.User.Create(ctx, r); err != nil {
		return fmt.Errorf("checking whether %s may %s %s: %w", id.Username, verb, shown, err)
	}
	c.reviews.put(key, reviewEntry{allowed: r.Status.Allowed, reason: r.Status.Reason})
	if !r.Status.Allowed {
		return &Forbidden{Username: id.Username, Verb: verb, Resource: shown, Namespace: c.Namespace, Reason: r.Status.Reason}
	}
	return nil
}
