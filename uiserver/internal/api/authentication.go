package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// GetAuthentication implements the UI API (the console's Authentication
// card; `ichor cluster authentication get`).
func (s *ClusterService) GetAuthentication(ctx context.Context, _ *ichorv1.GetAuthenticationRequest) (*ichorv1.GetAuthenticationResponse, error) {
	const what = "reading the cluster's authentication"
	c, err := s.readCluster(ctx, what)
	if err != nil {
		return nil, err
	}
	return s.authentication(ctx, c, what)
}

func (s *ClusterService) authentication(ctx context.Context, c *ichorv1alpha1.TalosCluster, what string) (*ichorv1.GetAuthenticationResponse, error) {
	out := &ichorv1.GetAuthenticationResponse{
		Authentication: AuthenticationToProto(c.Spec.Authentication),
		CanWrite:       s.Clients.AuthorizeSubresource(ctx, guard.VerbUpdate, guard.ResourceTalosClusters, guard.SubresourceAuthentication) == nil,
	}
	ii := &ichorv1alpha1.IchorInstallation{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); err == nil {
		out.IssuerPublished = ii.Status.Issuer != nil
	}
	machines := &ichorv1alpha1.TalosMachineList{}
	if err := s.Clients.Cache.List(ctx, machines, client.InNamespace(c.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	out.RestartPending = rollout.APIServerRestartPending(c.Name, machines.Items)
	return out, nil
}

// UpdateAuthentication implements the UI API: spec.authentication written
// as the signed-in user (clusterreq.SetAuthentication, as `ichor cluster
// authentication set`).
func (s *ClusterService) UpdateAuthentication(ctx context.Context, req *ichorv1.UpdateAuthenticationRequest) (*ichorv1.UpdateAuthenticationResponse, error) {
	what := "changing the authentication of TalosCluster " + s.ClusterName
	res, err := clusterreq.SetAuthentication(ctx, s.Clients.User, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName},
		AuthenticationFromProto(req.GetAuthentication()))
	var rf *clusterreq.Refused
	if errors.As(err, &rf) {
		code := codes.InvalidArgument
		if rf.Permission {
			code = codes.PermissionDenied
		}
		return nil, refused(code, what, rf.Refusals)
	}
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	cur, err := s.authentication(ctx, res.Cluster, what)
	if err != nil {
		return nil, err
	}
	return &ichorv1.UpdateAuthenticationResponse{Changed: res.Changed, Current: cur}, nil
}

// AuthenticationToProto is spec.authentication in the UI API's terms.
func AuthenticationToProto(a ichorv1alpha1.AuthenticationSpec) *ichorv1.Authentication {
	out := &ichorv1.Authentication{IchorUsers: a.IchorUsers}
	if e := a.External; e != nil {
		out.External = &ichorv1.ExternalOIDC{IssuerUrl: e.IssuerURL, Audiences: e.Audiences, UsernameClaim: e.UsernameClaim,
			GroupsClaim: e.GroupsClaim, CertificateAuthority: e.CertificateAuthority}
	}
	return out
}

// AuthenticationFromProto is the UI API's authentication as spec.authentication.
func AuthenticationFromProto(a *ichorv1.Authentication) ichorv1alpha1.AuthenticationSpec {
	out := ichorv1alpha1.AuthenticationSpec{IchorUsers: a.GetIchorUsers()}
	if e := a.GetExternal(); e != nil && e.GetIssuerUrl() != "" {
		out.External = &ichorv1alpha1.ExternalOIDC{IssuerURL: e.GetIssuerUrl(), Audiences: e.GetAudiences(), UsernameClaim: e.GetUsernameClaim(),
			GroupsClaim: e.GetGroupsClaim(), CertificateAuthority: e.GetCertificateAuthority()}
	}
	return out
}
