package api

import (
	"context"
	"errors"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// The node operations (reboot, shutdown, reset of one machine) and the
// cluster shutdown, as the console starts them: the same TalosOperations as
// `ichor node ACTION` and `ichor cluster shutdown` (contracts/pkg/nodeop),
// checked with the same shared rules as the admission webhook
// (guard.CheckOperation, guard.OperationRequirements) before they are
// created as the signed-in user, whose RBAC and the webhook decide again.

// decision is what the shared checks say about an operation for the
// signed-in user: hard refusals, overridable ones the user may not override,
// and the verbs the user lacks.
type decision struct {
	refusals []guard.Refusal
	// code is the status a start is refused with.
	code codes.Code
}

// decideOperation runs the shared checks on op with facts, as the webhook
// decides: an overridable refusal goes through when the user holds the
// override verb on the cluster (the webhook records that override); then
// every permission the operation needs (guard.OperationRequirements) is
// asked of the API server as the user. The backend asks for the verb on the
// namespace; the webhook asks for it on the object, and decides again.
func (s *OperationService) decideOperation(ctx context.Context, op *ichorv1alpha1.TalosOperation, facts guard.OperationFacts) (decision, error) {
	var hard, overridable []guard.Refusal
	for _, r := range guard.CheckOperation(op, facts) {
		if r.Overridable {
			overridable = append(overridable, r)
		} else {
			hard = append(hard, r)
		}
	}
	if len(hard) > 0 {
		return decision{refusals: append(hard, overridable...), code: codes.FailedPrecondition}, nil
	}
	if len(overridable) > 0 {
		ok, err := s.holds(ctx, guard.OverrideOn(op.Namespace, op.Spec.ClusterName))
		if err != nil {
			return decision{}, err
		}
		if !ok {
			return decision{refusals: overridable, code: codes.FailedPrecondition}, nil
		}
	}
	user := ""
	if id, ok := identity.From(ctx); ok {
		user = id.Username
	}
	var denied []guard.Refusal
	for _, req := range guard.OperationRequirements(op) {
		ok, err := s.holds(ctx, req.Permission)
		if err != nil {
			return decision{}, err
		}
		if !ok {
			denied = append(denied, req.Refusal(user))
		}
	}
	if len(denied) > 0 {
		return decision{refusals: denied, code: codes.PermissionDenied}, nil
	}
	return decision{}, nil
}

// createDecided creates op as the signed-in user once the shared checks
// (decideOperation) refuse nothing; ready, when not nil, runs between the
// decision and the create (a consent the decision asks for). Its errors are
// the API's answers, naming what was asked.
func (s *OperationService) createDecided(ctx context.Context, op *ichorv1alpha1.TalosOperation, facts guard.OperationFacts, what string, ready func() error) error {
	d, err := s.decideOperation(ctx, op, facts)
	if err != nil {
		return apiError(ctx, err, what)
	}
	if len(d.refusals) > 0 {
		return refused(d.code, what, d.refusals)
	}
	if ready != nil {
		if err := ready(); err != nil {
			return err
		}
	}
	if err := s.Clients.User.Create(ctx, op); err != nil {
		return apiError(ctx, err, what)
	}
	return nil
}

// holds asks the API server whether the signed-in user holds p in the
// served namespace; false (no error) when the answer is no.
func (s *OperationService) holds(ctx context.Context, p guard.Permission) (bool, error) {
	var err error
	if p.Subresource != "" {
		err = s.Clients.AuthorizeSubresource(ctx, p.Verb, p.Resource, p.Subresource)
	} else {
		err = s.Clients.Authorize(ctx, p.Verb, p.Resource)
	}
	var forbidden *kube.Forbidden
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &forbidden):
		return false, nil
	default:
		return false, err
	}
}

func refusalsToProto(rs []guard.Refusal) []*ichorv1.Refusal {
	out := make([]*ichorv1.Refusal, 0, len(rs))
	for _, r := range rs {
		out = append(out, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
	}
	return out
}

// nodeRequest checks a node action as asked, and returns the wipe mode a
// reset writes ("" for the default and the other actions).
func nodeRequest(machine, action, wipeMode string) (string, error) {
	if machine == "" {
		return "", invalid("machine is required: the TalosMachine's name; nothing was created")
	}
	if msg := nodeop.CheckAction(action, wipeMode, "action", "wipe_mode"); msg != "" {
		return "", invalid("%s; nothing was created", msg)
	}
	if wipeMode == nodeop.WipeStateEphemeral {
		wipeMode = ""
	}
	return wipeMode, nil
}

// nodeMachine reads a machine of the served cluster as the signed-in user.
func (s *OperationService) nodeMachine(ctx context.Context, name string) (*ichorv1alpha1.TalosMachine, error) {
	m := &ichorv1alpha1.TalosMachine{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, m); err != nil {
		return nil, err
	}
	if m.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "machine %s belongs to cluster %q, not %q", name, m.Spec.ClusterName, s.ClusterName)
	}
	return m, nil
}

// PreviewNodeOperation implements OperationService: the steps of the action
// (nodeop.NodeSteps) and what refuses it now, read as the signed-in user.
func (s *OperationService) PreviewNodeOperation(ctx context.Context, req *ichorv1.PreviewNodeOperationRequest) (*ichorv1.PreviewNodeOperationResponse, error) {
	name, action := req.GetMachine(), req.GetAction()
	wipeMode, err := nodeRequest(name, action, req.GetWipeMode())
	if err != nil {
		return nil, err
	}
	what := "previewing the " + action + " of machine " + name
	m, err := s.nodeMachine(ctx, name)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := nodeop.Node(m, action, wipeMode)
	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	d, err := s.decideOperation(ctx, op, facts)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	downtime := guard.OperationDowntime(op, facts.Approved)
	return &ichorv1.PreviewNodeOperationResponse{
		Machine: name, Action: action, WipeMode: wipeMode, Steps: nodeop.NodeSteps(m, action, wipeMode),
		Refusals: refusalsToProto(d.refusals), Allowed: len(d.refusals) == 0, ConfirmName: nodeop.Destructive(action) || downtime != "",
		Downtime: downtime, Warnings: guard.OperationWarnings(op, facts, time.Now()),
	}, nil
}

// StartNodeOperation implements OperationService: after the typed machine
// name (a shutdown or a reset) and the shared checks (decideOperation, on
// the machine and the operations fresh from the API server, as the user),
// it creates the node operation as the signed-in user.
func (s *OperationService) StartNodeOperation(ctx context.Context, req *ichorv1.StartNodeOperationRequest) (*ichorv1.StartNodeOperationResponse, error) {
	name, action := req.GetMachine(), req.GetAction()
	wipeMode, err := nodeRequest(name, action, req.GetWipeMode())
	if err != nil {
		return nil, err
	}
	what := action + " of machine " + name
	confirmed := func() error {
		if got := strings.TrimSpace(req.GetConfirmMachineName()); got != name {
			if got == "" {
				return invalid("%s: confirm_machine_name is required: type the machine's name, %q, to confirm; nothing was created", what, name)
			}
			return invalid("%s: the confirmation %q is not the machine's name; type %q to confirm; nothing was created", what, got, name)
		}
		return nil
	}
	if nodeop.Destructive(action) {
		if err := confirmed(); err != nil {
			return nil, err
		}
	}
	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	m, err := s.nodeMachine(ctx, name)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := nodeop.Node(m, action, wipeMode)
	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	// The only node of the cluster: the typed name is the consent to the
	// downtime the dialog showed, recorded on the write the webhook checks.
	consent := func() error {
		if downtime := guard.OperationDowntime(op, facts.Approved); downtime != "" {
			if err := confirmed(); err != nil {
				return status.Errorf(codes.InvalidArgument, "%s (%s)", err.Error(), downtime)
			}
			guard.AcceptDowntime(op, "true")
		}
		return nil
	}
	if err := s.createDecided(ctx, op, facts, what, consent); err != nil {
		return nil, err
	}
	return &ichorv1.StartNodeOperationResponse{Operation: operationToProto(op)}, nil
}

// PreviewClusterShutdown implements OperationService: the shutdown's steps
// (nodeop.ShutdownSteps), the approved machines it stops, the cluster's
// unfinished shutdown, and what refuses one now.
func (s *OperationService) PreviewClusterShutdown(ctx context.Context, _ *ichorv1.PreviewClusterShutdownRequest) (*ichorv1.PreviewClusterShutdownResponse, error) {
	const what = "previewing the shutdown of the cluster"
	op := nodeop.Shutdown(s.Clients.Namespace, s.ClusterName)
	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	n, err := guard.CountApproved(ctx, s.Clients.User, s.Clients.Namespace, s.ClusterName, "")
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	d, err := s.decideOperation(ctx, op, facts)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out := &ichorv1.PreviewClusterShutdownResponse{
		Cluster: s.ClusterName, Steps: nodeop.ShutdownSteps(),
		ControlPlanes: int32(min(n.ControlPlanes, math.MaxInt32)), Workers: int32(min(n.Workers, math.MaxInt32)), //nolint:gosec // bounded
		Refusals: refusalsToProto(d.refusals), Allowed: len(d.refusals) == 0,
	}
	if u := facts.UnfinishedShutdown; u != nil {
		out.Unfinished = operationToProto(u)
	}
	return out, nil
}

// StartClusterShutdown implements OperationService: after the typed cluster
// name and the shared checks (on the cluster and its operations fresh from
// the API server, as the user), it creates the shutdown as the signed-in
// user.
func (s *OperationService) StartClusterShutdown(ctx context.Context, req *ichorv1.StartClusterShutdownRequest) (*ichorv1.StartClusterShutdownResponse, error) {
	what := "shutting down cluster " + s.ClusterName
	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "created"); err != nil {
		return nil, err
	}
	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := nodeop.Shutdown(s.Clients.Namespace, s.ClusterName)
	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if err := s.createDecided(ctx, op, facts, what, nil); err != nil {
		return nil, err
	}
	return &ichorv1.StartClusterShutdownResponse{Operation: operationToProto(op)}, nil
}
