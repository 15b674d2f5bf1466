package api

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// Ichor's own upgrade, as the console's Versions card starts it: the same
// TalosOperation of type ichor as `ichor upgrade ichor VERSION`, checked with
// the admission webhook's rules (guard.CheckOperation, which runs
// guard.CheckIchorUpgrade against the IchorInstallation for type ichor) on
// facts read as the signed-in user, then created as that user, whose RBAC
// and the webhook decide again. The controller runs the installer Job.

// ichorOperation is the TalosOperation that upgrades Ichor to version,
// named as `ichor upgrade ichor` names it (ichor-v0-5-0-xxxxx). It is
// recorded in the served cluster, whose lock it holds while the installer runs.
func (s *OperationService) ichorOperation(version, digest string, skipSignature bool) *ichorv1alpha1.TalosOperation {
	up := &ichorv1alpha1.IchorUpgrade{Version: version, InstallerDigest: digest}
	if skipSignature {
		up.InstallerSignature = guard.SignatureSkip
	}
	name := strings.NewReplacer(".", "-", "+", "-").Replace(version)
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace, GenerateName: ichorv1alpha1.OperationIchor + "-" + name + "-"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: s.ClusterName, Type: ichorv1alpha1.OperationIchor, Ichor: up},
	}
}

// ichorManager is spec.deployment.manager as the guard reads it: empty is
// the installer's (only helm hands upgrades to Helm).
func ichorManager(ii *ichorv1alpha1.IchorInstallation) string {
	if ii.Spec.Deployment.Manager == "" {
		return ichorv1alpha1.ManagerIchor
	}
	return ii.Spec.Deployment.Manager
}

// PreviewIchorUpgrade implements OperationService: what the
// IchorInstallation records (read as the signed-in user) and, for a version,
// what refuses the upgrade to it for that user: the shared checks
// (decideOperation, as the webhook makes them), then `create` on
// talosoperations.
func (s *OperationService) PreviewIchorUpgrade(ctx context.Context, req *ichorv1.PreviewIchorUpgradeRequest) (*ichorv1.PreviewIchorUpgradeResponse, error) {
	const what = "planning an upgrade of Ichor"
	version := normalizeVersion(req.GetVersion())
	op := s.ichorOperation(version, "", false)
	facts, err := s.servedOperationFacts(ctx, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out := &ichorv1.PreviewIchorUpgradeResponse{Cluster: s.ClusterName, Version: version}
	if ii := facts.Installation; ii != nil {
		out.Installation, out.Installed, out.Manager = true, ii.Status.InstalledVersion, ichorManager(ii)
	}
	if version == "" {
		return out, nil
	}
	refusals, err := s.previewRefusals(ctx, op, facts, "upgrading Ichor")
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out.Refusals, out.Allowed = refusalsToProto(refusals), len(refusals) == 0
	return out, nil
}

// StartIchorUpgrade implements OperationService: after the typed cluster
// name (as `ichor upgrade ichor` asks for it), `create` on
// talosoperations and the shared checks (decideOperation, on the cluster
// and the IchorInstallation fresh from the API server, as the user), it
// creates the ichor operation as the signed-in user, with the fields `ichor
// upgrade ichor` sets: spec.ichor.version, the pinned installerDigest, and
// installerSignature skip when the signature check is skipped.
func (s *OperationService) StartIchorUpgrade(ctx context.Context, req *ichorv1.StartIchorUpgradeRequest) (*ichorv1.StartIchorUpgradeResponse, error) {
	version := normalizeVersion(req.GetVersion())
	if version == "" {
		return nil, invalid("version is required: the Ichor release to upgrade to, for example v0.5.0 (one minor at a time, never down); nothing was created")
	}
	what := "upgrading Ichor to " + version
	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "created"); err != nil {
		return nil, err
	}
	digest := strings.TrimSpace(req.GetInstallerDigest())
	if rs := guard.CheckInstallerDigest(digest); len(rs) > 0 {
		return nil, refused(codes.InvalidArgument, what, rs)
	}
	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := s.ichorOperation(version, digest, req.GetSkipSignatureCheck())
	facts, err := s.servedOperationFacts(ctx, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if err := s.createDecided(ctx, op, facts, what, nil); err != nil {
		return nil, err
	}
	return &ichorv1.StartIchorUpgradeResponse{Operation: operationToProto(op)}, nil
}
