package api

import (
	"context"
	"math"
	"path"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

const resOperations = "talosoperations"

// OperationService implements the UI API's OperationService: the served
// cluster's operations, pausing and resuming them, and configuration
// rollouts.
type OperationService struct {
	ichorv1.UnimplementedOperationServiceServer
	Deps
}

// ListOperations implements OperationService: the served cluster's
// operations from the cache, newest first.
func (s *OperationService) ListOperations(ctx context.Context, _ *ichorv1.ListOperationsRequest) (*ichorv1.ListOperationsResponse, error) {
	if err := s.Clients.Authorize(ctx, "list", resOperations); err != nil {
		return nil, apiError(ctx, err, "listing operations")
	}
	list := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, apiError(ctx, err, "listing operations")
	}
	ops := make([]*ichorv1alpha1.TalosOperation, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.ClusterName == s.ClusterName {
			ops = append(ops, &list.Items[i])
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return newerOperation(ops[i], ops[j]) })
	out := &ichorv1.ListOperationsResponse{Operations: make([]*ichorv1.Operation, 0, len(ops))}
	for _, op := range ops {
		out.Operations = append(out.Operations, operationToProto(op))
	}
	return out, nil
}

// newerOperation orders operations newest first: by creation, then by name
// (descending, so that generated names created in the same second keep an order).
func newerOperation(a, b *ichorv1alpha1.TalosOperation) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

// GetOperation implements OperationService.
func (s *OperationService) GetOperation(ctx context.Context, req *ichorv1.GetOperationRequest) (*ichorv1.GetOperationResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required: the TalosOperation's name")
	}
	what := "reading operation " + name
	if err := s.Clients.Authorize(ctx, "get", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := &ichorv1alpha1.TalosOperation{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, op); err != nil {
		return nil, apiError(ctx, err, what)
	}
	if err := s.servedOperation(op); err != nil {
		return nil, err
	}
	return &ichorv1.GetOperationResponse{Operation: operationToProto(op)}, nil
}

// servedOperation refuses an operation of another cluster as if it did not
// exist: this ichor-ui serves one cluster.
func (s *OperationService) servedOperation(op *ichorv1alpha1.TalosOperation) error {
	if op.Spec.ClusterName != s.ClusterName {
		return status.Errorf(codes.NotFound, "operation %s belongs to cluster %q, not %q", op.Name, op.Spec.ClusterName, s.ClusterName)
	}
	return nil
}

// PauseOperation implements OperationService: it sets spec.paused as the
// signed-in user; the controller stops the operation before its next step.
func (s *OperationService) PauseOperation(ctx context.Context, req *ichorv1.PauseOperationRequest) (*ichorv1.PauseOperationResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required: the TalosOperation's name")
	}
	op, err := s.changeOperation(ctx, "pausing operation "+name, name, func(op *ichorv1alpha1.TalosOperation) (bool, error) {
		if done(op) {
			return false, status.Errorf(codes.FailedPrecondition,
				"pausing operation %s: it has finished (%s) and has nothing left to pause; start a new operation instead", name, op.Status.Phase)
		}
		if op.Spec.Paused {
			return false, nil
		}
		op.Spec.Paused = true
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &ichorv1.PauseOperationResponse{Operation: operationToProto(op)}, nil
}

// ResumeOperation implements OperationService: it clears spec.paused as the
// signed-in user. An operation that paused on a failed step (failureReason
// set) also gets a new resume annotation, which makes the controller re-run
// that step (architecture, "A step that fails pauses its operation").
func (s *OperationService) ResumeOperation(ctx context.Context, req *ichorv1.ResumeOperationRequest) (*ichorv1.ResumeOperationResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required: the TalosOperation's name")
	}
	op, err := s.changeOperation(ctx, "resuming operation "+name, name, func(op *ichorv1alpha1.TalosOperation) (bool, error) {
		if done(op) {
			return false, status.Errorf(codes.FailedPrecondition,
				"resuming operation %s: it has finished (%s) and cannot run again; start a new operation instead", name, op.Status.Phase)
		}
		changed := false
		if op.Spec.Paused {
			op.Spec.Paused = false
			changed = true
		}
		if req.GetOverride() && !op.Status.Overridable {
			return false, status.Errorf(codes.FailedPrecondition,
				"resuming operation %s with override: its failed step did not stop at a check the override goes past "+
					"(removed APIs in use, the drain capacity check); nothing was changed; resume it without the override", name)
		}
		if op.Status.FailureReason != "" {
			if op.Annotations == nil {
				op.Annotations = map[string]string{}
			}
			tok := time.Now().UTC().Format(time.RFC3339Nano)
			op.Annotations[ichorv1alpha1.ResumeAnnotation] = tok
			if req.GetOverride() {
				old := op.DeepCopy()
				key, _ := guard.OverrideAnnotationOf(op)
				op.Annotations[key] = tok
				if err := s.mayAnnotate(ctx, old, op); err != nil {
					return false, err
				}
			}
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		return nil, err
	}
	return &ichorv1.ResumeOperationResponse{Operation: operationToProto(op)}, nil
}

// mayAnnotate checks, before the write, that the signed-in user holds what
// the annotations changed from old to op need (guard.OperationAnnotationRequirements;
// the webhook decides again on the write).
func (s *OperationService) mayAnnotate(ctx context.Context, old, op *ichorv1alpha1.TalosOperation) error {
	user := ""
	if id, ok := identity.From(ctx); ok {
		user = id.Username
	}
	for _, req := range guard.OperationAnnotationRequirements(old, op) {
		ok, err := s.holds(ctx, req.Permission)
		if err != nil {
			return err
		}
		if !ok {
			return status.Errorf(codes.PermissionDenied, "resuming operation %s with override: %s; nothing was changed", op.Name, req.Refusal(user).Error())
		}
	}
	return nil
}

// done reports whether the operation has finished for good.
func done(op *ichorv1alpha1.TalosOperation) bool {
	return op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed
}

// changeOperation reads the operation fresh as the signed-in user, applies
// mutate and, when it changed something, updates it as that user; a conflict
// is retried on a fresh read.
func (s *OperationService) changeOperation(ctx context.Context, what, name string, mutate func(*ichorv1alpha1.TalosOperation) (bool, error)) (*ichorv1alpha1.TalosOperation, error) {
	var out *ichorv1alpha1.TalosOperation
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		op := &ichorv1alpha1.TalosOperation{}
		if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, op); err != nil {
			return err
		}
		if err := s.servedOperation(op); err != nil {
			return err
		}
		changed, err := mutate(op)
		if err != nil {
			return err
		}
		if changed {
			if err := s.Clients.User.Update(ctx, op); err != nil {
				return err
			}
		}
		out = op
		return nil
	})
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	return out, nil
}

// operationToProto converts a TalosOperation; it reads op and never keeps it.
func operationToProto(op *ichorv1alpha1.TalosOperation) *ichorv1.Operation {
	st := &op.Status
	phase := st.Phase
	if phase == "" {
		phase = ichorv1alpha1.OperationPending
	}
	out := &ichorv1.Operation{
		Name: op.Name, Type: op.Spec.Type, Phase: phase, Step: st.Step, Paused: op.Spec.Paused,
		From: st.From, To: st.To, FailureReason: st.FailureReason, Overridable: st.Overridable,
		StartedAt: ts(st.StartedAt), CompletedAt: ts(st.CompletedAt), CreatedAt: ts(&op.CreationTimestamp),
		Conditions: conditions(st.Conditions), ResourceVersion: op.ResourceVersion,
	}
	if out.To == "" {
		out.To = operationTarget(&op.Spec)
	}
	for i := range st.Machines {
		m := &st.Machines[i]
		msg := m.Message
		if msg == "" && m.Step != "" {
			msg = m.Step
		}
		out.Machines = append(out.Machines, &ichorv1.OperationMachine{Name: m.Name, State: m.Phase, Message: msg, Stage: m.Stage, Step: m.Step})
	}
	for _, stg := range st.Stages {
		out.Stages = append(out.Stages, &ichorv1.OperationStage{Name: stg.Name, Phase: stg.Phase, Message: stg.Message})
	}
	for _, a := range st.RemovedAPIs {
		api := strings.TrimSuffix(kubeupgrade.DescribeRemovedAPI(a), " (removed in "+a.RemovedRelease+")")
		out.RemovedApis = append(out.RemovedApis, &ichorv1.RemovedAPI{Api: api, RemovedRelease: a.RemovedRelease, ControlPlanes: a.ControlPlanes})
	}
	return out
}

// operationTarget is what the spec asks for, shown until the controller
// records status.to.
func operationTarget(spec *ichorv1alpha1.TalosOperationSpec) string {
	switch {
	case spec.Talos != nil && spec.Talos.Version != "":
		return spec.Talos.Version
	case spec.Talos != nil && spec.Talos.Schematic != "":
		return "schematic " + spec.Talos.Schematic
	case spec.Kubernetes != nil:
		return spec.Kubernetes.Version
	case spec.Ichor != nil:
		return spec.Ichor.Version
	case spec.CNI != nil:
		return spec.CNI.Version
	case spec.KubeProxy != nil:
		return "kube-proxy " + spec.KubeProxy.Mode
	case spec.Node != nil:
		return spec.Node.Action + " " + spec.Node.MachineName
	case spec.EtcdRestore != nil:
		return path.Base(spec.EtcdRestore.Snapshot)
	}
	return ""
}

// PreviewConfigRollout implements OperationService: the plan of a config
// rollout of the served cluster, from the cache, with the shared rules of
// contracts/pkg/rollout (the same as `ichor config apply`), and the
// cluster's privileged patches (contracts/pkg/privileged), whose rollout
// needs `update` on talosconfigpatches/privileged. It carries paths, never
// values.
func (s *OperationService) PreviewConfigRollout(ctx context.Context, req *ichorv1.PreviewConfigRolloutRequest) (*ichorv1.PreviewConfigRolloutResponse, error) {
	const what = "planning a config rollout"
	ls, sel, err := rollout.ParseSelector(req.GetSelector())
	if err != nil {
		return nil, invalid("selector %v", err)
	}
	for _, res := range []string{resMachines, resOperations, resPatches} {
		if err := s.Clients.Authorize(ctx, "list", res); err != nil {
			return nil, apiError(ctx, err, what)
		}
	}
	machines := &ichorv1alpha1.TalosMachineList{}
	if err := s.Clients.Cache.List(ctx, machines, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.Cache.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	patches := &ichorv1alpha1.TalosConfigPatchList{}
	if err := s.Clients.Cache.List(ctx, patches, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	p := rollout.For(s.ClusterName, sel, machines.Items)
	out := &ichorv1.PreviewConfigRolloutResponse{
		Cluster: s.ClusterName, Selector: formatSelector(ls),
		Machines: rolloutMachinesToProto(p.Machines), Matched: int32(min(p.Matched, math.MaxInt32)), //nolint:gosec // bounded
	}
	for _, pp := range privileged.OfCluster(s.ClusterName, patches.Items) {
		out.PrivilegedPatches = append(out.PrivilegedPatches, &ichorv1.PrivilegedPatch{Name: pp.Name, Paths: pp.Paths})
	}
	if o := rollout.Unfinished(s.ClusterName, ops.Items); o != nil {
		out.Unfinished = operationToProto(o)
	}
	return out, nil
}

// StartConfigRollout implements OperationService: after the checks of
// `ichor config apply` (contracts/pkg/rollout), it creates a TalosOperation
// of type config as the signed-in user, so the API server's RBAC and the
// admission webhook decide as for the CLI. The typed cluster name is the
// user's consent, as the CLI's prompt.
func (s *OperationService) StartConfigRollout(ctx context.Context, req *ichorv1.StartConfigRolloutRequest) (*ichorv1.StartConfigRolloutResponse, error) {
	what := "starting a config rollout of cluster " + s.ClusterName
	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "created"); err != nil {
		return nil, err
	}
	ls, sel, err := rollout.ParseSelector(req.GetSelector())
	if err != nil {
		return nil, invalid("%s: selector %v; nothing was created", what, err)
	}
	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	// The operations fresh from the API server, as the user: a rollout
	// started a moment ago (perhaps by a second click) is refused even
	// before the cache sees it.
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.User.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	if o := rollout.Unfinished(s.ClusterName, ops.Items); o != nil {
		phase := o.Status.Phase
		if phase == "" {
			phase = ichorv1alpha1.OperationPending
		}
		wayOut := "follow it on its page, /operations/" + o.Name + ", until it ends"
		if phase == ichorv1alpha1.OperationPaused {
			wayOut = "resume it on its page, /operations/" + o.Name
		}
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s: config operation %s has not finished (phase %s): %s instead of starting another; nothing was created",
			what, o.Name, phase, wayOut)
	}
	machines := &ichorv1alpha1.TalosMachineList{}
	if err := s.Clients.Cache.List(ctx, machines, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	p := rollout.For(s.ClusterName, sel, machines.Items)
	if ls != nil && p.Matched == 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s: the selector %s matches no TalosMachine of the cluster (it matches the machines' labels, as on the Nodes page); change or clear it; nothing was created",
			what, formatSelector(ls))
	}
	if len(p.Machines) == 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s: nothing needs rolling out: no machine%s waits for a reboot, a kube-apiserver restart or a drift correction; "+
				"a rollout is needed only when a machine reports RebootRequired, APIServerRestartRequired or Drifted; nothing was created",
			what, selectorText(ls))
	}
	op := rollout.NewOperation(s.Clients.Namespace, s.ClusterName, ls)
	if err := s.Clients.User.Create(ctx, op); err != nil {
		return nil, apiError(ctx, err, what)
	}
	return &ichorv1.StartConfigRolloutResponse{Operation: operationToProto(op), Machines: rolloutMachinesToProto(p.Machines)}, nil
}

func formatSelector(ls *metav1.LabelSelector) string {
	if ls == nil {
		return ""
	}
	return metav1.FormatLabelSelector(ls)
}

func selectorText(ls *metav1.LabelSelector) string {
	if ls == nil {
		return ""
	}
	return " matching " + formatSelector(ls)
}

// rolloutMachinesToProto converts the plan's machines; never nil.
func rolloutMachinesToProto(ms []rollout.Machine) []*ichorv1.RolloutMachine {
	out := make([]*ichorv1.RolloutMachine, 0, len(ms))
	for _, m := range ms {
		out = append(out, &ichorv1.RolloutMachine{
			Name: m.Name, Role: m.Role, Rollout: m.Rollout,
			RebootRequiredPaths: m.Paths, DriftPaths: m.DriftPaths, HeldBy: m.Held,
		})
	}
	return out
}
