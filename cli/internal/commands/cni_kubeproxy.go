package commands

import (
	"context"
	"fmt"
	"strings"

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
// the steps in order and a TalosOperation of type kube-proxy, which the
// controller runs.
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
	if err := r.checkWritable(ctx); err != nil {
		return err
	}
	if err := r.confirm(kubeProxySwitchText(c.Name, guard.KubeProxyMode(c), target), c.Name); err != nil {
		return err
	}
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: "kube-proxy-" + target + "-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: c.Name,
			Type:        ichorv1alpha1.OperationKubeProxy,
			KubeProxy:   &ichorv1alpha1.KubeProxySwitch{Mode: target},
		},
	}
	return r.startOperation(ctx, cmd, op)
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
