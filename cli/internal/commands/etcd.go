package commands

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// argBackup is the positional argument of the backup commands.
const argBackup = "BACKUP"

func etcdCommand() *cli.Command {
	return &cli.Command{
		Name:   "etcd",
		Usage:  "etcd of the clusters: backups, the restore into the live cluster and a snapshot download",
		Action: unknownSubcommand,
		Commands: []*cli.Command{etcdRestoreCommand(), etcdSnapshotCommand(), {
			Name:   "backup",
			Usage:  "take and list etcd snapshots (TalosEtcdBackups)",
			Action: unknownSubcommand,
			Commands: []*cli.Command{
				{
					Name: "now",
					Usage: "take a snapshot now, outside the schedule: sets the backup-requested-at annotation the controller acts on " +
						"(Back up now in the console)",
					ArgsUsage:     argBackup,
					ShellComplete: completeBackups,
					Flags: []cli.Flag{
						&cli.BoolFlag{Name: flagWait, Usage: "wait until the snapshot is stored (or failed); the exit status says which"},
						&cli.DurationFlag{Name: flagTimeout, Value: 30 * time.Minute, Usage: "how long --wait waits"},
					},
					Action: backupNow,
				},
				{
					Name:          cmdList,
					Usage:         "list the stored snapshots of every TalosEtcdBackup of the namespace, or of one",
					ArgsUsage:     "[" + argBackup + "]",
					ShellComplete: completeBackups,
					Action:        backupList,
				},
			},
		}},
	}
}

// completeBackups offers the backup names of the namespace.
func completeBackups(ctx context.Context, cmd *cli.Command) {
	r, err := connected(cmd)
	if err != nil {
		return
	}
	list := &ichorv1alpha1.TalosEtcdBackupList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return
	}
	for _, b := range list.Items {
		_, _ = fmt.Fprintln(r.out, b.Name)
	}
}

// getBackup reads a backup; when it does not exist, the error lists those that do.
func (r *run) getBackup(ctx context.Context, name string) (*ichorv1alpha1.TalosEtcdBackup, error) {
	b := &ichorv1alpha1.TalosEtcdBackup{}
	err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: name}, b)
	if err == nil {
		return b, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, r.conn.Explain(err, fmt.Sprintf("reading TalosEtcdBackup %s/%s", r.ns(), name))
	}
	list := &ichorv1alpha1.TalosEtcdBackupList{}
	if lerr := r.c().List(ctx, list, client.InNamespace(r.ns())); lerr != nil {
		return nil, r.conn.Explain(lerr, "listing TalosEtcdBackups in namespace "+r.ns())
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("TalosEtcdBackup %q not found: namespace %s has no backups; create one (kubectl apply a TalosEtcdBackup) or pick the namespace with -n", name, r.ns())
	}
	names := make([]string, 0, len(list.Items))
	for _, b := range list.Items {
		names = append(names, b.Name)
	}
	return nil, fmt.Errorf("TalosEtcdBackup %q not found in namespace %s; the backups there are: %s (`ichor etcd backup list`)",
		name, r.ns(), strings.Join(names, ", "))
}

func backupNow(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one BACKUP"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	b, err := r.getBackup(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch := client.MergeFrom(b.DeepCopy())
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[ichorv1alpha1.BackupRequestedAnnotation] = token
	if err := r.c().Patch(ctx, b, patch); err != nil {
		return r.conn.Explain(err, "requesting a snapshot of TalosEtcdBackup "+b.Name)
	}
	if !cmd.Bool(flagWait) {
		r.printf("Requested a snapshot of cluster %s from TalosEtcdBackup %s; `ichor etcd backup list %s` shows it once stored.\n",
			b.Spec.ClusterName, b.Name, b.Name)
		return nil
	}
	r.printf("Requested a snapshot of cluster %s from TalosEtcdBackup %s; waiting...\n", b.Spec.ClusterName, b.Name)
	done, err := r.waitBackupRequest(ctx, b, token, cmd.Duration(flagTimeout))
	if err != nil {
		return err
	}
	if c := apimeta.FindStatusCondition(done.Status.Conditions, ichorv1alpha1.ReadyCondition); c == nil || c.Reason != ichorv1alpha1.SnapshotStoredReason {
		return fmt.Errorf("the snapshot failed: %s; fix it and run `ichor etcd backup now %s` again", done.Status.LastFailure, done.Name)
	}
	if len(done.Status.Snapshots) > 0 {
		s := done.Status.Snapshots[0]
		r.printf("Stored %s: etcd revision %d, %s, read from %s.\n", s.Name, s.EtcdRevision, output.Bytes(s.SizeBytes), s.Node)
	}
	return nil
}

// waitBackupRequest follows the backup until the controller handled token.
func (r *run) waitBackupRequest(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, token string, timeout time.Duration) (*ichorv1alpha1.TalosEtcdBackup, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cur := &ichorv1alpha1.TalosEtcdBackup{}
		if err := r.c().Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				break
			}
			return nil, r.conn.Explain(err, "reading TalosEtcdBackup "+b.Name)
		}
		if cur.Status.LastHandledRequest == token {
			return cur, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(followInterval):
			continue
		}
		break
	}
	return nil, fmt.Errorf("the controller did not take the snapshot within %s; the request stays on TalosEtcdBackup %s "+
		"(`ichor etcd backup list %s` shows it once stored; is ichor-controller running?)", timeout, b.Name, b.Name)
}

func backupList(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return fmt.Errorf("`%s` takes at most one BACKUP; run `%s --help`", cmd.FullName(), cmd.FullName())
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	var items []ichorv1alpha1.TalosEtcdBackup
	if name := cmd.Args().First(); name != "" {
		b, err := r.getBackup(ctx, name)
		if err != nil {
			return err
		}
		items = []ichorv1alpha1.TalosEtcdBackup{*b}
	} else {
		list := &ichorv1alpha1.TalosEtcdBackupList{}
		if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
			return r.conn.Explain(err, "listing TalosEtcdBackups in namespace "+r.ns())
		}
		items = list.Items
	}
	if r.format != output.Table {
		for i := range items {
			items[i].ManagedFields = nil
		}
		return output.Object(r.out, r.format, &ichorv1alpha1.TalosEtcdBackupList{
			TypeMeta: metav1.TypeMeta{APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "TalosEtcdBackupList"}, Items: items})
	}
	if len(items) == 0 {
		r.printf("No TalosEtcdBackups in namespace %s.\n", r.ns())
		return nil
	}
	now := time.Now()
	for i := range items {
		if i > 0 {
			r.printf("\n")
		}
		if err := r.printBackup(&items[i], now); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) printBackup(b *ichorv1alpha1.TalosEtcdBackup, now time.Time) error {
	blk := &output.Block{}
	blk.Add("Backup", b.Name)
	blk.Add("Cluster", b.Spec.ClusterName)
	sched := b.Spec.Schedule + " (UTC)"
	if b.Spec.Suspend {
		sched += ", suspended"
	}
	blk.Add("Schedule", sched)
	blk.Add("Store", strings.TrimSuffix(b.Spec.S3.Endpoint, "/")+"/"+path.Join(b.Spec.S3.Bucket, b.Spec.S3.Prefix))
	blk.Add("Last success", formatTime(b.Status.LastSuccessfulTime))
	if b.Status.LastFailureTime != nil {
		blk.Add("Last failure", formatTime(b.Status.LastFailureTime)+": "+b.Status.LastFailure)
	}
	for _, t := range []string{ichorv1alpha1.ReadyCondition, ichorv1alpha1.StaleCondition, ichorv1alpha1.StoreInClusterCondition} {
		if c := apimeta.FindStatusCondition(b.Status.Conditions, t); c != nil && (t == ichorv1alpha1.ReadyCondition || c.Status == metav1.ConditionTrue) {
			blk.Add(t, string(c.Status)+" ("+c.Reason+"): "+c.Message)
		}
	}
	if tok := b.Annotations[ichorv1alpha1.BackupRequestedAnnotation]; tok != "" && tok != b.Status.LastHandledRequest {
		blk.Add("Requested", tok+", not yet taken")
	}
	if err := blk.Write(r.out); err != nil {
		return err
	}
	if len(b.Status.Snapshots) == 0 {
		r.printf("No snapshots stored yet.\n")
		return nil
	}
	t := &output.Rows{Header: []string{"SNAPSHOT", "TAKEN", "REVISION", "SIZE", "NODE", colAge}}
	for _, s := range b.Status.Snapshots {
		t.Add(path.Base(s.Name), s.TakenAt.UTC().Format(time.RFC3339), strconv.FormatInt(s.EtcdRevision, 10), output.Bytes(s.SizeBytes), s.Node,
			output.Age(s.TakenAt.Time, now))
	}
	r.printf("\n")
	return t.Write(r.out)
}
