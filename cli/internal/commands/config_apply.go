package commands

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
)

// configApplyCommand is `ichor config apply`: the plan of the changes that
// wait for a config operation, then the operation that rolls them out
// (architecture, "Configuration reconcile").
func configApplyCommand() *cli.Command {
	return &cli.Command{
		Name: "apply",
		Usage: "roll out the changes that wait for a reboot or a kube-apiserver restart (and correct drift): " +
			"print the plan, ask, then start a config operation",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
			&cli.StringSliceFlag{Name: "machine", Usage: "only machine `NAME` (repeatable); refused: machines carry no label naming them, use --selector"},
			&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "only the TalosMachines whose labels match `SELECTOR` (as kubectl -l)"},
			&cli.BoolFlag{Name: flagWait, Usage: usageWaitOperation},
		},
		Action: configApply,
	}
}

// rolloutPlan is what `config apply` prints (and, with -o yaml|json, writes).
type rolloutPlan struct {
	Cluster  string            `json:"cluster"`
	Selector string            `json:"selector,omitempty"`
	Machines []rollout.Machine `json:"machines"`
	// Privileged are the cluster's patches that carry privileged
	// configuration: starting the rollout needs `update` on
	// talosconfigpatches/privileged (the admission webhook checks it).
	Privileged []privileged.Patch `json:"privilegedPatches,omitempty"`
	Operation  string             `json:"operation,omitempty"`
}

// errMachineFlag explains why --machine cannot be honoured.
func errMachineFlag(ns string, names []string) error {
	return fmt.Errorf("--machine cannot be honoured: a config operation chooses its machines by their labels (spec.machineSelector), "+
		"and TalosMachines carry no label naming them (Ichor sets only %s). Label the machines you mean, for example "+
		"`kubectl label talosmachine -n %s %s rollout=now`, then run `ichor config apply --selector rollout=now`; nothing was created",
		ichorv1alpha1.ClusterLabel, ns, strings.Join(names, " "))
}

func configApply(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("`%s` takes no arguments (got %q): choose machines with --selector; run `%s --help`",
			cmd.FullName(), cmd.Args().First(), cmd.FullName())
	}
	labelSel, sel, err := rollout.ParseSelector(cmd.String("selector"))
	if err != nil {
		return fmt.Errorf("--selector %w", err)
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	if names := cmd.StringSlice("machine"); len(names) > 0 {
		for _, n := range names {
			m, err := r.getMachine(ctx, n)
			if err != nil {
				return err
			}
			if m.Spec.ClusterName != c.Name {
				return fmt.Errorf("--machine %s belongs to cluster %q, not %s; nothing was created", n, m.Spec.ClusterName, c.Name)
			}
		}
		return errMachineFlag(r.ns(), names)
	}
	if err := r.refuseSecondRollout(ctx, c.Name); err != nil {
		return err
	}

	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
	}
	planned := rollout.For(c.Name, sel, list.Items)
	patches := &ichorv1alpha1.TalosConfigPatchList{}
	if err := r.c().List(ctx, patches, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosConfigPatches in namespace "+r.ns())
	}
	p := rolloutPlan{Cluster: c.Name, Machines: planned.Machines, Privileged: privileged.OfCluster(c.Name, patches.Items)}
	if labelSel != nil {
		p.Selector = metav1.FormatLabelSelector(labelSel)
	}
	if labelSel != nil && planned.Matched == 0 {
		return fmt.Errorf("--selector %s matches no TalosMachine of cluster %s (it matches the machines' metadata labels: "+
			"`kubectl get talosmachines -n %s --show-labels`); nothing was created", p.Selector, c.Name, r.ns())
	}

	// People read the plan on standard output; with -o yaml|json it goes to
	// standard error, and standard output carries the plan as data.
	human := r.out
	if r.format != output.Table {
		human = r.errOut
	}
	if len(p.Machines) == 0 {
		_, _ = fmt.Fprintf(human, "Nothing needs rolling out: no machine of cluster %s%s waits for a reboot, a kube-apiserver restart or a drift correction.\n",
			c.Name, selectorSuffix(p.Selector))
		if r.format != output.Table {
			return output.Object(r.out, r.format, p)
		}
		return nil
	}
	writePlan(human, &p)
	if err := r.confirm(fmt.Sprintf("This starts a config operation on cluster %s.", c.Name), c.Name); err != nil {
		return err
	}

	op := rollout.NewOperation(r.ns(), c.Name, labelSel)
	if err := r.c().Create(ctx, op); err != nil {
		return r.conn.Explain(err, "creating the config operation for cluster "+c.Name)
	}
	p.Operation = op.Name
	if r.format == output.Table {
		r.printf("Started operation %s.\n", op.Name)
	}
	if !cmd.Bool(flagWait) {
		if r.format != output.Table {
			return output.Object(r.out, r.format, p)
		}
		r.printf("Follow it with `ichor operation get %s --watch`; `ichor operation pause %s` stops it after the current step.\n", op.Name, op.Name)
		return nil
	}
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
	if r.format == output.Table {
		msg := ""
		if c := meta.FindStatusCondition(final.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
			msg = ": " + c.Message
		}
		r.printf("Operation %s succeeded%s.\n", final.Name, msg)
	}
	return nil
}

func selectorSuffix(sel string) string {
	if sel == "" {
		return ""
	}
	return " matching " + sel
}

// refuseSecondRollout refuses a config operation while another one for the
// cluster has not finished: that one is followed or resumed instead.
func (r *run) refuseSecondRollout(ctx context.Context, cluster string) error {
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
	}
	o := rollout.Unfinished(cluster, ops.Items)
	if o == nil {
		return nil
	}
	what := "follow it with `ichor operation get " + o.Name + " --watch`"
	if o.Status.Phase == ichorv1alpha1.OperationPaused {
		what = "resume it with `ichor operation resume " + o.Name + "`"
	}
	return fmt.Errorf("config operation %s of cluster %s has not finished (phase %s): %s instead of starting another; nothing was created",
		o.Name, cluster, orUnknown(o.Status.Phase), what)
}

// writePlan prints which machines the rollout works on, in its order, and why.
func writePlan(w io.Writer, p *rolloutPlan) {
	_, _ = fmt.Fprintf(w, "Config rollout of cluster %s%s: %d machine(s), one at a time, control planes first.\n\n",
		p.Cluster, selectorSuffix(p.Selector), len(p.Machines))
	for _, m := range p.Machines {
		what := make([]string, 0, len(m.Rollout))
		for _, k := range m.Rollout {
			switch k {
			case rollout.KindReboot:
				what = append(what, "RebootRequired: cordon, drain, staged apply, reboot, uncordon")
			case rollout.KindAPIServerRestart:
				what = append(what, "APIServerRestartRequired: apply without reboot, the kube-apiserver restarts (no drain)")
			case rollout.KindDrift:
				what = append(what, "Drifted: the node differs from the render and gets it again")
			}
		}
		_, _ = fmt.Fprintf(w, "%s (%s)\n", m.Name, orUnknown(m.Role))
		for _, s := range what {
			_, _ = fmt.Fprintf(w, "  %s\n", s)
		}
		if len(m.Paths) > 0 {
			_, _ = fmt.Fprintf(w, "  waiting changes: %s\n", strings.Join(m.Paths, ", "))
		}
		if len(m.DriftPaths) > 0 {
			_, _ = fmt.Fprintf(w, "  drifted paths:   %s\n", strings.Join(m.DriftPaths, ", "))
		}
		if m.Held != "" {
			_, _ = fmt.Fprintf(w, "  held: it carries %s, so the operation skips it until the annotation is removed\n", m.Held)
		}
	}
	if len(p.Privileged) > 0 {
		_, _ = fmt.Fprintf(w, "\nPrivileged patches of cluster %s (starting this rollout needs %s, which the ichor-admin role holds):\n",
			p.Cluster, guard.PrivilegedPatchPermission("", ""))
		for _, pp := range p.Privileged {
			_, _ = fmt.Fprintf(w, "  %s: %s\n", pp.Name, strings.Join(pp.Paths, ", "))
		}
	}
	_, _ = fmt.Fprintln(w)
}
