package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
	"github.com/maeshinshin/ichor/contracts/pkg/removal"
)

func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:   "node",
		Usage:  "remove, reboot, shut down or reset nodes; download a support bundle or a packet capture of one",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name: "remove",
				Usage: "remove a machine from its cluster: drain, leave etcd, reset STATE and EPHEMERAL, delete the Node; " +
					"the machine comes back as pending",
				ArgsUsage:     argMachine,
				ShellComplete: completeMachines,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "reboot", Usage: "reboot the node after the reset, so it comes back in maintenance mode at once (default: power off)"},
					&cli.BoolFlag{Name: "force", Usage: "dead hardware: skip drain and reset (the node is not wiped)"},
					&cli.BoolFlag{Name: flagDryRun, Usage: "print the steps, the effects on the cluster and any refusal, and change nothing"},
					&cli.BoolFlag{Name: "wait", Usage: "follow the removal until the TalosMachine is gone"},
					&cli.DurationFlag{Name: flagTimeout, Value: 30 * time.Minute, Usage: "how long --wait follows the removal"},
				},
				Action: nodeRemove,
			},
			nodeActionCommand(ichorv1alpha1.NodeActionReboot,
				"reboot a node: storage evacuated, cordoned and drained, rebooted, uncordoned once Ready (a node operation under the cluster lock)"),
			nodeActionCommand(ichorv1alpha1.NodeActionShutdown,
				"power a node off: storage evacuated, then Talos's own shutdown sequence drains it; power it on to bring it back"),
			nodeActionCommand(ichorv1alpha1.NodeActionReset,
				"reset a node: storage evacuated, cordoned and drained, STATE and EPHEMERAL wiped; the machine stays approved and is installed again "+
					"from maintenance mode (needs the reset-node verb and override on the cluster)"),
			supportBundleCommand(),
			captureCommand(),
		},
	}
}

func nodeActionCommand(action, usage string) *cli.Command {
	flags := []cli.Flag{
		&cli.BoolFlag{Name: flagDryRun, Usage: usageDryRun},
		&cli.BoolFlag{Name: flagWait, Usage: "follow the operation until it ends"},
		&cli.DurationFlag{Name: flagTimeout, Value: 30 * time.Minute, Usage: "how long --wait follows the operation"},
	}
	if action == ichorv1alpha1.NodeActionReset {
		flags = append(flags, &cli.StringFlag{Name: flagWipeMode, Value: nodeop.WipeStateEphemeral,
			Usage: "what the reset wipes: state-ephemeral (STATE and EPHEMERAL), system-disk (the whole system disk: " +
				"the node must boot its install media again) or all (the system disk and every user disk)"})
	}
	return &cli.Command{
		Name:          action,
		Usage:         usage,
		ArgsUsage:     argMachine,
		ShellComplete: completeMachines,
		Flags:         flags,
		Action:        func(ctx context.Context, cmd *cli.Command) error { return nodeAction(ctx, cmd, action) },
	}
}

// The flags of the node commands and `ichor cluster shutdown`.
const (
	// flagWipeMode is the wipe mode of `ichor node reset`.
	flagWipeMode = "wipe-mode"
	// flagDryRun prints the plan and changes nothing.
	flagDryRun = "dry-run"
	// usageDryRun is flagDryRun's help text.
	usageDryRun = "print the steps and any refusal, and change nothing"
)

// nodeActionText says what a node operation does, step by step (nodeop.NodeSteps).
func nodeActionText(m *ichorv1alpha1.TalosMachine, action, wipeMode string, notices smallClusterNotices, refusals []guard.Refusal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "This starts a node operation: %s machine %s", action, m.Name)
	if m.Spec.Role != "" {
		fmt.Fprintf(&b, " (%s)", m.Spec.Role)
	}
	fmt.Fprintf(&b, " of cluster %s, under the cluster lock.\nSteps:\n", m.Spec.ClusterName)
	for i, st := range nodeop.NodeSteps(m, action, wipeMode) {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, st)
	}
	notices.write(&b)
	writeRefusals(&b, refusals)
	return strings.TrimSuffix(b.String(), "\n")
}

// smallClusterNotices is what the small-cluster rules say before a
// disruptive operation (guard, smallcluster.go): the downtime of a single
// node, which the confirmation asks about, and the warnings.
type smallClusterNotices struct {
	downtime string
	warnings []string
}

// warnIfUnasked prints the notices when --yes skips the confirmation that
// would have shown them.
func (r *run) warnIfUnasked(n smallClusterNotices) {
	if !r.cmd.Bool(flagYes) {
		return
	}
	if n.downtime != "" {
		r.warnf("%s; --yes accepts it", n.downtime)
	}
	for _, w := range n.warnings {
		r.warnf("%s", w)
	}
}

func (n smallClusterNotices) write(b *strings.Builder) {
	if n.downtime != "" {
		fmt.Fprintf(b, "Downtime: %s. Confirming accepts it (the %s annotation).\n", n.downtime, ichorv1alpha1.AcceptDowntimeAnnotation)
	}
	if len(n.warnings) > 0 {
		b.WriteString("Warnings:\n")
		for _, w := range n.warnings {
			fmt.Fprintf(b, "  - %s\n", w)
		}
	}
}

// writeRefusals lists the refusals of a plan under "Refused:".
func writeRefusals(b *strings.Builder, refusals []guard.Refusal) {
	if len(refusals) == 0 {
		return
	}
	b.WriteString("Refused:\n")
	for _, rf := range refusals {
		fmt.Fprintf(b, "  - %s\n", rf.Error())
	}
}

// nodeAction creates a node operation after the shared checks and a typed
// confirmation (the machine's name), and follows it with --wait.
func nodeAction(ctx context.Context, cmd *cli.Command, action string) error {
	if err := requireOneArg(cmd, "one MACHINE"); err != nil {
		return err
	}
	wipeMode := ""
	if action == ichorv1alpha1.NodeActionReset {
		wipeMode = cmd.String(flagWipeMode)
		if msg := nodeop.CheckAction(action, wipeMode, "the action", "--"+flagWipeMode); msg != "" {
			return errors.New(msg + "; nothing was changed")
		}
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	name := cmd.Args().First()
	dryRun := cmd.Bool(flagDryRun)
	m, err := r.getMachine(ctx, name)
	if err != nil {
		return err
	}
	op := nodeop.Node(m, action, wipeMode)
	facts, err := guard.LoadOperationFacts(ctx, r.c(), op)
	if err != nil {
		return r.conn.Explain(err, "reading TalosCluster "+m.Spec.ClusterName+" and its TalosMachines")
	}
	refusals := guard.CheckOperation(op, facts)
	notices := smallClusterNotices{downtime: guard.OperationDowntime(op, facts.Approved), warnings: guard.OperationWarnings(op, facts, time.Now())}
	if dryRun {
		r.printf("%s\n", nodeActionText(m, action, wipeMode, notices, refusals))
		if err := refusalError(action+" of "+name, refusals); err != nil {
			return err
		}
		r.printf("The checks allow this now (the webhook also checks your verbs). Nothing was changed (--dry-run).\n")
		return nil
	}
	if err := refusalError(action+" of "+name, refusals); err != nil {
		return err
	}
	r.warnIfUnasked(notices)
	if err := r.confirm(nodeActionText(m, action, wipeMode, notices, nil), name); err != nil {
		return err
	}
	if notices.downtime != "" {
		guard.AcceptDowntime(op, "true") // the person confirmed the text that says so
	}
	if err := r.c().Create(ctx, op); err != nil {
		return r.conn.Explain(err, "creating the node operation for "+name)
	}
	r.printf("Started operation %s.\n", op.Name)
	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor operation get %s --watch`.\n", op.Name)
		return nil
	}
	return r.waitOperation(ctx, cmd, op, nil)
}

// waitOperation follows op until it ends (or until stop says so) and says
// how it ended.
func (r *run) waitOperation(ctx context.Context, cmd *cli.Command, op *ichorv1alpha1.TalosOperation, stop func(*ichorv1alpha1.TalosOperation) bool) error {
	wctx, cancel := context.WithTimeout(ctx, cmd.Duration(flagTimeout))
	defer cancel()
	final, err := r.followOperation(wctx, op, false, stop)
	if err != nil {
		return err
	}
	if final == nil {
		return fmt.Errorf("stopped following operation %s; it goes on: `ichor operation get %s --watch`", op.Name, op.Name)
	}
	if stop != nil && stop(final) {
		return nil
	}
	if err := operationOutcome(final); err != nil {
		return err
	}
	msg := ""
	if c := meta.FindStatusCondition(final.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
		msg = ": " + c.Message
	}
	r.printf("Operation %s succeeded%s.\n", final.Name, msg)
	return nil
}

func nodeRemove(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one MACHINE"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	name := cmd.Args().First()
	dryRun := cmd.Bool(flagDryRun)
	m, err := r.getMachine(ctx, name)
	if err != nil {
		return err
	}
	opts := removal.Options{Reboot: cmd.Bool("reboot"), Force: cmd.Bool("force")}
	if dryRun {
		return r.previewRemoval(ctx, m, opts)
	}
	if m.DeletionTimestamp != nil {
		r.printf("machine %s is already being removed\n", name)
		if cmd.Bool("wait") {
			return r.waitGone(ctx, m, cmd.Duration(flagTimeout))
		}
		return nil
	}
	// The shared deletion checks (last control plane, quorum, last worker),
	// before anything is written. The annotation is about to be set, so the
	// protection itself is not checked here.
	facts, err := r.machineFacts(ctx, m)
	if err != nil {
		return err
	}
	plan := removal.Plan(m, facts, opts)
	if err := refusalError("removing "+name, plan.Refusals); err != nil {
		return err
	}

	if err := r.confirm(removalText(m, plan, opts), name); err != nil {
		return err
	}

	// One update sets the consent and the options, then the delete; a
	// refused delete takes the consent back (the shared removal write).
	res, err := removal.Remove(ctx, r.c(), m, opts)
	if res.UndoErr != nil {
		r.warnf("could not take back the %s annotation on %s: %v; remove it by hand", ichorv1alpha1.AllowDeleteAnnotation, name, res.UndoErr)
	}
	if errors.Is(err, removal.ErrReplaced) {
		return fmt.Errorf("TalosMachine %s was replaced while you confirmed; run the command again", name)
	}
	if err != nil {
		return r.conn.Explain(err, "removing TalosMachine "+name)
	}
	marked := res.Marked
	r.printf("machine %s is being removed\n", name)
	if !cmd.Bool("wait") {
		r.printf("follow it with `ichor node remove %s --wait` or `ichor machine list --watch`\n", name)
		return nil
	}
	return r.waitGone(ctx, marked, cmd.Duration(flagTimeout))
}

// previewRemoval prints what removing m would do (`node remove --dry-run`)
// and writes nothing; a removal the checks refuse is an error, after the
// steps and effects.
func (r *run) previewRemoval(ctx context.Context, m *ichorv1alpha1.TalosMachine, opts removal.Options) error {
	facts, err := r.machineFacts(ctx, m)
	if err != nil {
		return err
	}
	plan := removal.Plan(m, facts, opts)
	r.printf("%s\n", removalText(m, plan, opts))
	if !plan.Allowed {
		return refusalError("removing "+m.Name, plan.Refusals)
	}
	r.printf("The checks allow this removal now. Nothing was changed (--dry-run).\n")
	return nil
}

// removalText is the shared removal plan as the CLI prints it: what is
// removed, the steps in order, the effects, and the refusals if any.
func removalText(m *ichorv1alpha1.TalosMachine, plan removal.Preview, opts removal.Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "This removes machine %s", m.Name)
	if m.Spec.Role != "" {
		fmt.Fprintf(&b, " (%s)", m.Spec.Role)
	}
	fmt.Fprintf(&b, " from cluster %s.\n", m.Spec.ClusterName)
	if opts.Force {
		b.WriteString("--force: drain and reset are skipped; the node is NOT wiped and its Node object is deleted.\n")
	}
	b.WriteString("Steps:\n")
	for i, s := range plan.Steps {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, s)
	}
	b.WriteString("Effects:\n")
	for _, e := range plan.Effects {
		fmt.Fprintf(&b, "  - %s\n", e)
	}
	if len(plan.Refusals) > 0 {
		b.WriteString("Refused:\n")
		for _, rf := range plan.Refusals {
			fmt.Fprintf(&b, "  - %s\n", rf.Error())
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// waitGone follows a machine until it no longer exists, printing each new
// stage and Ready message.
func (r *run) waitGone(ctx context.Context, m *ichorv1alpha1.TalosMachine, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		cur := &ichorv1alpha1.TalosMachine{}
		err := r.c().Get(ctx, client.ObjectKeyFromObject(m), cur)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && cur.UID != m.UID):
			r.printf("machine %s removed\n", m.Name)
			return nil
		case err != nil && ctx.Err() == nil:
			return r.conn.Explain(err, "following the removal of "+m.Name)
		case err == nil:
			line := "stage " + orUnknown(cur.Status.Stage)
			if c := meta.FindStatusCondition(cur.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil && c.Message != "" {
				line += ": " + c.Message
			}
			if line != last {
				r.printf("  %s\n", line)
				last = line
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("machine %s is still being removed after %s; follow it with `ichor machine get %s`", m.Name, timeout, m.Name)
		case <-tick.C:
		}
	}
}
