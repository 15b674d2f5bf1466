package commands

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/attention"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:   "cluster",
		Usage:  "inspect clusters, pause and resume them, say where they discover machines, whose tokens their kube-apiserver accepts, and download a read-only talosconfig",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:      cmdGet,
				Usage:     "list the clusters of the namespace, or show one",
				ArgsUsage: "[CLUSTER]",
				Action:    clusterGet,
			},
			talosconfigCommand(),
			authenticationCommand(),
			{
				Name: "pause",
				Usage: "stop every controller acting on the cluster (no provisioning, removal, configuration or drift " +
					"correction, operations or discovery) until it is resumed",
				ArgsUsage: argCluster,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "reason", Usage: "why, recorded on the cluster for the others to read (`TEXT`)"},
				},
				Action: clusterPause,
			},
			{
				Name:      "resume",
				Usage:     "let the controllers act on a paused cluster again",
				ArgsUsage: argCluster,
				Action:    clusterResume,
			},
			{
				Name: "shutdown",
				Usage: "shut the whole cluster down for planned downtime: every worker at once, then every control plane in one burst " +
					"(the controller's own node last); no other operation starts until every machine was powered on again " +
					"(needs the shutdown verb on talosoperations)",
				ArgsUsage: argCluster,
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: flagDryRun, Usage: usageDryRun},
					&cli.BoolFlag{Name: flagWait, Usage: "follow the operation until every machine is off"},
					&cli.DurationFlag{Name: flagTimeout, Value: 30 * time.Minute, Usage: "how long --wait follows the operation"},
				},
				Action: clusterShutdown,
			},
			rotateCACommand(),
			rotateKeysCommand(),
			{
				Name:   "discovery",
				Usage:  "where the controller looks for machines in maintenance mode",
				Action: unknownSubcommand,
				Commands: []*cli.Command{
					{
						Name:      "add",
						Usage:     "register machines by IP address, or a subnet to scan for the Talos API",
						ArgsUsage: "ADDRESS|CIDR...",
						Flags: []cli.Flag{
							&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
						},
						Action: discoveryAdd,
					},
					{
						Name: "scan",
						Usage: "scan the cluster's subnets and addresses now instead of at the next interval " +
							"(within seconds, or " + guard.MinScanRequestGap.String() + " after the last scan)",
						ArgsUsage: "[CLUSTER]",
						Flags: []cli.Flag{
							&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
							&cli.BoolFlag{Name: flagWait, Usage: "wait until the scan ran and print what it found"},
							&cli.DurationFlag{Name: flagTimeout, Value: 2 * time.Minute, Usage: "how long --wait waits"},
						},
						Action: discoveryScan,
					},
				},
			},
		},
	}
}

func (r *run) listClusters(ctx context.Context) ([]ichorv1alpha1.TalosCluster, error) {
	list := &ichorv1alpha1.TalosClusterList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return nil, r.conn.Explain(err, "listing TalosClusters in namespace "+r.ns())
	}
	return list.Items, nil
}

func clusterNames(cs []ichorv1alpha1.TalosCluster) string {
	names := make([]string, 0, len(cs))
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// getCluster reads the named cluster, or with an empty name the only one in
// the namespace; the errors list what exists.
func (r *run) getCluster(ctx context.Context, name string) (*ichorv1alpha1.TalosCluster, error) {
	if name != "" {
		c := &ichorv1alpha1.TalosCluster{}
		err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: name}, c)
		if err == nil {
			return c, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, r.conn.Explain(err, "reading TalosCluster "+name)
		}
	}
	all, err := r.listClusters(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case len(all) == 0:
		return nil, fmt.Errorf("namespace %s has no TalosCluster; is the namespace right (-n NAMESPACE)?", r.ns())
	case name != "":
		return nil, fmt.Errorf("TalosCluster %q not found in namespace %s; the clusters there are: %s", name, r.ns(), clusterNames(all))
	case len(all) > 1:
		return nil, fmt.Errorf("namespace %s has %d TalosClusters (%s): name one with --cluster", r.ns(), len(all), clusterNames(all))
	}
	return &all[0], nil
}

func clusterGet(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return requireOneArg(cmd, "at most one CLUSTER")
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	if name := cmd.Args().First(); name != "" {
		c, err := r.getCluster(ctx, name)
		if err != nil {
			return err
		}
		if r.format != output.Table {
			c.ManagedFields = nil
			c.APIVersion, c.Kind = ichorv1alpha1.GroupVersion.String(), "TalosCluster"
			return output.Object(r.out, r.format, c)
		}
		items, incomplete := r.attention(ctx, c)
		if err := r.printCluster(c, time.Now()); err != nil {
			return err
		}
		return r.printAttention(items, incomplete, time.Now())
	}
	all, err := r.listClusters(ctx)
	if err != nil {
		return err
	}
	if r.format != output.Table {
		for i := range all {
			all[i].ManagedFields = nil
		}
		return output.Object(r.out, r.format, &ichorv1alpha1.TalosClusterList{
			TypeMeta: metav1.TypeMeta{APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "TalosClusterList"}, Items: all})
	}
	if len(all) == 0 {
		r.printf("No clusters in namespace %s.\n", r.ns())
		return nil
	}
	t := &output.Rows{Header: []string{colName, colTalos, "KUBERNETES", "CONTROL PLANES", "WORKERS", "PENDING", "ENDPOINT", "READY", colAge}}
	now := time.Now()
	for i := range all {
		c := &all[i]
		t.Add(c.Name, c.Spec.TalosVersion, c.Spec.KubernetesVersion,
			fmt.Sprintf("%d/%d", c.Status.ControlPlanes.Ready, c.Spec.ControlPlane.Count),
			fmt.Sprintf("%d/%d", c.Status.Workers.Ready, c.Status.Workers.Approved),
			itoa(int(c.Status.PendingMachines)), c.Spec.Endpoint.Host, condStatus(c.Status.Conditions, ichorv1alpha1.ReadyCondition),
			output.Age(c.CreationTimestamp.Time, now))
	}
	return t.Write(r.out)
}

func condStatus(conds []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return string(c.Status)
	}
	return ""
}

func (r *run) printCluster(c *ichorv1alpha1.TalosCluster, now time.Time) error {
	b := &output.Block{}
	b.Add("Name", c.Name)
	b.Add("Namespace", c.Namespace)
	b.Add("Talos", c.Spec.TalosVersion+runningSuffix(c.Status.TalosVersion))
	b.Add("Kubernetes", c.Spec.KubernetesVersion+runningSuffix(c.Status.KubernetesVersion))
	b.Add("Config contract", c.Spec.VersionContract)
	b.Add("Automatic patches", autoPatchText(c))
	port := c.Spec.Endpoint.Port
	if port == 0 {
		port = 6443
	}
	b.Add("Endpoint", fmt.Sprintf("%s %s", c.Spec.Endpoint.Type, net.JoinHostPort(c.Spec.Endpoint.Host, itoa(int(port)))))
	sched := "no"
	if c.Spec.ControlPlane.Schedulable != nil && *c.Spec.ControlPlane.Schedulable {
		sched = wordYes
	}
	b.Add("Control planes", fmt.Sprintf("%d ready of %d declared (schedulable: %s)", c.Status.ControlPlanes.Ready, c.Spec.ControlPlane.Count, sched))
	b.Add("Workers", fmt.Sprintf("%d ready of %d approved", c.Status.Workers.Ready, c.Status.Workers.Approved))
	b.Add("Pending machines", itoa(int(c.Status.PendingMachines)))
	b.Add("CNI", cni.Describe(c))
	b.Add("Discovery subnets", strings.Join(c.Spec.Discovery.Subnets, ", "))
	b.Add("Discovery addresses", strings.Join(c.Spec.Discovery.Addresses, ", "))
	b.Add("Secrets bundle", "Secret "+c.Spec.SecretsBundleRef.Name)
	b.Add("Lock holder", c.Status.LockHolder)
	b.Add("Paused", pausedText(c))
	if reason := c.Annotations[ichorv1alpha1.PausedReasonAnnotation]; reason != "" {
		b.Add("Pause reason", reason)
	}
	b.Add("Discovery", clusterreq.Describe(c))
	b.Add("Age", output.Age(c.CreationTimestamp.Time, now))
	if err := b.Write(r.out); err != nil {
		return err
	}
	if len(c.Status.Conditions) > 0 {
		r.printf("\nConditions:\n")
		t := &output.Rows{Header: []string{"TYPE", "STATUS", "REASON", "MESSAGE"}}
		for _, cd := range c.Status.Conditions {
			t.Add(cd.Type, string(cd.Status), cd.Reason, cd.Message)
		}
		return t.Write(r.out)
	}
	return nil
}

// attention is what needs attention in the cluster (contracts/pkg/attention,
// the console's list); incomplete says what could not be read.
func (r *run) attention(ctx context.Context, c *ichorv1alpha1.TalosCluster) ([]attention.Item, []string) {
	var incomplete []string
	machines := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, machines, client.InNamespace(r.ns())); err != nil {
		incomplete = append(incomplete, "machines not read: "+r.conn.Explain(err, "listing TalosMachines").Error())
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	if err := r.c().List(ctx, ops, client.InNamespace(r.ns())); err != nil {
		incomplete = append(incomplete, "operations not read: "+r.conn.Explain(err, "listing TalosOperations").Error())
	}
	backups := &ichorv1alpha1.TalosEtcdBackupList{}
	if err := r.c().List(ctx, backups, client.InNamespace(r.ns())); err != nil {
		incomplete = append(incomplete, "etcd backups not read: "+r.conn.Explain(err, "listing TalosEtcdBackups").Error())
	}
	storages := &ichorv1alpha1.TalosStorageList{}
	if err := r.c().List(ctx, storages, client.InNamespace(r.ns())); err != nil {
		incomplete = append(incomplete, "storages not read: "+r.conn.Explain(err, "listing TalosStorages").Error())
	}
	name := ""
	if c != nil {
		name = c.Name
	}
	return attention.WithStorages(attention.Items(c, machines.Items, ops.Items, backups.Items, time.Now()), name, storages.Items), incomplete
}

// printAttention prints the items: severity, how long, the plain summary,
// then the command to run and the raw detail.
func (r *run) printAttention(items []attention.Item, incomplete []string, now time.Time) error {
	r.printf("\nNeeds attention:\n")
	for _, s := range incomplete {
		r.printf("  (%s)\n", s)
	}
	if len(items) == 0 {
		r.printf("  nothing\n")
		return nil
	}
	sinceW := 0
	for _, it := range items {
		sinceW = max(sinceW, len(attention.Since(it.Since, now)))
	}
	indent := strings.Repeat(" ", 2+len(attention.Warning)+2+sinceW+2)
	for _, it := range items {
		r.printf("  %-*s  %-*s  %s\n", len(attention.Warning), it.Severity, sinceW, attention.Since(it.Since, now), it.Summary)
		if it.Command != "" {
			r.printf("%srun: %s\n", indent, it.Command)
		}
		if it.Detail != "" {
			r.printf("%swhy: %s\n", indent, it.Detail)
		}
	}
	return nil
}

// autoPatchText says whether automatic patch upgrades (spec.autoPatch) are on.
func autoPatchText(c *ichorv1alpha1.TalosCluster) string {
	if !c.Spec.AutoPatch.Enabled {
		return textOff
	}
	return "on: newer patches of the running minors (this Ichor's release set), written as " + guard.AutoPatchServiceAccount
}

func runningSuffix(observed string) string {
	if observed == "" {
		return ""
	}
	return " (running " + observed + ")"
}

func discoveryAdd(ctx context.Context, cmd *cli.Command) error {
	if !cmd.Args().Present() {
		return requireOneArg(cmd, "one or more ADDRESS or CIDR arguments")
	}
	var addrs, subnets []string
	for _, a := range cmd.Args().Slice() {
		addr, subnet, err := ichorv1alpha1.ParseDiscoveryTarget(a)
		if err != nil {
			return err
		}
		if addr != "" {
			addrs = append(addrs, addr)
			continue
		}
		// The admission webhook's limit, said before anything is written.
		if _, err := guard.ScanSize(subnet); err != nil {
			return fmt.Errorf("%w; nothing was changed: split it into smaller subnets, or add the machines by address", err)
		}
		subnets = append(subnets, subnet)
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	var added []string
	var name string
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := r.getCluster(ctx, cmd.String(flagCluster))
		if err != nil {
			return err
		}
		name = c.Name
		added = c.Spec.Discovery.Add(addrs, subnets)
		if len(added) == 0 {
			return nil
		}
		if err := r.c().Update(ctx, c); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return r.conn.Explain(err, "adding discovery targets to TalosCluster "+c.Name)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(added) == 0 {
		r.printf("cluster %s already discovers %s; nothing changed\n", name, strings.Join(cmd.Args().Slice(), ", "))
		return nil
	}
	r.printf("cluster %s now discovers %s; new machines appear as pending in `ichor machine list --watch`\n", name, strings.Join(added, ", "))
	return nil
}
