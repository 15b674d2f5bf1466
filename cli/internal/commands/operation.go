package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
)

// argOperation is the positional argument of the operation commands.
const argOperation = "OPERATION"

// followInterval is how often a followed operation is read again.
const followInterval = time.Second

func operationCommand() *cli.Command {
	return &cli.Command{
		Name:    "operation",
		Aliases: []string{"op"},
		Usage:   "list, inspect, pause and resume operations (config rollouts, upgrades, ...)",
		Action:  unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:  cmdList,
				Usage: "list the operations of the namespace",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagCluster, Usage: "only the operations of TalosCluster `NAME`"},
				},
				Action: operationList,
			},
			{
				Name:          cmdGet,
				Usage:         "show one operation: phase, step, failure, conditions and per-machine progress",
				ArgsUsage:     argOperation,
				ShellComplete: completeOperations,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: flagWatch, Aliases: []string{"w"}, Usage: "then print a line at each change until the operation " +
						"succeeds, fails or pauses; the exit status is non-zero unless it succeeded"},
				},
				Action: operationGet,
			},
			{
				Name:          "pause",
				Usage:         "pause an operation after its current step (spec.paused); it keeps the cluster lock",
				ArgsUsage:     argOperation,
				ShellComplete: completeOperations,
				Action:        operationPause,
			},
			{
				Name: "resume",
				Usage: "resume a paused operation: re-run the step it failed on (the resume annotation), " +
					"or go on after a pause (spec.paused false)",
				ArgsUsage:     argOperation,
				ShellComplete: completeOperations,
				Flags: []cli.Flag{&cli.BoolFlag{Name: flagOverride, Usage: "go past the overridable check the operation stopped at: a kubernetes operation " +
					"goes on although APIs the target removes are in use (the " + ichorv1alpha1.OverrideRemovedAPIsAnnotation + " annotation); " +
					"any other drains although the evicted pods do not fit on the other nodes (the " + ichorv1alpha1.OverrideDrainCapacityAnnotation +
					" annotation); needs the override verb on the cluster and is recorded"}},
				Action: operationResume,
			},
		},
	}
}

// completeOperations offers the operation names of the namespace.
func completeOperations(ctx context.Context, cmd *cli.Command) {
	r, err := connected(cmd)
	if err != nil {
		return
	}
	list := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return
	}
	for _, o := range list.Items {
		_, _ = fmt.Fprintln(r.out, o.Name)
	}
}

// progress is "done/total": the machines done or skipped (they needed
// nothing) of those the operation covers; "" before it has chosen them.
func progress(op *ichorv1alpha1.TalosOperation) string {
	if len(op.Status.Machines) == 0 {
		return ""
	}
	done := 0
	for _, m := range op.Status.Machines {
		if m.Phase == ichorv1alpha1.MachineDone || m.Phase == ichorv1alpha1.MachineSkipped {
			done++
		}
	}
	return strconv.Itoa(done) + "/" + strconv.Itoa(len(op.Status.Machines))
}

func operationRow(op *ichorv1alpha1.TalosOperation, now time.Time) []string {
	return []string{op.Name, op.Spec.ClusterName, op.Spec.Type, op.Status.Phase, op.Status.Step, progress(op),
		output.Age(op.CreationTimestamp.Time, now)}
}

func operationList(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	list := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosOperations in namespace "+r.ns())
	}
	cluster := cmd.String(flagCluster)
	items := make([]ichorv1alpha1.TalosOperation, 0, len(list.Items))
	for i := range list.Items {
		if cluster == "" || list.Items[i].Spec.ClusterName == cluster {
			items = append(items, list.Items[i])
		}
	}
	if r.format != output.Table {
		for i := range items {
			items[i].ManagedFields = nil
		}
		return output.Object(r.out, r.format, &ichorv1alpha1.TalosOperationList{
			TypeMeta: metav1.TypeMeta{APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "TalosOperationList"}, Items: items})
	}
	if len(items) == 0 {
		r.printf("No operations in namespace %s%s.\n", r.ns(), clusterSuffix(cluster))
		return nil
	}
	t := &output.Rows{Header: []string{colName, "CLUSTER", colType, colPhase, colStep, "PROGRESS", colAge}}
	now := time.Now()
	for i := range items {
		t.Add(operationRow(&items[i], now)...)
	}
	return t.Write(r.out)
}

// getOperation reads an operation; when it does not exist, the error lists those that do.
func (r *run) getOperation(ctx context.Context, name string) (*ichorv1alpha1.TalosOperation, error) {
	op := &ichorv1alpha1.TalosOperation{}
	err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: name}, op)
	if err == nil {
		return op, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, r.conn.Explain(err, fmt.Sprintf("reading TalosOperation %s/%s", r.ns(), name))
	}
	list := &ichorv1alpha1.TalosOperationList{}
	if lerr := r.c().List(ctx, list, client.InNamespace(r.ns())); lerr != nil {
		return nil, r.conn.Explain(lerr, "listing TalosOperations in namespace "+r.ns())
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("TalosOperation %q not found: namespace %s has no operations; is the namespace right (-n NAMESPACE)?", name, r.ns())
	}
	names := make([]string, 0, len(list.Items))
	for _, o := range list.Items {
		names = append(names, o.Name)
	}
	return nil, fmt.Errorf("TalosOperation %q not found in namespace %s; the operations there are: %s (`ichor operation list`)",
		name, r.ns(), strings.Join(names, ", "))
}

func operationGet(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one OPERATION"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	op, err := r.getOperation(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	if r.format != output.Table {
		if err := r.printOperationObject(op, cmd.Bool(flagWatch)); err != nil || !cmd.Bool(flagWatch) {
			return err
		}
	} else if err := r.printOperation(op, time.Now()); err != nil || !cmd.Bool(flagWatch) {
		return err
	}
	if r.format == output.Table {
		r.printf("\nChanges (Ctrl-C stops):\n")
	}
	final, err := r.followOperation(ctx, op, r.format != output.Table)
	if err != nil || final == nil {
		return err // nil final: the person stopped the watch
	}
	return operationOutcome(final)
}

// printOperationObject prints op as YAML or JSON; in a stream, YAML
// documents are separated.
func (r *run) printOperationObject(op *ichorv1alpha1.TalosOperation, stream bool) error {
	op.ManagedFields = nil
	op.APIVersion, op.Kind = ichorv1alpha1.GroupVersion.String(), "TalosOperation"
	if stream && r.format == output.YAML {
		r.printf("---\n")
	}
	return output.Object(r.out, r.format, op)
}

func formatTime(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func (r *run) printOperation(op *ichorv1alpha1.TalosOperation, now time.Time) error {
	b := &output.Block{}
	b.Add("Name", op.Name)
	b.Add("Namespace", op.Namespace)
	b.Add("Cluster", op.Spec.ClusterName)
	b.Add("Type", op.Spec.Type)
	machines := "all of the cluster"
	if op.Spec.MachineSelector != nil {
		machines = "selector " + metav1.FormatLabelSelector(op.Spec.MachineSelector)
	}
	b.Add("Machines", machines)
	b.Add("Phase", op.Status.Phase)
	b.Add("Step", op.Status.Step)
	paused := "no"
	if op.Spec.Paused {
		paused = "yes (spec.paused; `ichor operation resume " + op.Name + "` goes on)"
	}
	b.Add("Paused", paused)
	b.Add("Failed step", op.Status.FailedStep)
	b.Add("Failure", op.Status.FailureReason)
	if tok := op.Annotations[ichorv1alpha1.ResumeAnnotation]; op.Status.FailedStep != "" && tok != "" && tok != op.Status.LastHandledResume {
		b.Add("Resume", "requested ("+tok+"), not yet acted on by the controller")
	}
	if p := progress(op); p != "" {
		b.Add("Progress", p+" machines done")
	} else {
		b.Add("Progress", "")
	}
	b.Add("Started", formatTime(op.Status.StartedAt))
	b.Add("Completed", formatTime(op.Status.CompletedAt))
	b.Add("Age", output.Age(op.CreationTimestamp.Time, now))
	if err := b.Write(r.out); err != nil {
		return err
	}
	if len(op.Status.Conditions) > 0 {
		t := conditionsTable(op.Status.Conditions)
		r.printf("\nConditions:\n")
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	if len(op.Status.Stages) > 0 {
		r.printf("\nStages:\n")
		t := &output.Rows{Header: []string{colStage, colPhase, colStep, colMessage}}
		for _, st := range op.Status.Stages {
			t.Add(st.Name, st.Phase, st.Step, st.Message)
		}
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	if len(op.Status.RemovedAPIs) > 0 {
		r.printf("\nAPIs in use that the target removes:\n")
		t := &output.Rows{Header: []string{"API", "REMOVED IN", "REPORTED BY"}}
		for _, a := range op.Status.RemovedAPIs {
			t.Add(strings.TrimSuffix(kubeupgrade.DescribeRemovedAPI(a), " (removed in "+a.RemovedRelease+")"), a.RemovedRelease, strings.Join(a.ControlPlanes, ","))
		}
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	if len(op.Status.Machines) > 0 {
		r.printf("\nMachines:\n")
		staged := op.Spec.Type == ichorv1alpha1.OperationKubernetes
		header := []string{colName, colRole, colPhase, colStep, colMessage}
		if staged {
			header = []string{colName, colRole, colStage, colPhase, colStep, colMessage}
		}
		t := &output.Rows{Header: header}
		for _, m := range op.Status.Machines {
			if staged {
				t.Add(m.Name, m.Role, m.Stage, m.Phase, m.Step, m.Message)
				continue
			}
			t.Add(m.Name, m.Role, m.Phase, m.Step, m.Message)
		}
		if err := t.Write(r.out); err != nil {
			return err
		}
	}
	return nil
}

// resumePending: a resume was asked for (a new annotation token, or
// spec.paused cleared) that the controller has not acted on yet.
func resumePending(op *ichorv1alpha1.TalosOperation) bool {
	if op.Status.FailedStep != "" {
		tok := op.Annotations[ichorv1alpha1.ResumeAnnotation]
		return tok != "" && tok != op.Status.LastHandledResume
	}
	return !op.Spec.Paused
}

// settled: the operation succeeded, failed or is paused, and nobody has
// asked it to go on since.
func settled(op *ichorv1alpha1.TalosOperation) bool {
	switch op.Status.Phase {
	case ichorv1alpha1.OperationSucceeded, ichorv1alpha1.OperationFailed:
		return true
	case ichorv1alpha1.OperationPaused:
		return !resumePending(op)
	}
	return false
}

func completedOperation(op *ichorv1alpha1.TalosOperation) bool {
	return rollout.Finished(op)
}

// operationOutcome is nil for a success, else an error that says what happened and what to do.
func operationOutcome(op *ichorv1alpha1.TalosOperation) error {
	ready := ""
	if c := meta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
		ready = c.Message
	}
	switch {
	case op.Status.Phase == ichorv1alpha1.OperationSucceeded:
		return nil
	case op.Status.Phase == ichorv1alpha1.OperationFailed:
		return fmt.Errorf("operation %s failed: %s; a failed operation does not go on: fix the cause and start a new one", op.Name, orUnknown(ready))
	case op.Status.FailedStep != "":
		return fmt.Errorf("operation %s paused on a failed step (%s): %s", op.Name, op.Status.FailedStep, op.Status.FailureReason)
	default:
		return fmt.Errorf("operation %s is paused (spec.paused) after step %s; `ichor operation resume %s` lets it go on",
			op.Name, orUnknown(op.Status.Step), op.Name)
	}
}

// currentMachine is the machine the operation works on (or failed on).
func currentMachine(op *ichorv1alpha1.TalosOperation) *ichorv1alpha1.MachineProgress {
	for i := range op.Status.Machines {
		if p := op.Status.Machines[i].Phase; p == ichorv1alpha1.MachineInProgress || p == ichorv1alpha1.MachineFailed {
			return &op.Status.Machines[i]
		}
	}
	return nil
}

// followOperation reads the operation every followInterval and prints a
// line (or, with -o yaml|json, the object) at each change, until it has
// settled (or a stop function says to stop); it returns that operation, or
// nil when ctx ended first. printed says that op itself was printed already.
func (r *run) followOperation(ctx context.Context, op *ichorv1alpha1.TalosOperation, printed bool,
	stop ...func(*ichorv1alpha1.TalosOperation) bool,
) (*ichorv1alpha1.TalosOperation, error) {
	table := &output.Rows{Header: []string{colPhase, colStep, "PROGRESS", argMachine, "MACHINE STEP", colMessage}}
	// Fixed widths wide enough for the usual values, so that the lines align.
	table.Add("AwaitingCredentials", "wait-apiserver-back", "100/100", strings.Repeat("x", 16), "wait-apiserver-back", "")
	headerDone := false
	lastLine, lastVersion := "", ""
	if printed {
		lastVersion = op.ResourceVersion
	}
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	// Since when the API server has not answered: an operation may restart
	// it (a kube-apiserver rollout of a one-control-plane cluster that runs
	// Ichor), so following waits for it, up to followUnreachable.
	var unreachableSince time.Time
	for {
		if op.ResourceVersion != lastVersion {
			lastVersion = op.ResourceVersion
			if r.format != output.Table {
				if err := r.printOperationObject(op, true); err != nil {
					return nil, err
				}
			} else {
				cells := []string{op.Status.Phase, op.Status.Step, progress(op), "", "", ""}
				if op.Status.Phase == "" {
					cells[0], cells[5] = ichorv1alpha1.OperationPending, "waiting for the controller to take it up"
				}
				if mp := currentMachine(op); mp != nil {
					cells[3], cells[4], cells[5] = mp.Name, mp.Step, mp.Message
				}
				if op.Status.FailureReason != "" {
					cells[5] = op.Status.FailureReason
				} else if cells[5] == "" {
					if c := meta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
						cells[5] = c.Message
					}
				}
				if line := table.Line(cells); line != lastLine {
					if !headerDone {
						r.printf("%s\n", table.Line(table.Header))
						headerDone = true
					}
					r.printf("%s\n", line)
					lastLine = line
				}
			}
		}
		if settled(op) || slices.ContainsFunc(stop, func(f func(*ichorv1alpha1.TalosOperation) bool) bool { return f != nil && f(op) }) {
			return op, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-tick.C:
		}
		cur := &ichorv1alpha1.TalosOperation{}
		err := r.c().Get(ctx, client.ObjectKeyFromObject(op), cur)
		switch {
		case ctx.Err() != nil:
			return nil, nil
		case apierrors.IsNotFound(err) || (err == nil && cur.UID != op.UID):
			return nil, fmt.Errorf("operation %s was deleted while it was followed", op.Name)
		case err != nil && unreachable(err):
			if unreachableSince.IsZero() {
				unreachableSince = time.Now()
				r.warnf("the API server does not answer (%v); still following operation %s (an operation may restart it)", err, op.Name)
			}
			if time.Since(unreachableSince) < followUnreachable {
				continue
			}
			return nil, r.conn.Explain(err, "following operation "+op.Name)
		case err != nil:
			return nil, r.conn.Explain(err, "following operation "+op.Name)
		}
		if !unreachableSince.IsZero() {
			unreachableSince = time.Time{}
			r.warnf("the API server answers again")
		}
		op = cur
	}
}

// followUnreachable is how long following an operation waits for an API
// server that does not answer.
const followUnreachable = 3 * time.Minute

// unreachable reports whether err says the API server did not answer (it
// was down, restarting or overloaded) rather than that it refused.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
}

// updateOperation applies change to a fresh read of the operation and
// updates it; a conflict (someone else wrote it meanwhile) is retried on a
// new read. change returns an error to refuse, and writes nothing then.
func (r *run) updateOperation(ctx context.Context, name string, change func(op *ichorv1alpha1.TalosOperation) error) (*ichorv1alpha1.TalosOperation, error) {
	var out *ichorv1alpha1.TalosOperation
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		op, err := r.getOperation(ctx, name)
		if err != nil {
			return err
		}
		if err := change(op); err != nil {
			return err
		}
		if err := r.c().Update(ctx, op); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return r.conn.Explain(err, "updating TalosOperation "+name)
		}
		out = op
		return nil
	})
	return out, err
}

// errUnchanged ends an update that has nothing to write.
var errUnchanged = errors.New("unchanged")

func operationPause(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one OPERATION"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	name := cmd.Args().First()
	op, err := r.updateOperation(ctx, name, func(op *ichorv1alpha1.TalosOperation) error {
		if completedOperation(op) {
			return fmt.Errorf("operation %s has %s; a completed operation cannot be paused; nothing was changed",
				name, strings.ToLower(op.Status.Phase))
		}
		if op.Spec.Paused {
			return errUnchanged
		}
		op.Spec.Paused = true
		return nil
	})
	if errors.Is(err, errUnchanged) {
		r.printf("operation %s is already paused (spec.paused); nothing was changed\n", name)
		return nil
	}
	if err != nil {
		return err
	}
	if r.format != output.Table {
		return r.printOperationObject(op, false)
	}
	r.printf("operation %s pauses after its current step and keeps the cluster lock; `ichor operation resume %s` lets it go on\n", name, name)
	return nil
}

// resumeToken is a new value for the resume annotation: the time, made
// different from the one the operation carries.
func resumeToken(op *ichorv1alpha1.TalosOperation) string {
	now := time.Now().UTC()
	tok := now.Format(time.RFC3339Nano)
	for tok == op.Annotations[ichorv1alpha1.ResumeAnnotation] || tok == op.Status.LastHandledResume {
		now = now.Add(time.Nanosecond)
		tok = now.Format(time.RFC3339Nano)
	}
	return tok
}

func operationResume(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one OPERATION"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	name := cmd.Args().First()
	var did []string
	op, err := r.updateOperation(ctx, name, func(op *ichorv1alpha1.TalosOperation) error {
		did = did[:0]
		if completedOperation(op) {
			return fmt.Errorf("operation %s has %s; a completed operation cannot be resumed; nothing was changed (start a new one instead)",
				name, strings.ToLower(op.Status.Phase))
		}
		if op.Status.FailedStep == "" && !op.Spec.Paused {
			return fmt.Errorf("operation %s is not paused (phase %s): it has no failed step and spec.paused is false; nothing was changed",
				name, orUnknown(op.Status.Phase))
		}
		if cmd.Bool(flagOverride) && !op.Status.Overridable {
			return fmt.Errorf("--override goes past the check a failed step stopped at (removed APIs in use, the drain capacity check); "+
				"operation %s did not stop at one (status.overridable is false); nothing was changed", name)
		}
		if op.Status.FailedStep != "" {
			if op.Annotations == nil {
				op.Annotations = map[string]string{}
			}
			tok := resumeToken(op)
			op.Annotations[ichorv1alpha1.ResumeAnnotation] = tok
			did = append(did, "re-runs its failed step "+op.Status.FailedStep)
			if cmd.Bool(flagOverride) {
				key, what := guard.OverrideAnnotationOf(op)
				op.Annotations[key] = tok
				did = append(did, "goes past "+what+" (the override is recorded on the cluster)")
			}
		}
		if op.Spec.Paused {
			op.Spec.Paused = false
			did = append(did, "is no longer paused (spec.paused false)")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if r.format != output.Table {
		return r.printOperationObject(op, false)
	}
	r.printf("operation %s %s; follow it with `ichor operation get %s --watch`\n", name, strings.Join(did, " and "), name)
	return nil
}
