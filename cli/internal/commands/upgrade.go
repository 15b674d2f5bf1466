package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// flagList prints the candidates of an upgrade.
const flagList = cmdList

// startWait bounds the wait for the controller to start the operation after
// spec.talosVersion was written.
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
				ArgsUsage: "[VERSION]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
					&cli.BoolFlag{Name: flagList, Usage: "print the candidates (recommended, patch, next minor; the default marked) and change nothing"},
					&cli.BoolFlag{Name: flagWait, Usage: "follow the operation until it ends; the exit status is non-zero unless it succeeded"},
				},
				Action: upgradeTalos,
			},
		},
		Action: unknownSubcommand,
	}
}

// candidateRows is the table of status.talosUpgrade.candidates.
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
	u := c.Status.TalosUpgrade
	if cmd.Bool(flagList) {
		if r.format != output.Table {
			return output.Object(r.out, r.format, u)
		}
		if u.CheckedAt == nil {
			r.printf("The controller has not read the release source of cluster %s yet; try again in a minute.\n", c.Name)
			return nil
		}
		r.printf("Talos candidates for cluster %s (running %s), from %s at %s:\n\n", c.Name, c.Spec.TalosVersion, u.Source, u.CheckedAt.UTC().Format(time.RFC3339))
		if len(u.Candidates) == 0 {
			r.printf("No newer version is offered.\n")
		} else if err := candidateRows(u.Candidates).Write(r.out); err != nil {
			return err
		}
		if u.Message != "" {
			r.warnf("%s", u.Message)
		}
		r.printf("\nA version not in the list can still be named; it is checked the same way.\n")
		return nil
	}
	target := cmd.Args().First()
	if target == "" {
		def := ""
		for _, cand := range u.Candidates {
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
	if err := r.checkWritable(ctx); err != nil {
		return err
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
	}
	if err := refusalError(fmt.Sprintf("Upgrading cluster %s to Talos %s", c.Name, target), guard.CheckTalosUpgrade(c, ops.Items, target)); err != nil {
		return err
	}
	if err := r.confirm(fmt.Sprintf("This upgrades Talos on every machine of cluster %s from %s to %s: each machine is drained and rebooted, control planes first, one at a time.",
		c.Name, c.Spec.TalosVersion, target), c.Name); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	from := c.Spec.TalosVersion
	c.Spec.TalosVersion = target
	if err := r.c().Patch(ctx, c, patch); err != nil {
		return r.conn.Explain(err, "setting spec.talosVersion of TalosCluster "+c.Name)
	}
	r.printf("Set spec.talosVersion of cluster %s from %s to %s; the controller starts a talos operation.\n", c.Name, from, target)
	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor operation list` and `ichor operation get NAME --watch`.\n")
		return nil
	}
	op, err := r.waitTalosOperation(ctx, c.Name, target)
	if err != nil {
		return err
	}
	r.printf("Started operation %s.\n", op.Name)
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

// waitTalosOperation waits for the talos operation to version of cluster
// that the controller starts after spec.talosVersion changed.
func (r *run) waitTalosOperation(ctx context.Context, cluster, version string) (*ichorv1alpha1.TalosOperation, error) {
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
			if op.Spec.ClusterName == cluster && op.Spec.Type == ichorv1alpha1.OperationTalos && op.Spec.Talos != nil && op.Spec.Talos.Version == version {
				return op, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the controller started no talos operation to %s within %s; check the controller's logs and the TalosCluster's "+
				"status.talosUpgrade (`kubectl get taloscluster %s -o yaml`)", version, startWait, cluster)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}
