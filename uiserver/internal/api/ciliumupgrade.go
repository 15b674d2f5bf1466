package api

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// The Cilium chart upgrade, as the console's Cilium page starts it: the same
// TalosOperation of type cni as `ichor cni upgrade VERSION`, checked with the
// admission webhook's rules (guard.CheckOperation, which runs
// guard.CheckCNIUpgrade for type cni) on facts read as the signed-in user,
// then created as that user, whose RBAC and the webhook decide again.

// cniOperation is the TalosOperation that moves the served cluster's Cilium
// release to the embedded chart version.
func (s *OperationService) cniOperation(version string) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace, GenerateName: s.ClusterName + "-cni-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: s.ClusterName, Type: ichorv1alpha1.OperationCNI,
			CNI: &ichorv1alpha1.CNIUpgrade{Version: version},
		},
	}
}

// createOperationRequirement is `create` on talosoperations, which every
// operation needs; guard.OperationRequirements lists only the verbs beyond it.
// action names what it is for ("upgrading Cilium").
func (s *OperationService) createOperationRequirement(action string) guard.Requirement {
	return guard.Requirement{
		Permission: guard.Permission{Verb: "create", Resource: guard.ResourceTalosOperations, Namespace: s.Clients.Namespace},
		Field:      "spec.type", Action: action,
	}
}

// previewRefusals is what refuses op for the signed-in user in a preview: the
// shared checks (decideOperation), then `create` on talosoperations for action.
func (s *OperationService) previewRefusals(ctx context.Context, op *ichorv1alpha1.TalosOperation, facts guard.OperationFacts, action string) ([]guard.Refusal, error) {
	d, err := s.decideOperation(ctx, op, facts)
	if err != nil {
		return nil, err
	}
	refusals := d.refusals
	create := s.createOperationRequirement(action)
	ok, err := s.holds(ctx, create.Permission)
	if err != nil {
		return nil, err
	}
	if !ok {
		user := ""
		if id, found := identity.From(ctx); found {
			user = id.Username
		}
		refusals = append(refusals, create.Refusal(user))
	}
	return refusals, nil
}

// servedOperationFacts reads the facts of the checks for op as the signed-in
// user (guard.LoadOperationFacts: the cluster, NotFound when it is gone; for
// type cni its unfinished cni operations, for type ichor the IchorInstallation).
func (s *OperationService) servedOperationFacts(ctx context.Context, op *ichorv1alpha1.TalosOperation) (guard.OperationFacts, error) {
	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return facts, err
	}
	if facts.Cluster == nil {
		return facts, status.Errorf(codes.NotFound, "TalosCluster %s does not exist in namespace %s", s.ClusterName, s.Clients.Namespace)
	}
	return facts, nil
}

// unmanagedCNI refuses a cluster whose CNI Ichor does not manage: there is
// no Cilium release of Ichor's to upgrade, whatever the version.
func unmanagedCNI(c *ichorv1alpha1.TalosCluster, what string) error {
	if c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetUnmanaged {
		return nil
	}
	return refused(codes.FailedPrecondition, what, guard.CheckCNIUpgrade(c, guard.CNIFacts{}, ""))
}

// untestedCilium is the warning a Cilium target gets when it is not tested
// on the cluster's Kubernetes version (newer than its tested range), or "".
// An older Kubernetes is a refusal (guard.CheckCNIUpgrade), not a warning.
func untestedCilium(c *ichorv1alpha1.TalosCluster, target string) string {
	if untested, err := release.CheckCiliumPair(target, c.Spec.KubernetesVersion); err != nil || !untested {
		return ""
	}
	return fmt.Sprintf("Cilium %s is not tested on Kubernetes %s (newer than the versions its documentation lists); it relies on Kubernetes' backward compatibility",
		target, kubeupgrade.Describe(c.Spec.KubernetesVersion))
}

// PreviewCiliumUpgrade implements OperationService: the running Cilium, the
// embedded charts, the target (the version asked, else guard.CNIUpgradeTarget)
// and, for a target, what refuses it for the signed-in user (the shared
// checks, then `create` on talosoperations) and the warnings.
func (s *OperationService) PreviewCiliumUpgrade(ctx context.Context, req *ichorv1.PreviewCiliumUpgradeRequest) (*ichorv1.PreviewCiliumUpgradeResponse, error) {
	what := "upgrading the Cilium of cluster " + s.ClusterName
	asked := guard.CNIVersion(normalizeVersion(req.GetVersion()))
	op := s.cniOperation(asked)
	facts, err := s.servedOperationFacts(ctx, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	c := facts.Cluster
	if err := unmanagedCNI(c, what); err != nil {
		return nil, err
	}
	running := guard.CNIVersion(c.Status.CNI.CiliumVersion)
	target := asked
	if target == "" {
		target = guard.CNIUpgradeTarget(running)
	}
	out := &ichorv1.PreviewCiliumUpgradeResponse{
		Cluster: s.ClusterName, Running: running, Target: target, Embedded: release.CiliumVersions(),
		Unfinished: facts.UnfinishedCNI,
	}
	if h := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition); h != nil {
		out.Handover = conditions([]metav1.Condition{*h})[0]
	}
	if target == "" {
		return out, nil
	}
	op.Spec.CNI.Version = target
	refusals, err := s.previewRefusals(ctx, op, facts, "upgrading Cilium")
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out.Refusals, out.Allowed = refusalsToProto(refusals), len(refusals) == 0
	if w := untestedCilium(c, target); w != "" {
		out.Warnings = append(out.Warnings, w)
	}
	out.Warnings = append(out.Warnings, guard.OperationWarnings(op, facts, time.Now())...)
	return out, nil
}

// StartCiliumUpgrade implements OperationService: after `create` on
// talosoperations and the shared checks (decideOperation, on the cluster and
// its operations fresh from the API server, as the user), it creates the cni
// operation as the signed-in user. An overridable refusal (a Kubernetes ↔
// Cilium pair the table refuses) goes through for a holder of the override
// verb, as at admission, where the webhook records the override.
func (s *OperationService) StartCiliumUpgrade(ctx context.Context, req *ichorv1.StartCiliumUpgradeRequest) (*ichorv1.StartCiliumUpgradeResponse, error) {
	version := guard.CNIVersion(normalizeVersion(req.GetVersion()))
	if version == "" {
		return nil, invalid("version is required: one of the Cilium charts this Ichor embeds (%s), at most one minor above the running one; nothing was created",
			strings.Join(release.CiliumVersions(), ", "))
	}
	what := "upgrading the Cilium of cluster " + s.ClusterName + " to " + version
	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := s.cniOperation(version)
	facts, err := s.servedOperationFacts(ctx, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if err := unmanagedCNI(facts.Cluster, what); err != nil {
		return nil, err
	}
	if err := s.createDecided(ctx, op, facts, what, nil); err != nil {
		return nil, err
	}
	return &ichorv1.StartCiliumUpgradeResponse{Operation: operationToProto(op)}, nil
}
