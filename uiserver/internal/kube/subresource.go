package kube

import (
	"context"

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
	return c.authorize(ctx, id, &authorizationv1.ResourceAttributes{
		Namespace: c.Namespace, Verb: verb, Group: ichorv1alpha1.GroupVersion.Group, Resource: resource, Subresource: subresource,
	}, resource+"/"+subresource)
}
