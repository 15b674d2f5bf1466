package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// ciliumRelease is the Helm release a cni operation upgrades.
const ciliumRelease = "kube-system/cilium"

// cniCharts is what `ichor cni upgrade --list` prints (and, with -o yaml|json, writes).
type cniCharts struct {
	Cluster string `json:"cluster"`
	// Managed is false for a cluster whose CNI Ichor does not manage.
	Managed bool `json:"managed"`
	// Running is status.cni.ciliumVersion; "" while the controller has not read it.
	Running string     `json:"running"`
	Charts  []cniChart `json:"charts"`
	// Default is the chart `ichor cni upgrade` without VERSION moves to; "" when none.
	Default string `json:"default"`
}

// cniChart is one Cilium chart this Ichor embeds.
type cniChart struct {
	Version string `json:"version"`
	Running bool   `json:"running"`
	Default bool   `json:"default"`
}

func cniChartsOf(c *ichorv1alpha1.TalosCluster) cniCharts {
	running := guard.CNIVersion(c.Status.CNI.CiliumVersion)
	out := cniCharts{Cluster: c.Name, Managed: c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetUnmanaged, Running: running}
	if out.Managed {
		out.Default = guard.CNIUpgradeTarget(running)
	}
	for _, v := range release.CiliumVersions() {
		out.Charts = append(out.Charts, cniChart{Version: v, Running: v == running, Default: v == out.Default})
	}
	return out
}

// cniUpgrade is `ichor cni upgrade [VERSION] [--list] [--wait]`: the charts,
// or the shared checks, a confirmation and a TalosOperation of type cni,
// which the controller runs.
func cniUpgrade(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return fmt.Errorf("`%s` takes at most one VERSION; run `%s --help`", cmd.FullName(), cmd.FullName())
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	if cmd.Bool(flagList) {
		return r.printCNICharts(cmd, cniChartsOf(c))
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
	}
	facts := guard.CNIFacts{Running: c.Status.CNI.CiliumVersion, Unfinished: guard.UnfinishedCNI(c.Name, "", ops.Items)}
	target := guard.CNIVersion(cmd.Args().First())
	if target == "" {
		target = guard.CNIUpgradeTarget(facts.Running)
		if target == "" {
			return noCNITarget(cmd, c, facts)
		}
	}
	if err := refusalError(fmt.Sprintf("Upgrading Cilium on cluster %s to %s", c.Name, target), guard.CheckCNIUpgrade(c, facts, target)); err != nil {
		return err
	}
	if untested, err := release.CheckCiliumPair(target, c.Spec.KubernetesVersion); err == nil && untested {
		r.warnf("Cilium %s is not tested on Kubernetes %s (newer than the versions its documentation lists); it relies on Kubernetes' backward compatibility",
			target, kubeupgrade.Describe(c.Spec.KubernetesVersion))
	}
	from := guard.CNIVersion(facts.Running)
	if err := r.confirm(cniUpgradeText(c.Name, from, target), c.Name); err != nil {
		return err
	}
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: "cni-" + strings.ReplaceAll(target, ".", "-") + "-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: c.Name,
			Type:        ichorv1alpha1.OperationCNI,
			CNI:         &ichorv1alpha1.CNIUpgrade{Version: target},
		},
	}
	return r.startOperation(ctx, cmd, op)
}

// startOperation creates op (after its checks and the confirmation), says
// its name and, with --wait, follows it to its end.
func (r *run) startOperation(ctx context.Context, cmd *cli.Command, op *ichorv1alpha1.TalosOperation) error {
	if err := r.c().Create(ctx, op); err != nil {
		return fmt.Errorf("%w; nothing was created", r.conn.Explain(err, fmt.Sprintf("creating the %s operation for cluster %s", op.Spec.Type, op.Spec.ClusterName)))
	}
	r.printf("Started operation %s.\n", op.Name)
	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor operation get %s --watch`.\n", op.Name)
		return nil
	}
	return r.followToEnd(ctx, op)
}

// cniUpgradeText is the confirmation of a Cilium chart upgrade.
func cniUpgradeText(cluster, from, to string) string {
	return fmt.Sprintf("This upgrades Cilium on cluster %s from %s to %s: Helm upgrades the release %s to the chart %s this Ichor embeds, "+
		"and Cilium's agents restart as the DaemonSet rolls (the chart's rolling update, at most two nodes at a time unless the values say otherwise). If the upgrade fails, Helm rolls the release back to the running chart %s. "+
		"The operation holds the cluster lock while it runs.", cluster, from, to, ciliumRelease, to, from)
}

// noCNITarget says why `ichor cni upgrade` without VERSION has nothing to move to.
func noCNITarget(cmd *cli.Command, c *ichorv1alpha1.TalosCluster, facts guard.CNIFacts) error {
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return refusalError("Upgrading Cilium on cluster "+c.Name, guard.CheckCNIUpgrade(c, facts, ""))
	}
	running := guard.CNIVersion(facts.Running)
	if running == "" {
		return fmt.Errorf("the Cilium version cluster %s runs is not known yet (status.cni.ciliumVersion is empty), so there is no default chart to move to; "+
			"wait a few minutes for the controller to read it from the running agent, then try again; nothing was changed", c.Name)
	}
	embedded := release.CiliumVersions()
	newest := embedded[len(embedded)-1]
	r, errR := k8sversion.ParseSemantic(running)
	n, errN := k8sversion.ParseSemantic(newest)
	if errR == nil && errN == nil && r.AtLeast(n) {
		return fmt.Errorf("cluster %s runs Cilium %s and the newest chart this Ichor carries is %s (it embeds %s): there is nothing to upgrade to; "+
			"a newer Ichor brings newer charts; nothing was changed", c.Name, running, newest, strings.Join(embedded, ", "))
	}
	return fmt.Errorf("this Ichor carries no chart Cilium %s of cluster %s can move to (it embeds %s; Cilium moves one minor at a time, never down); "+
		"`%s --list` shows them; nothing was changed", running, c.Name, strings.Join(embedded, ", "), cmd.FullName())
}

// printCNICharts prints the running Cilium and the embedded charts.
func (r *run) printCNICharts(cmd *cli.Command, l cniCharts) error {
	if r.format != output.Table {
		return output.Object(r.out, r.format, l)
	}
	if !l.Managed {
		r.printf("Cluster %s has an unmanaged CNI; Ichor does not upgrade or configure it.\n", l.Cluster)
		return nil
	}
	if l.Running == "" {
		r.printf("Cluster %s: the Cilium version it runs is not known yet (status.cni.ciliumVersion is empty; the controller reads it from the running agent).\n\n", l.Cluster)
	} else {
		r.printf("Cluster %s runs Cilium %s (status.cni.ciliumVersion).\n\n", l.Cluster, l.Running)
	}
	t := &output.Rows{Header: []string{"CHART", "RUNNING", "DEFAULT"}}
	for _, ch := range l.Charts {
		running, def := "", ""
		if ch.Running {
			running = "*"
		}
		if ch.Default {
			def = "*"
		}
		t.Add(ch.Version, running, def)
	}
	if err := t.Write(r.out); err != nil {
		return err
	}
	switch {
	case l.Default != "":
		r.printf("\nThe default target is %s (`%s --cluster %s` moves to it); Cilium moves one minor at a time, never down.\n",
			l.Default, cmd.FullName(), l.Cluster)
	case l.Running != "":
		r.printf("\nNo chart this Ichor embeds is newer than the running %s and at most one minor up: there is nothing to upgrade to.\n", l.Running)
	}
	return nil
}
