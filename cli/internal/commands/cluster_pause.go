package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
)

// argCluster is the positional argument of the cluster commands.
const argCluster = "CLUSTER"

// pausedText is the Paused line of `cluster get`: since when, from the
// Paused condition the controller sets once it stopped acting.
func pausedText(c *ichorv1alpha1.TalosCluster) string {
	if !c.Spec.Paused {
		return "no"
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.PausedCondition); cond != nil && cond.Status == "True" {
		return "yes, since " + cond.LastTransitionTime.UTC().Format(time.RFC3339)
	}
	return "yes (the controller has not confirmed it yet)"
}

// clusterRequest runs one of the shared cluster writes on the named cluster
// and says what a refusal means.
func (r *run) clusterRequest(ctx context.Context, name, what string,
	do func(context.Context, client.Client, client.ObjectKey) (clusterreq.Result, error),
) (clusterreq.Result, error) {
	c, err := r.getCluster(ctx, name)
	if err != nil {
		return clusterreq.Result{}, err
	}
	res, err := do(ctx, r.c(), client.ObjectKeyFromObject(c))
	var rf *clusterreq.Refused
	if errors.As(err, &rf) {
		return res, refusalError(what+" "+c.Name, rf.Refusals)
	}
	if err != nil {
		return res, r.conn.Explain(err, what+" TalosCluster "+c.Name)
	}
	return res, nil
}

func clusterPause(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one CLUSTER"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	reason := cmd.String("reason")
	res, err := r.clusterRequest(ctx, cmd.Args().First(), "pausing", func(ctx context.Context, c client.Client, key client.ObjectKey) (clusterreq.Result, error) {
		return clusterreq.Pause(ctx, c, key, reason)
	})
	if err != nil {
		return err
	}
	name := res.Cluster.Name
	if !res.Changed {
		r.printf("cluster %s is already paused; nothing changed\n", name)
		return nil
	}
	r.printf("cluster %s is paused: the controllers do nothing on it (no provisioning, removal, configuration or drift correction, "+
		"operations or discovery) until `ichor cluster resume %s`\n", name, name)
	return nil
}

func clusterResume(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one CLUSTER"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	res, err := r.clusterRequest(ctx, cmd.Args().First(), "resuming", clusterreq.Resume)
	if err != nil {
		return err
	}
	if !res.Changed {
		r.printf("cluster %s is not paused; nothing changed\n", res.Cluster.Name)
		return nil
	}
	r.printf("cluster %s is resumed: the controllers take it up where they left it\n", res.Cluster.Name)
	return nil
}

func discoveryScan(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return requireOneArg(cmd, "at most one CLUSTER")
	}
	name := cmd.Args().First()
	if f := cmd.String(flagCluster); f != "" {
		if name != "" && name != f {
			return fmt.Errorf("`%s` got the cluster %q and --cluster %q: name it once", cmd.FullName(), name, f)
		}
		name = f
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	res, err := r.clusterRequest(ctx, name, "asking for a scan of", func(ctx context.Context, c client.Client, key client.ObjectKey) (clusterreq.Result, error) {
		return clusterreq.RequestScan(ctx, c, key, time.Now())
	})
	if err != nil {
		return err
	}
	c := res.Cluster
	if !cmd.Bool(flagWait) {
		r.printf("asked cluster %s for a scan; it runs within seconds (or %s after the last scan). "+
			"New machines appear as pending in `ichor machine list --watch`\n", c.Name, guard.MinScanRequestGap)
		return nil
	}
	return r.waitScan(ctx, c, cmd.Duration(flagTimeout))
}

// waitScan waits until a scan answered the cluster's request and prints its results.
func (r *run) waitScan(ctx context.Context, asked *ichorv1alpha1.TalosCluster, timeout time.Duration) error {
	token := asked.Annotations[ichorv1alpha1.ScanRequestedAnnotation]
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	said := ""
	for {
		cur := &ichorv1alpha1.TalosCluster{}
		if err := r.c().Get(ctx, client.ObjectKeyFromObject(asked), cur); err != nil && ctx.Err() == nil {
			return r.conn.Explain(err, "following the scan of "+asked.Name)
		}
		if cur.Status.Discovery.LastHandledScanRequest == token {
			return r.printScan(cur)
		}
		if line := clusterreq.Describe(cur); line != said && cur.Name != "" {
			r.printf("  %s\n", line)
			said = line
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster %s has not scanned within %s; is the controller running? Follow it with `ichor cluster get %s`",
				asked.Name, timeout, asked.Name)
		case <-tick.C:
		}
	}
}

// printScan prints what the last scan found.
func (r *run) printScan(c *ichorv1alpha1.TalosCluster) error {
	d := c.Status.Discovery
	r.printf("cluster %s scanned at %s\n", c.Name, d.LastScanTime.UTC().Format(time.RFC3339))
	if d.Message != "" {
		r.printf("discovery settings: %s\n", d.Message)
	}
	if len(d.Addresses) == 0 {
		r.printf("nothing answered on the Talos API port\n")
		return nil
	}
	t := &output.Rows{Header: []string{colAddress, "RESULT", argMachine, colMessage}}
	for _, a := range d.Addresses {
		t.Add(a.Address, a.Result, a.Machine, a.Message)
	}
	return t.Write(r.out)
}

// shutdownText says what a cluster shutdown does, step by step (nodeop.ShutdownSteps).
func shutdownText(c *ichorv1alpha1.TalosCluster, machines int, refusals []guard.Refusal) string {
	var b strings.Builder
	fmt.Fprintf(&b, "This shuts cluster %s down (%d machine(s)): a TalosOperation of type shutdown.\nSteps:\n", c.Name, machines)
	for i, st := range nodeop.ShutdownSteps() {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, st)
	}
	writeRefusals(&b, refusals)
	return strings.TrimSuffix(b.String(), "\n")
}

// allOff reports whether a shutdown has every machine off: it then waits for
// the machines to be powered on.
func allOff(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationShutdown && op.Status.Step == shutdownPowerOnStep
}

// shutdownPowerOnStep is the shutdown's step once every machine is off.
const shutdownPowerOnStep = "power-on"

// clusterShutdown creates a shutdown operation after the shared checks and
// the cluster's name typed, and with --wait follows it until every machine
// is off.
func clusterShutdown(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one CLUSTER"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	dryRun := cmd.Bool(flagDryRun)
	c, err := r.getCluster(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	n, err := guard.CountApproved(ctx, r.c(), c.Namespace, c.Name, "")
	if err != nil {
		return r.conn.Explain(err, "reading the TalosMachines of cluster "+c.Name)
	}
	op := nodeop.Shutdown(c.Namespace, c.Name)
	facts, err := guard.LoadOperationFacts(ctx, r.c(), op)
	if err != nil {
		return r.conn.Explain(err, "reading TalosCluster "+c.Name+" and its operations")
	}
	refusals := guard.CheckOperation(op, facts)
	text := shutdownText(c, n.ControlPlanes+n.Workers, refusals)
	if dryRun {
		r.printf("%s\n", text)
		if err := refusalError("shutting down cluster "+c.Name, refusals); err != nil {
			return err
		}
		r.printf("The checks allow this now (the webhook also checks your verbs: `shutdown` on talosoperations). Nothing was changed (--dry-run).\n")
		return nil
	}
	if err := refusalError("shutting down cluster "+c.Name, refusals); err != nil {
		return err
	}
	if err := r.confirm(text, c.Name); err != nil {
		return err
	}
	if err := r.c().Create(ctx, op); err != nil {
		return r.conn.Explain(err, "creating the shutdown operation of cluster "+c.Name)
	}
	r.printf("Started operation %s.\n", op.Name)
	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor operation get %s --watch`.\n", op.Name)
		return nil
	}
	if err := r.waitOperation(ctx, cmd, op, allOff); err != nil {
		return err
	}
	r.printf("Every machine of cluster %s is off. Power them on to bring it back: operation %s completes once each one answers on a new boot, "+
		"and until then no other operation starts.\n", c.Name, op.Name)
	return nil
}
