package commands

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
)

// flagList prints the candidates of an upgrade.
const flagList = cmdList

// argsVersion is the usage of the upgrade commands' optional argument.
const argsVersion = "[VERSION]"

// startWait bounds the wait for the controller to start the operation after
// spec.talosVersion or spec.kubernetesVersion was written.
const startWait = 2 * time.Minute

// upgradeCommand is `ichor upgrade`: the component upgrades (architecture, "Upgrades").
func upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:  "upgrade",
		Usage: "upgrade a component of a cluster",
		Commands: []*cli.Command{
			{
				Name:      "talos",
				Usage:     "upgrade Talos on every machine (control planes first, one at a time), or list the versions to upgrade to",
				ArgsUsage: argsVersion,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
					&cli.BoolFlag{Name: flagList, Usage: "print the candidates (recommended, patch, next minor; the default marked) and change nothing"},
					&cli.BoolFlag{Name: flagWait, Usage: usageWaitOperation},
				},
				Action: upgradeTalos,
			},
			{
				Name: "kubernetes",
				Usage: "upgrade Kubernetes one minor up at most: control planes one at a time, then kube-proxy and the bootstrap manifests, " +
					"then every kubelet; or list the versions to upgrade to",
				ArgsUsage: argsVersion,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
					&cli.BoolFlag{Name: flagList, Usage: "print the candidates (recommended, patch, next minor; the default marked) and change nothing"},
					&cli.BoolFlag{Name: flagWait, Usage: usageWaitOperation},
				},
				Action: upgradeKubernetes,
			},
			upgradeIchorCommand(),
		},
		Action: unknownSubcommand,
	}
}

// upgradeComponent is what differs between `ichor upgrade talos` and `ichor upgrade kubernetes`.
type upgradeComponent struct {
	// name is Talos or Kubernetes; field the spec field written.
	name, field, opType string
	running             func(c *ichorv1alpha1.TalosCluster) string
	candidates          func(c *ichorv1alpha1.TalosCluster) (source, message string, checked *metav1.Time, cs []ichorv1alpha1.VersionCandidate)
	check               func(c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation, target string) []guard.Refusal
	set                 func(c *ichorv1alpha1.TalosCluster, target string)
	what                string // the confirmation's description, %s cluster, from, to
	targetOf            func(op *ichorv1alpha1.TalosOperation) string
}

var talosUpgrade = upgradeComponent{
	name: "Talos", field: "spec.talosVersion", opType: ichorv1alpha1.OperationTalos,
	running: func(c *ichorv1alpha1.TalosCluster) string { return c.Spec.TalosVersion },
	candidates: func(c *ichorv1alpha1.TalosCluster) (string, string, *metav1.Time, []ichorv1alpha1.VersionCandidate) {
		u := c.Status.TalosUpgrade
		return u.Source, u.Message, u.CheckedAt, u.Candidates
	},
	check: guard.CheckTalosUpgrade,
	set:   func(c *ichorv1alpha1.TalosCluster, v string) { c.Spec.TalosVersion = v },
	what:  "This upgrades Talos on every machine of cluster %s from %s to %s: each machine is drained and rebooted, control planes first, one at a time.",
	targetOf: func(op *ichorv1alpha1.TalosOperation) string {
		if op.Spec.Talos == nil {
			return ""
		}
		return op.Spec.Talos.Version
	},
}

var kubernetesUpgrade = upgradeComponent{
	name: "Kubernetes", field: "spec.kubernetesVersion", opType: ichorv1alpha1.OperationKubernetes,
	running: kubeupgrade.Running,
	candidates: func(c *ichorv1alpha1.TalosCluster) (string, string, *metav1.Time, []ichorv1alpha1.VersionCandidate) {
		u := c.Status.KubernetesUpgrade
		return u.Source, u.Message, u.CheckedAt, u.Candidates
	},
	check: guard.CheckKubernetesUpgrade,
	set:   func(c *ichorv1alpha1.TalosCluster, v string) { c.Spec.KubernetesVersion = kubeupgrade.Normalize(v) },
	what: "This upgrades Kubernetes on cluster %s from %s to %s in three stages, without reboots: the control-plane components one control plane at a time, " +
		"then kube-proxy and Talos's bootstrap manifests, then every kubelet (control planes first). The images are pulled on every node first; " +
		"APIs the new version removes stop the upgrade at its pre-checks.",
	targetOf: func(op *ichorv1alpha1.TalosOperation) string {
		if op.Spec.Kubernetes == nil {
			return ""
		}
		return kubeupgrade.Normalize(op.Spec.Kubernetes.Version)
	},
}

// candidateRows is the table of the candidates of status.talosUpgrade or status.kubernetesUpgrade.
func candidateRows(cs []ichorv1alpha1.VersionCandidate) *output.Rows {
	t := &output.Rows{Header: []string{"GROUP", "VERSION", "DEFAULT"}}
	for _, c := range cs {
		def := ""
		if c.Default {
			def = "*"
		}
		t.Add(c.Group, c.Version, def)
	}
	return t
}

func upgradeTalos(ctx context.Context, cmd *cli.Command) error {
	return upgrade(ctx, cmd, talosUpgrade)
}

func upgradeKubernetes(ctx context.Context, cmd *cli.Command) error {
	return upgrade(ctx, cmd, kubernetesUpgrade)
}

// upgrade is `ichor upgrade talos|kubernetes [VERSION] [--list] [--wait]`:
// the candidates, or the checks and the write of the spec field, after which
// the controller starts the operation.
func upgrade(ctx context.Context, cmd *cli.Command, u upgradeComponent) error {
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
	source, message, checked, cands := u.candidates(c)
	if cmd.Bool(flagList) {
		if r.format != output.Table {
			switch u.opType {
			case ichorv1alpha1.OperationKubernetes:
				return output.Object(r.out, r.format, c.Status.KubernetesUpgrade)
			default:
				return output.Object(r.out, r.format, c.Status.TalosUpgrade)
			}
		}
		if checked == nil {
			r.printf("The controller has not read the release source of cluster %s yet; try again in a minute.\n", c.Name)
			return nil
		}
		r.printf("%s candidates for cluster %s (running %s), from %s at %s:\n\n", u.name, c.Name, u.running(c), source, checked.UTC().Format(time.RFC3339))
		if len(cands) == 0 {
			r.printf("No newer version is offered.\n")
		} else if err := candidateRows(cands).Write(r.out); err != nil {
			return err
		}
		if message != "" {
			r.warnf("%s", message)
		}
		r.printf("\nA version not in the list can still be named; it is checked the same way.\n")
		return nil
	}
	target := cmd.Args().First()
	if target == "" {
		def := ""
		for _, cand := range cands {
			if cand.Default {
				def = cand.Version
			}
		}
		if def == "" {
			return fmt.Errorf("`%s` needs a VERSION; `%s --list` shows the candidates", cmd.FullName(), cmd.FullName())
		}
		return fmt.Errorf("`%s` needs a VERSION: the default is %s (`%s %s`); `%s --list` shows the others",
			cmd.FullName(), def, cmd.FullName(), def, cmd.FullName())
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
	}
	if err := refusalError(fmt.Sprintf("Upgrading cluster %s to %s %s", c.Name, u.name, target), u.check(c, ops.Items, target)); err != nil {
		return err
	}
	if u.opType == ichorv1alpha1.OperationKubernetes {
		if w := guard.UntestedCilium(c, target); w != "" {
			r.warnf("%s", w)
		}
	}
	from := u.running(c)
	text := fmt.Sprintf(u.what, c.Name, from, target)
	var notices smallClusterNotices
	if u.opType == ichorv1alpha1.OperationTalos {
		downtime, warnings, err := guard.TalosUpgradeNotices(ctx, r.c(), c, target, time.Now())
		if err != nil {
			return r.conn.Explain(err, "reading the machines and backups of cluster "+c.Name)
		}
		notices = smallClusterNotices{downtime: downtime, warnings: warnings}
		var b strings.Builder
		b.WriteString(text + "\n")
		notices.write(&b)
		text = strings.TrimSuffix(b.String(), "\n")
	}
	r.warnIfUnasked(notices)
	if err := r.confirm(text, c.Name); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	u.set(c, target)
	if notices.downtime != "" {
		guard.AcceptDowntime(c, target) // the person confirmed the text that says so
	}
	if err := r.c().Patch(ctx, c, patch); err != nil {
		return r.conn.Explain(err, "setting "+u.field+" of TalosCluster "+c.Name)
	}
	r.printf("Set %s of cluster %s to %s (it runs %s); the controller starts a %s operation.\n", u.field, c.Name, target, from, u.opType)
	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor operation list` and `ichor operation get NAME --watch`.\n")
		return nil
	}
	op, err := r.waitUpgradeOperation(ctx, c.Name, u, target)
	if err != nil {
		return err
	}
	r.printf("Started operation %s.\n", op.Name)
	return r.followToEnd(ctx, op)
}

// followToEnd follows op until it ends and says how it ended: the success
// line with the Ready message, or the failure (operationOutcome) as the error.
func (r *run) followToEnd(ctx context.Context, op *ichorv1alpha1.TalosOperation) error {
	final, err := r.followOperation(ctx, op, false)
	if err != nil {
		return err
	}
	if final == nil {
		return fmt.Errorf("stopped following operation %s; it goes on: `ichor operation get %s --watch`", op.Name, op.Name)
	}
	if err := operationOutcome(final); err != nil {
		return err
	}
	msg := ""
	if cond := meta.FindStatusCondition(final.Status.Conditions, ichorv1alpha1.ReadyCondition); cond != nil {
		msg = ": " + cond.Message
	}
	r.printf("Operation %s succeeded%s.\n", final.Name, msg)
	return nil
}

// waitUpgradeOperation waits for the operation to version of cluster that
// the controller starts after the spec field changed.
func (r *run) waitUpgradeOperation(ctx context.Context, cluster string, u upgradeComponent, version string) (*ichorv1alpha1.TalosOperation, error) {
	deadline := time.Now().Add(startWait)
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	want := version
	if u.opType == ichorv1alpha1.OperationKubernetes {
		want = kubeupgrade.Normalize(version)
	}
	for {
		ops := &ichorv1alpha1.TalosOperationList{}
		if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
			return nil, r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
		}
		for i := range ops.Items {
			op := &ops.Items[i]
			if op.Spec.ClusterName == cluster && op.Spec.Type == u.opType && u.targetOf(op) == want {
				return op, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the controller started no %s operation to %s within %s; check the controller's logs and the TalosCluster's "+
				"status (`kubectl get taloscluster %s -o yaml`)", u.opType, version, startWait, cluster)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}
