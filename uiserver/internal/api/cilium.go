package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/valuesedit"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// readCluster reads the served cluster from the cache, after checking that
// the user may read it.
func (s *ClusterService) readCluster(ctx context.Context, what string) (*ichorv1alpha1.TalosCluster, error) {
	if err := s.Clients.Authorize(ctx, "get", resClusters); err != nil {
		return nil, apiError(ctx, err, what)
	}
	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, apiError(ctx, err, what)
	}
	return c, nil
}

// GetCiliumValues implements ClusterService.
func (s *ClusterService) GetCiliumValues(ctx context.Context, _ *ichorv1.GetCiliumValuesRequest) (*ichorv1.GetCiliumValuesResponse, error) {
	const what = "reading the Cilium values"
	c, err := s.readCluster(ctx, what)
	if err != nil {
		return nil, err
	}
	return s.ciliumValues(ctx, c, what)
}

func (s *ClusterService) ciliumValues(ctx context.Context, c *ichorv1alpha1.TalosCluster, what string) (*ichorv1.GetCiliumValuesResponse, error) {
	v, err := valuesedit.Show(c, valuesedit.Nodes(c))
	if errors.Is(err, valuesedit.ErrUnmanaged) {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	out := &ichorv1.GetCiliumValuesResponse{
		ValuesYaml: v.UserYAML, EffectiveYaml: v.EffectiveYAML, ChartVersion: v.Version,
		AppliedHash: v.AppliedHash, Applied: v.Applied,
		CanWrite: s.Clients.AuthorizeSubresource(ctx, guard.VerbUpdate, guard.ResourceTalosClusters, guard.SubresourceCiliumValues) == nil,
	}
	if h := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition); h != nil {
		out.Handover = conditions([]metav1.Condition{*h})[0]
	}
	return out, nil
}

// PreviewCiliumValues implements ClusterService: a refused layer is an
// answer (its refusals), not an error, so the console shows it by the editor.
func (s *ClusterService) PreviewCiliumValues(ctx context.Context, req *ichorv1.PreviewCiliumValuesRequest) (*ichorv1.PreviewCiliumValuesResponse, error) {
	const what = "previewing the Cilium values"
	c, err := s.readCluster(ctx, what)
	if err != nil {
		return nil, err
	}
	p, err := valuesedit.Compute(ctx, c, []byte(req.GetValuesYaml()), valuesedit.Nodes(c))
	var rf *valuesedit.Refused
	switch {
	case errors.As(err, &rf):
		out := &ichorv1.PreviewCiliumValuesResponse{ChartVersion: valuesedit.Version(c)}
		for _, r := range rf.Refusals {
			out.Refusals = append(out.Refusals, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
		}
		return out, nil
	case errors.Is(err, valuesedit.ErrUnmanaged):
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	out := &ichorv1.PreviewCiliumValuesResponse{ChartVersion: p.Version, Diff: p.Diff, EffectiveYaml: p.EffectiveYAML}
	for _, o := range p.Objects {
		out.Objects = append(out.Objects, &ichorv1.CiliumObjectChange{Object: o.Object, Change: o.Change, Diff: o.Diff})
	}
	return out, nil
}

// UpdateCiliumValues implements ClusterService: the shared write
// (clusterreq.SetCiliumValues) as the signed-in user.
func (s *ClusterService) UpdateCiliumValues(ctx context.Context, req *ichorv1.UpdateCiliumValuesRequest) (*ichorv1.UpdateCiliumValuesResponse, error) {
	what := "changing the Cilium values of TalosCluster " + s.ClusterName
	data := []byte(req.GetValuesYaml())
	// The layer first: a wrong one is the request's fault, whoever sends it.
	var vr *valuesedit.Refused
	if _, err := valuesedit.Parse(data); errors.As(err, &vr) {
		return nil, refused(codes.InvalidArgument, what, vr.Refusals)
	} else if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	res, err := clusterreq.SetCiliumValues(ctx, s.Clients.User, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, data)
	var rf *clusterreq.Refused
	if errors.As(err, &rf) {
		code := codes.PermissionDenied
		if c := s.cachedCluster(ctx); c != nil && c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
			code = codes.FailedPrecondition
		}
		return nil, refused(code, what, rf.Refusals)
	}
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	values, err := s.ciliumValues(ctx, res.Cluster, what)
	if err != nil {
		return nil, err
	}
	return &ichorv1.UpdateCiliumValuesResponse{Changed: res.Changed, Values: values}, nil
}

func (s *ClusterService) cachedCluster(ctx context.Context) *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil
	}
	return c
}
