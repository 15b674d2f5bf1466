package commands

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// argsKubeProxyMode is the argument of `ichor cni kube-proxy`.
const argsKubeProxyMode = "[enabled|replaced]"

// kubeProxyState is what `ichor cni kube-proxy` without a mode prints (and,
// with -o yaml|json, writes).
type kubeProxyState struct {
	Cluster string `json:"cluster"`
	// Mode is spec.cni.kubeProxy, enabled when unset.
	Mode string `json:"mode"`
	// Consistent is the KubeProxyConsistent condition; nil until the controller sets it.
	Consistent *metav1.Condition `json:"consistent,omitempty"`
	// Unfinished are the cluster's kube-proxy operations that have not ended.
	Unfinished []kubeProxySwitching `json:"unfinished"`
}

// kubeProxySwitching is an unfinished kube-proxy operation.
type kubeProxySwitching struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	Step string `json:"step"`
}

// cniKubeProxy is `ichor cni kube-proxy [enabled|replaced] [--wait]`: the
// cluster's kube-proxy mode, or the shared checks, a confirmation that says
// the steps in order and the write of spec.cni.kubeProxy (annotated for
// that write), after which the controller starts and runs a TalosOperation
// of type kube-proxy.
func cniKubeProxy(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return fmt.Errorf("`%s` takes at most one mode, %s or %s; run `%s --help`",
			cmd.FullName(), ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced, cmd.FullName())
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
	}
	if cmd.Args().Len() == 0 {
		return r.printKubeProxy(cmd, kubeProxyStateOf(c, ops.Items))
	}
	target := cmd.Args().First()
	what := fmt.Sprintf("Switching kube-proxy on cluster %s to %s", c.Name, target)
	if err := refusalError(what, guard.CheckKubeProxySwitch(c, guard.CNIFacts{Unfinished: guard.UnfinishedCNI(c.Name, "", ops.Items)}, target)); err != nil {
		return err
	}
	if err := r.confirm(kubeProxySwitchText(c.Name, guard.KubeProxyMode(c), target), c.Name); err != nil {
		return err
	}
	// The request is spec.cni.kubeProxy with the annotation naming the mode
	// on that one write (admission refuses the change without it); the
	// controller then starts the kube-proxy operation.
	before := map[string]bool{}
	for _, o := range ops.Items {
		before[o.Name] = true
	}
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	c.Spec.CNI.KubeProxy = target
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] = target
	if err := r.c().Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("%w; nothing was changed", r.conn.Explain(err, "setting spec.cni.kubeProxy of TalosCluster "+c.Name))
	}
	r.printf("Set spec.cni.kubeProxy of cluster %s to %s; the controller starts a kube-proxy operation.\n", c.Name, target)
	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor cni kube-proxy --cluster %s` or `ichor operation list`.\n", c.Name)
		return nil
	}
	op, err := r.waitKubeProxyOperation(ctx, c.Name, target, before)
	if err != nil {
		return err
	}
	r.printf("Started operation %s.\n", op.Name)
	return r.followToEnd(ctx, op)
}

// waitKubeProxyOperation waits for the kube-proxy operation to target of
// cluster that the controller starts after the write (one not in before).
func (r *run) waitKubeProxyOperation(ctx context.Context, cluster, target string, before map[string]bool) (*ichorv1alpha1.TalosOperation, error) {
	deadline := time.Now().Add(startWait)
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		ops := &ichorv1alpha1.TalosOperationList{}
		if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
			return nil, r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
		}
		for i := range ops.Items {
			op := &ops.Items[i]
			if !before[op.Name] && op.Spec.ClusterName == cluster && op.Spec.Type == ichorv1alpha1.OperationKubeProxy &&
				op.Spec.KubeProxy != nil && op.Spec.KubeProxy.Mode == target {
				return op, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the controller started no kube-proxy operation to %s within %s; check the controller's logs and the TalosCluster's "+
				"KubeProxyConsistent condition (`ichor cni kube-proxy --cluster %s`)", target, startWait, cluster)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

func kubeProxyStateOf(c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation) kubeProxyState {
	out := kubeProxyState{Cluster: c.Name, Mode: guard.KubeProxyMode(c), Unfinished: []kubeProxySwitching{}}
	if cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition); cond != nil {
		out.Consistent = cond
	}
	for _, s := range guard.UnfinishedKubeProxy(c.Name, ops) {
		out.Unfinished = append(out.Unfinished, kubeProxySwitching{Name: s.Name, Mode: s.Mode, Step: s.Step})
	}
	return out
}

// kubeProxySwitchText is the confirmation of a kube-proxy switch: the steps
// in the order the controller runs them (guard.KubeProxySwitchPlan).
func kubeProxySwitchText(cluster, from, to string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "This switches kube-proxy on cluster %s from %s to %s, in this order:\n", cluster, from, to)
	for i, s := range guard.KubeProxySwitchPlan(cluster, to) {
		fmt.Fprintf(&b, "  %d. %s: %s\n", i+1, s.Step, s.Action)
	}
	b.WriteString("Services keep a proxy at every step. The operation holds the cluster lock while it runs; a failed step pauses it " +
		"(`ichor operation resume NAME` resumes it).")
	return b.String()
}

// printKubeProxy prints the cluster's kube-proxy mode, its consistency and
// an unfinished switch.
func (r *run) printKubeProxy(cmd *cli.Command, s kubeProxyState) error {
	if r.format != output.Table {
		return output.Object(r.out, r.format, s)
	}
	r.printf("Cluster %s: kube-proxy %s (spec.cni.kubeProxy).\n", s.Cluster, s.Mode)
	if s.Consistent == nil {
		r.printf("%s: not reported yet (the controller compares Cilium's live config with spec.cni.kubeProxy once Cilium runs).\n",
			ichorv1alpha1.KubeProxyConsistentCondition)
	} else {
		r.printf("%s: %s (%s) %s\n", s.Consistent.Type, s.Consistent.Status, s.Consistent.Reason, s.Consistent.Message)
	}
	for _, u := range s.Unfinished {
		step := u.Step
		if step == "" {
			step = "not started"
		}
		r.printf("Switching to %s: operation %s, step %s (`ichor operation get %s --watch`).\n", u.Mode, u.Name, step, u.Name)
	}
	if len(s.Unfinished) == 0 {
		r.printf("`%s %s --cluster %s` switches it.\n", cmd.FullName(), guard.KubeProxyOtherMode(s.Mode), s.Cluster)
	}
	return nil
}
