package commands

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
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
			&cli.StringFlag{Name: flagCluster, Usage: "TalosCluster `NAME` (default: the only one in the namespace)"},
			&cli.StringSliceFlag{Name: "machine", Usage: "only machine `NAME` (repeatable); refused: machines carry no label naming them, use --selector"},
			&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "only the TalosMachines whose labels match `SELECTOR` (as kubectl -l)"},
			&cli.BoolFlag{Name: flagWait, Usage: "follow the operation until it ends; the exit status is non-zero unless it succeeded"},
		},
		Action: configApply,
	}
}

// Rollout kinds of a waiting machine, as the plan prints them.
const (
	rolloutReboot    = "reboot"
	rolloutAPIServer = "kube-apiserver-restart"
	rolloutDrift     = "drift"
)

// waitingMachine is one machine the rollout would work on.
type waitingMachine struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Rollout lists what the operation does to it: reboot, kube-apiserver-restart, drift.
	Rollout []string `json:"rollout"`
	// Paths are status.rebootRequiredPaths: the rendered changes that wait.
	Paths []string `json:"rebootRequiredPaths,omitempty"`
	// DriftPaths are status.driftPaths: where the node differs from the render.
	DriftPaths []string `json:"driftPaths,omitempty"`
	// Held is the hold annotation that makes the operation skip it, if any.
	Held string `json:"heldBy,omitempty"`
}

// rolloutPlan is what `config apply` prints (and, with -o yaml|json, writes).
type rolloutPlan struct {
	Cluster   string           `json:"cluster"`
	Selector  string           `json:"selector,omitempty"`
	Machines  []waitingMachine `json:"machines"`
	Operation string           `json:"operation,omitempty"`
}

// configuredForRollout mirrors the operation's own choice of machines
// (controller/internal/controller/operation, configured): approved,
// addressed, provisioned and not being removed.
func configuredForRollout(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.Spec.Address != "" &&
		meta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition) && m.DeletionTimestamp == nil
}

// waitingFor reads from a machine's status what a config operation would do to it.
func waitingFor(m *ichorv1alpha1.TalosMachine) (waitingMachine, bool) {
	w := waitingMachine{Name: m.Name, Role: m.Spec.Role, Paths: m.Status.RebootRequiredPaths, DriftPaths: m.Status.DriftPaths}
	cond := func(t string) bool { return meta.IsStatusConditionTrue(m.Status.Conditions, t) }
	switch {
	case cond(ichorv1alpha1.RebootRequiredCondition):
		w.Rollout = append(w.Rollout, rolloutReboot)
	case cond(ichorv1alpha1.APIServerRestartRequiredCondition):
		w.Rollout = append(w.Rollout, rolloutAPIServer)
	case len(w.Paths) > 0:
		// Paths without their condition: the status is being rewritten; the
		// operation decides the mode from the node itself.
		w.Rollout = append(w.Rollout, rolloutReboot)
	}
	if cond(ichorv1alpha1.DriftedCondition) || len(w.DriftPaths) > 0 {
		w.Rollout = append(w.Rollout, rolloutDrift)
	}
	for _, a := range []string{ichorv1alpha1.HoldUpgradeAnnotation, ichorv1alpha1.HoldApplyAnnotation} {
		if _, ok := m.Annotations[a]; ok {
			w.Held = a
			break
		}
	}
	return w, len(w.Rollout) > 0
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
	sel := labels.Everything()
	var labelSel *metav1.LabelSelector
	if s := cmd.String("selector"); s != "" {
		ls, err := metav1.ParseToLabelSelector(s)
		if err != nil {
			return fmt.Errorf("--selector %q is not a label selector (%w): write it as kubectl -l does, e.g. zone=a or 'tier in (edge,core)'", s, err)
		}
		if sel, err = metav1.LabelSelectorAsSelector(ls); err != nil {
			return fmt.Errorf("--selector %q: %w", s, err)
		}
		labelSel = ls
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	if err := r.checkWritable(ctx); err != nil {
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
	p := rolloutPlan{Cluster: c.Name, Machines: []waitingMachine{}}
	if labelSel != nil {
		p.Selector = metav1.FormatLabelSelector(labelSel)
	}
	matched := 0
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName != c.Name || !sel.Matches(labels.Set(m.Labels)) {
			continue
		}
		matched++
		if !configuredForRollout(m) {
			continue
		}
		if w, ok := waitingFor(m); ok {
			p.Machines = append(p.Machines, w)
		}
	}
	if labelSel != nil && matched == 0 {
		return fmt.Errorf("--selector %s matches no TalosMachine of cluster %s (it matches the machines' metadata labels: "+
			"`kubectl get talosmachines -n %s --show-labels`); nothing was created", p.Selector, c.Name, r.ns())
	}
	// The operation's order: control planes first, then by name.
	sort.SliceStable(p.Machines, func(i, j int) bool {
		a, b := p.Machines[i], p.Machines[j]
		if ca, cb := a.Role == ichorv1alpha1.RoleControlPlane, b.Role == ichorv1alpha1.RoleControlPlane; ca != cb {
			return ca
		}
		return a.Name < b.Name
	})

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

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns(), GenerateName: "config-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName:     c.Name,
			Type:            ichorv1alpha1.OperationConfig,
			MachineSelector: labelSel,
		},
	}
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
	for i := range ops.Items {
		o := &ops.Items[i]
		if o.Spec.ClusterName != cluster || o.Spec.Type != ichorv1alpha1.OperationConfig || completedOperation(o) || o.DeletionTimestamp != nil {
			continue
		}
		what := "follow it with `ichor operation get " + o.Name + " --watch`"
		if o.Status.Phase == ichorv1alpha1.OperationPaused {
			what = "resume it with `ichor operation resume " + o.Name + "`"
		}
		return fmt.Errorf("config operation %s of cluster %s has not finished (phase %s): %s instead of starting another; nothing was created",
			o.Name, cluster, orUnknown(o.Status.Phase), what)
	}
	return nil
}

// writePlan prints which machines the rollout works on, in its order, and why.
func writePlan(w io.Writer, p *rolloutPlan) {
	_, _ = fmt.Fprintf(w, "Config rollout of cluster %s%s: %d machine(s), one at a time, control planes first.\n\n",
		p.Cluster, selectorSuffix(p.Selector), len(p.Machines))
	for _, m := range p.Machines {
		what := make([]string, 0, len(m.Rollout))
		for _, k := range m.Rollout {
			switch k {
			case rolloutReboot:
				what = append(what, "RebootRequired: cordon, drain, staged apply, reboot, uncordon")
			case rolloutAPIServer:
				what = append(what, "APIServerRestartRequired: apply without reboot, the kube-apiserver restarts (no drain)")
			case rolloutDrift:
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
	_, _ = fmt.Fprintln(w)
}
