package api

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// The kube-proxy switch, as the console's Cilium page starts it: the same
// write as `ichor cni kube-proxy MODE`, spec.cni.kubeProxy with the
// annotation naming the mode, checked with the admission webhook's rule
// (guard.CheckKubeProxySwitch) on facts read as the signed-in user, then
// written as that user, whose RBAC and the webhook decide again. The
// controller starts the kube-proxy operation that carries it out.

// actionKubeProxySwitch names the switch in a missing permission's refusal.
const actionKubeProxySwitch = "switching kube-proxy"

// kubeProxyFacts reads the served cluster and its operations as the
// signed-in user.
func (s *OperationService) kubeProxyFacts(ctx context.Context) (*ichorv1alpha1.TalosCluster, []ichorv1alpha1.TalosOperation, error) {
	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, nil, err
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := s.Clients.User.List(ctx, ops, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, nil, err
	}
	return c, ops.Items, nil
}

// kubeProxyRefusals is what refuses the switch of c to target for the
// signed-in user: the shared rule, then `update` on the cluster.
func (s *OperationService) kubeProxyRefusals(ctx context.Context, c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation, target string) ([]guard.Refusal, error) {
	refusals := guard.CheckKubeProxySwitch(c, guard.CNIFacts{Unfinished: guard.UnfinishedCNI(c.Name, "", ops)}, target)
	update := guard.Requirement{
		Permission: guard.Permission{Verb: guard.VerbUpdate, Resource: guard.ResourceTalosClusters, Namespace: c.Namespace, Name: c.Name},
		Field:      "spec.cni.kubeProxy", Action: actionKubeProxySwitch,
	}
	ok, err := s.holds(ctx, update.Permission)
	if err != nil {
		return nil, err
	}
	if !ok {
		user := ""
		if id, found := identity.From(ctx); found {
			user = id.Username
		}
		refusals = append(refusals, update.Refusal(user))
	}
	return refusals, nil
}

// PreviewKubeProxySwitch implements OperationService: the served cluster's
// kube-proxy mode, the KubeProxyConsistent condition, its unfinished
// kube-proxy operations and, for the target (the mode asked, else the other
// one), the steps in the controller's order (guard.KubeProxySwitchPlan) and
// what refuses the switch for the signed-in user.
func (s *OperationService) PreviewKubeProxySwitch(ctx context.Context, req *ichorv1.PreviewKubeProxySwitchRequest) (*ichorv1.PreviewKubeProxySwitchResponse, error) {
	what := "switching kube-proxy on cluster " + s.ClusterName
	c, ops, err := s.kubeProxyFacts(ctx)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	mode := guard.KubeProxyMode(c)
	target := strings.TrimSpace(req.GetMode())
	if target == "" {
		target = guard.KubeProxyOtherMode(mode)
	}
	out := &ichorv1.PreviewKubeProxySwitchResponse{Cluster: s.ClusterName, Mode: mode, Target: target}
	for _, st := range guard.KubeProxySwitchPlan(s.ClusterName, target) {
		out.Steps = append(out.Steps, &ichorv1.KubeProxyStep{Step: st.Step, Action: st.Action})
	}
	for _, u := range guard.UnfinishedKubeProxy(s.ClusterName, ops) {
		out.Unfinished = append(out.Unfinished, &ichorv1.KubeProxySwitching{Name: u.Name, Mode: u.Mode, Step: u.Step})
	}
	if cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition); cond != nil {
		out.Consistent = conditions([]metav1.Condition{*cond})[0]
	}
	refusals, err := s.kubeProxyRefusals(ctx, c, ops, target)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out.Refusals, out.Allowed = refusalsToProto(refusals), len(refusals) == 0
	return out, nil
}

// StartKubeProxySwitch implements OperationService: after the shared check
// and `update` on the cluster (kubeProxyRefusals, on the cluster and its
// operations fresh from the API server, as the user), it writes
// spec.cni.kubeProxy with the annotation naming the mode as the signed-in
// user; the controller then starts the kube-proxy operation. A mode Ichor
// does not know is InvalidArgument, with the shared check's words.
func (s *OperationService) StartKubeProxySwitch(ctx context.Context, req *ichorv1.StartKubeProxySwitchRequest) (*ichorv1.StartKubeProxySwitchResponse, error) {
	mode := strings.TrimSpace(req.GetMode())
	if mode == "" {
		return nil, invalid("mode is required: %s (Talos runs kube-proxy) or %s (Cilium replaces it); nothing was changed",
			ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced)
	}
	what := "switching kube-proxy on cluster " + s.ClusterName + " to " + mode
	if err := s.Clients.Authorize(ctx, "update", resClusters); err != nil {
		return nil, apiError(ctx, err, what)
	}
	var from string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, ops, err := s.kubeProxyFacts(ctx)
		if err != nil {
			return err
		}
		refusals, err := s.kubeProxyRefusals(ctx, c, ops, mode)
		if err != nil {
			return err
		}
		if len(refusals) > 0 {
			code := codes.FailedPrecondition
			if guard.KubeProxySwitchPlan(s.ClusterName, mode) == nil {
				code = codes.InvalidArgument
			}
			return refused(code, what, refusals)
		}
		from = guard.KubeProxyMode(c)
		c.Spec.CNI.KubeProxy = mode
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] = mode
		return s.Clients.User.Update(ctx, c)
	})
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	return &ichorv1.StartKubeProxySwitchResponse{From: from, To: mode}, nil
}
