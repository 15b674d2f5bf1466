package api

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// normalizeVersion accepts 1.14.2 for v1.14.2, as people type it.
func normalizeVersion(v string) string {
	v = strings.TrimSpace(v)
	if v != "" && !strings.HasPrefix(v, "v") {
		v = "v" + v
	}

	return v
}

// PreviewTalosUpgrade implements OperationService: the served cluster's
// candidates (status.talosUpgrade, which the controller reads from the
// release source) and, for a version, the checks of `ichor upgrade talos`
// (guard.CheckTalosUpgrade), so that a typed version not in the list is
// validated by the server the same way.
func (s *OperationService) PreviewTalosUpgrade(ctx context.Context, req *ichorv1.PreviewTalosUpgradeRequest) (*ichorv1.PreviewTalosUpgradeResponse, error) {
	const what = "planning a Talos upgrade"

	for _, res := range []string{resClusters, resOperations} {
		if err := s.Clients.Authorize(ctx, "list", res); err != nil {
			return nil, apiError(ctx, err, what)
		}
	}

	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, apiError(ctx, err, what)
	}

	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.Cache.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}

	u := c.Status.TalosUpgrade
	out := &ichorv1.PreviewTalosUpgradeResponse{
		Cluster: s.ClusterName, Current: c.Spec.TalosVersion, Source: u.Source, SourceMessage: u.Message,
		CheckedAt: ts(u.CheckedAt), Version: normalizeVersion(req.GetVersion()),
	}

	for _, cand := range u.Candidates {
		out.Candidates = append(out.Candidates, &ichorv1.VersionCandidate{Version: cand.Version, Group: cand.Group, Default: cand.Default})
	}

	for i := range ops.Items {
		op := &ops.Items[i]
		if op.Spec.ClusterName == s.ClusterName && op.Spec.Type == ichorv1alpha1.OperationTalos &&
			op.Status.Phase != ichorv1alpha1.OperationSucceeded && op.Status.Phase != ichorv1alpha1.OperationFailed {
			out.Unfinished = operationToProto(op)
		}
	}

	if out.Version != "" {
		for _, r := range guard.CheckTalosUpgrade(c, ops.Items, out.Version) {
			out.Refusals = append(out.Refusals, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
		}
		// The small-cluster notices, read as the user: the single node's
		// downtime (the typed name accepts it) and the backup warnings.
		downtime, warnings, err := guard.TalosUpgradeNotices(ctx, s.Clients.User, c, out.Version, time.Now())
		if err != nil {
			return nil, apiError(ctx, err, what)
		}
		out.Downtime, out.Warnings = downtime, warnings
	}

	return out, nil
}

// StartTalosUpgrade implements OperationService: after the typed cluster name
// and guard.CheckTalosUpgrade (on the cluster and operations fresh from the
// API server, as the user), it sets spec.talosVersion as the signed-in user,
// so the API server's RBAC and the admission webhook decide as for the CLI.
// The controller starts the talos operation.
func (s *OperationService) StartTalosUpgrade(ctx context.Context, req *ichorv1.StartTalosUpgradeRequest) (*ichorv1.StartTalosUpgradeResponse, error) {
	version := normalizeVersion(req.GetVersion())
	what := "upgrading cluster " + s.ClusterName + " to Talos " + version

	if version == "" {
		return nil, invalid("version is required: choose one of the candidates or type one, such as v1.14.2; nothing was changed")
	}

	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "changed"); err != nil {
		return nil, err
	}

	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.User.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}

	var from string

	c := &ichorv1alpha1.TalosCluster{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
			return err
		}

		if rs := guard.CheckTalosUpgrade(c, ops.Items, version); len(rs) > 0 {
			return refused(codes.FailedPrecondition, what, rs)
		}

		// The typed cluster name is the consent to the downtime of a single
		// node that the dialog showed; the webhook checks it on this write.
		downtime, _, err := guard.TalosUpgradeNotices(ctx, s.Clients.User, c, version, time.Now())
		if err != nil {
			return err
		}

		from = c.Spec.TalosVersion
		c.Spec.TalosVersion = version
		if downtime != "" {
			guard.AcceptDowntime(c, version)
		}

		return s.Clients.User.Update(ctx, c)
	})
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.StartTalosUpgradeResponse{From: from, To: version}, nil
}

// PreviewKubernetesUpgrade implements OperationService: the served cluster's
// candidates (status.kubernetesUpgrade, which the controller reads from the
// kubelet image's tags) and, for a version, the checks of `ichor upgrade
// kubernetes` (guard.CheckKubernetesUpgrade), with the warning about an
// untested Cilium.
func (s *OperationService) PreviewKubernetesUpgrade(ctx context.Context, req *ichorv1.PreviewKubernetesUpgradeRequest) (*ichorv1.PreviewKubernetesUpgradeResponse, error) {
	const what = "planning a Kubernetes upgrade"

	for _, res := range []string{resClusters, resOperations} {
		if err := s.Clients.Authorize(ctx, "list", res); err != nil {
			return nil, apiError(ctx, err, what)
		}
	}

	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, apiError(ctx, err, what)
	}

	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.Cache.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}

	u := c.Status.KubernetesUpgrade
	out := &ichorv1.PreviewKubernetesUpgradeResponse{
		Cluster: s.ClusterName, Current: kubeupgrade.Describe(kubeupgrade.Running(c)), Source: u.Source, SourceMessage: u.Message,
		CheckedAt: ts(u.CheckedAt), Version: normalizeVersion(req.GetVersion()),
	}

	for _, cand := range u.Candidates {
		out.Candidates = append(out.Candidates, &ichorv1.VersionCandidate{Version: cand.Version, Group: cand.Group, Default: cand.Default})
	}

	if op := kubeupgrade.Unfinished(c, ops.Items); op != nil {
		out.Unfinished = operationToProto(op)
	}

	if out.Version != "" {
		for _, r := range guard.CheckKubernetesUpgrade(c, ops.Items, out.Version) {
			out.Refusals = append(out.Refusals, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
		}

		if w := guard.UntestedCilium(c, out.Version); w != "" {
			out.Warnings = append(out.Warnings, w)
		}
	}

	return out, nil
}

// StartKubernetesUpgrade implements OperationService: after the typed
// cluster name and guard.CheckKubernetesUpgrade (on the cluster and
// operations fresh from the API server, as the user), it sets
// spec.kubernetesVersion as the signed-in user, so the API server's RBAC and
// the admission webhook decide as for the CLI. The controller starts the
// kubernetes operation.
func (s *OperationService) StartKubernetesUpgrade(ctx context.Context, req *ichorv1.StartKubernetesUpgradeRequest) (*ichorv1.StartKubernetesUpgradeResponse, error) {
	version := normalizeVersion(req.GetVersion())
	what := "upgrading cluster " + s.ClusterName + " to Kubernetes " + version

	if version == "" {
		return nil, invalid("version is required: choose one of the candidates or type one, such as v1.37.2; nothing was changed")
	}

	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "changed"); err != nil {
		return nil, err
	}

	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.User.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}

	var from string

	c := &ichorv1alpha1.TalosCluster{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
			return err
		}

		if rs := guard.CheckKubernetesUpgrade(c, ops.Items, version); len(rs) > 0 {
			return refused(codes.FailedPrecondition, what, rs)
		}

		from = kubeupgrade.Describe(kubeupgrade.Running(c))
		c.Spec.KubernetesVersion = kubeupgrade.Normalize(version)

		return s.Clients.User.Update(ctx, c)
	})
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.StartKubernetesUpgradeResponse{From: from, To: version}, nil
}
