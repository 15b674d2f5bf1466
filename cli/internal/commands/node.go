package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:   "node",
		Usage:  "remove nodes",
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
					&cli.BoolFlag{Name: "wait", Usage: "follow the removal until the TalosMachine is gone"},
					&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "how long --wait follows the removal"},
				},
				Action: nodeRemove,
			},
		},
	}
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
	if err := r.checkWritable(ctx); err != nil {
		return err
	}
	m, err := r.getMachine(ctx, name)
	if err != nil {
		return err
	}
	if m.DeletionTimestamp != nil {
		r.printf("machine %s is already being removed\n", name)
		if cmd.Bool("wait") {
			return r.waitGone(ctx, m, cmd.Duration("timeout"))
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
	probe := m.DeepCopy()
	if probe.Annotations == nil {
		probe.Annotations = map[string]string{}
	}
	probe.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = annotationTrue
	if err := refusalError("removing "+name, guard.ValidateMachineDelete(probe, facts)); err != nil {
		return err
	}

	if err := r.confirm(removalPlan(m, cmd.Bool("reboot"), cmd.Bool("force")), name); err != nil {
		return err
	}

	// One update sets the consent and the options, then the delete.
	var marked *ichorv1alpha1.TalosMachine
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := r.c().Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}
		if cur.UID != m.UID {
			return fmt.Errorf("TalosMachine %s was replaced while you confirmed; run the command again", name)
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = annotationTrue
		if cmd.Bool("reboot") {
			cur.Annotations[ichorv1alpha1.RemoveRebootAnnotation] = annotationTrue
		}
		if cmd.Bool("force") {
			cur.Spec.ForceRemove = true
		}
		if err := r.c().Update(ctx, cur); err != nil {
			return err
		}
		marked = cur
		return nil
	})
	if err != nil {
		return r.conn.Explain(err, "marking TalosMachine "+name+" for removal")
	}
	uid := marked.UID
	if err := r.c().Delete(ctx, marked, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		// Take the consent back, so that nothing is left half-done.
		r.undoMark(ctx, marked, m)
		return r.conn.Explain(err, "removing TalosMachine "+name)
	}
	r.printf("machine %s is being removed\n", name)
	if !cmd.Bool("wait") {
		r.printf("follow it with `ichor node remove %s --wait` or `ichor machine list --watch`\n", name)
		return nil
	}
	return r.waitGone(ctx, marked, cmd.Duration("timeout"))
}

// undoMark restores the annotations and forceRemove of before a refused delete.
func (r *run) undoMark(ctx context.Context, marked, before *ichorv1alpha1.TalosMachine) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := r.c().Get(ctx, client.ObjectKeyFromObject(marked), cur); err != nil {
			return err
		}
		for _, a := range []string{ichorv1alpha1.AllowDeleteAnnotation, ichorv1alpha1.RemoveRebootAnnotation} {
			if v, ok := before.Annotations[a]; ok {
				cur.Annotations[a] = v
			} else {
				delete(cur.Annotations, a)
			}
		}
		cur.Spec.ForceRemove = before.Spec.ForceRemove
		return r.c().Update(ctx, cur)
	})
	if err != nil {
		r.warnf("could not take back the %s annotation on %s: %v; remove it by hand", ichorv1alpha1.AllowDeleteAnnotation, marked.Name, err)
	}
}

func removalPlan(m *ichorv1alpha1.TalosMachine, reboot, force bool) string {
	what := fmt.Sprintf("This removes machine %s", m.Name)
	if m.Spec.Role != "" {
		what += " (" + m.Spec.Role + ")"
	}
	what += " from cluster " + m.Spec.ClusterName + ".\n"
	switch {
	case force:
		what += "--force: drain and reset are skipped; the node is NOT wiped and its Node object is deleted."
	case reboot:
		what += "It is drained, leaves etcd if it is a control plane, its STATE and EPHEMERAL partitions are wiped, and it reboots into maintenance mode."
	default:
		what += "It is drained, leaves etcd if it is a control plane, its STATE and EPHEMERAL partitions are wiped, and it powers off."
	}
	return what
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
