package api

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// The kube-proxy switch, as the console's Cilium page starts it: the same
// TalosOperation of type kube-proxy as `ichor cni kube-proxy MODE`, checked
// with the admission webhook's rules (guard.CheckOperation, which runs
// guard.CheckKubeProxySwitch for type kube-proxy) on facts read as the
// signed-in user, then created as that user, whose RBAC and the webhook
// decide again.

// actionKubeProxySwitch names the switch in a missing permission's refusal.
const actionKubeProxySwitch = "switching kube-proxy"

// kubeProxyOperation is the TalosOperation that switches the served
// cluster's kube-proxy to mode.
func (s *OperationService) kubeProxyOperation(mode string) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace, GenerateName: s.ClusterName + "-kube-proxy-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: s.ClusterName, Type: ichorv1alpha1.OperationKubeProxy,
			KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: mode},
		},
	}
}

// PreviewKubeProxySwitch implements OperationService: the served cluster's
// kube-proxy mode, the KubeProxyConsistent condition, its unfinished
// kube-proxy operations and, for the target (the mode asked, else the other
// one), the steps in the controller's order (guard.KubeProxySwitchPlan) and
// what refuses the switch for the signed-in user.
func (s *OperationService) PreviewKubeProxySwitch(ctx context.Context, req *ichorv1.PreviewKubeProxySwitchRequest) (*ichorv1.PreviewKubeProxySwitchResponse, error) {
	what := "switching kube-proxy on cluster " + s.ClusterName
	op := s.kubeProxyOperation(strings.TrimSpace(req.GetMode()))
	facts, err := s.ciliumFacts(ctx, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	c := facts.Cluster
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.User.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	mode := guard.KubeProxyMode(c)
	if op.Spec.KubeProxy.Mode == "" {
		op.Spec.KubeProxy.Mode = guard.KubeProxyOtherMode(mode)
	}
	target := op.Spec.KubeProxy.Mode
	out := &ichorv1.PreviewKubeProxySwitchResponse{Cluster: s.ClusterName, Mode: mode, Target: target}
	for _, st := range guard.KubeProxySwitchPlan(s.ClusterName, target) {
		out.Steps = append(out.Steps, &ichorv1.KubeProxyStep{Step: st.Step, Action: st.Action})
	}
	for _, u := range guard.UnfinishedKubeProxy(s.ClusterName, ops.Items) {
		out.Unfinished = append(out.Unfinished, &ichorv1.KubeProxySwitching{Name: u.Name, Mode: u.Mode, Step: u.Step})
	}
	if cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition); cond != nil {
		out.Consistent = conditions([]metav1.Condition{*cond})[0]
	}
	refusals, err := s.previewRefusals(ctx, op, facts, actionKubeProxySwitch)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out.Refusals, out.Allowed = refusalsToProto(refusals), len(refusals) == 0
	return out, nil
}

// StartKubeProxySwitch implements OperationService: after `create` on
// talosoperations and the shared checks (decideOperation, on the cluster and
// its operations fresh from the API server, as the user), it creates the
// kube-proxy operation as the signed-in user. A mode Ichor does not know is
// InvalidArgument, with the shared check's words.
func (s *OperationService) StartKubeProxySwitch(ctx context.Context, req *ichorv1.StartKubeProxySwitchRequest) (*ichorv1.StartKubeProxySwitchResponse, error) {
	mode := strings.TrimSpace(req.GetMode())
	if mode == "" {
		return nil, invalid("mode is required: %s (Talos runs kube-proxy) or %s (Cilium replaces it); nothing was created",
			ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced)
	}
	what := "switching kube-proxy on cluster " + s.ClusterName + " to " + mode
	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}
	op := s.kubeProxyOperation(mode)
	facts, err := s.ciliumFacts(ctx, op)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	d, err := s.decideOperation(ctx, op, facts)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if len(d.refusals) > 0 {
		code := d.code
		if guard.KubeProxySwitchPlan(s.ClusterName, mode) == nil {
			code = codes.InvalidArgument
		}
		return nil, refused(code, what, d.refusals)
	}
	if err := s.Clients.User.Create(ctx, op); err != nil {
		return nil, apiError(ctx, err, what)
	}
	return &ichorv1.StartKubeProxySwitchResponse{Operation: operationToProto(op)}, nil
}
