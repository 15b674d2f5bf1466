package commands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Flags of `ichor etcd restore`.
const (
	flagBackup         = "backup"
	flagSnapshot       = "snapshot"
	flagIdentity       = "identity"
	flagIdentitySecret = "identity-secret"
	// snapshotLatest names the newest snapshot the backup lists.
	snapshotLatest = "latest"
	// restoreIdentityLabel names, on an identity Secret the CLI wrote, the
	// restore it belongs to.
	restoreIdentityLabel = "ichor.maesh.dev/etcd-restore"
)

func etcdRestoreCommand() *cli.Command {
	return &cli.Command{
		Name: "restore",
		Usage: "restore a snapshot into the live cluster (a TalosOperation of type etcd-restore): every control plane's etcd data is wiped, " +
			"the snapshot is recovered on one and the others rejoin; everything written after the snapshot is lost " +
			"(needs the restore-etcd verb, override on the cluster and talosoperations/secret-references)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagBackup, Required: true, Usage: "the TalosEtcdBackup whose store holds the snapshot"},
			&cli.StringFlag{Name: flagSnapshot, Value: snapshotLatest, Usage: "the snapshot, as `ichor etcd backup list` shows it (or its full key); latest is the newest"},
			&cli.StringFlag{Name: flagIdentity, Usage: "a file holding an age identity (AGE-SECRET-KEY-1…) of one of the backup's recipients; " +
				"it goes into a Secret that is deleted with the operation"},
			&cli.StringFlag{Name: flagIdentitySecret, Usage: "an existing Secret (NAME or NAME:KEY, default key identity) holding the age identity, instead of --identity"},
			&cli.BoolFlag{Name: flagDryRun, Usage: usageDryRun},
			&cli.BoolFlag{Name: flagWait, Usage: "follow the restore until it ends (the Kubernetes API goes away meanwhile)"},
			&cli.DurationFlag{Name: flagTimeout, Value: 60 * time.Minute, Usage: "how long --wait follows the restore"},
		},
		Action: etcdRestore,
	}
}

// restoreSnapshot picks the snapshot the flag names from what the backup lists.
func restoreSnapshot(b *ichorv1alpha1.TalosEtcdBackup, name string) (ichorv1alpha1.SnapshotInfo, error) {
	if len(b.Status.Snapshots) == 0 {
		return ichorv1alpha1.SnapshotInfo{}, fmt.Errorf("TalosEtcdBackup %s lists no snapshot yet; take one with `ichor etcd backup now %s --wait`", b.Name, b.Name)
	}

	if name == "" || name == snapshotLatest {
		return b.Status.Snapshots[0], nil
	}

	if s, ok := guard.SnapshotListed(b, name); ok {
		return s, nil
	}

	names := make([]string, 0, len(b.Status.Snapshots))
	for _, s := range b.Status.Snapshots {
		names = append(names, path.Base(s.Name))
	}

	return ichorv1alpha1.SnapshotInfo{}, fmt.Errorf("TalosEtcdBackup %s lists no snapshot %q; it lists %s (`ichor etcd backup list %s`)",
		b.Name, name, strings.Join(names, ", "), b.Name)
}

// restoreText says what the restore does, step by step.
func restoreText(op *ichorv1alpha1.TalosOperation, snap ichorv1alpha1.SnapshotInfo, identity string, refusals []guard.Refusal) string {
	var b strings.Builder

	fmt.Fprintf(&b, "This restores etcd snapshot %s (revision %d, taken %s from %s) into the live cluster %s, under the cluster lock.\n",
		path.Base(snap.Name), snap.EtcdRevision, snap.TakenAt.UTC().Format(time.RFC3339), orUnknown(snap.Node), op.Spec.ClusterName)
	fmt.Fprintf(&b, "Everything written to the cluster's Kubernetes API after %s is lost, this operation included (it is recreated from its marker).\n",
		snap.TakenAt.UTC().Format(time.RFC3339))
	b.WriteString("Steps:\n")

	for i, s := range etcdbackup.RestoreSteps(identity) {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, s)
	}

	if len(refusals) > 0 {
		b.WriteString("Refused:\n")

		for _, rf := range refusals {
			fmt.Fprintf(&b, "  - %s\n", rf.Error())
		}
	}

	return strings.TrimSuffix(b.String(), "\n")
}

// identityRef reads --identity-secret NAME[:KEY].
func identityRef(v string) ichorv1alpha1.SecretReference {
	name, key, _ := strings.Cut(v, ":")

	return ichorv1alpha1.SecretReference{Name: name, Key: key}
}

// etcdRestore creates an etcd-restore operation after the shared checks and
// the cluster's name typed, and follows it with --wait.
func etcdRestore(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 0 {
		return fmt.Errorf("`%s` takes no argument; name the backup with --backup (`%s --help`)", cmd.FullName(), cmd.FullName())
	}

	file, secret := cmd.String(flagIdentity), cmd.String(flagIdentitySecret)
	if (file == "") == (secret == "") {
		return errors.New("give the age identity that decrypts the snapshot: --identity FILE (an AGE-SECRET-KEY-1… line), or --identity-secret NAME for a Secret that holds one; nothing was changed")
	}

	var identity []byte

	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("reading the identity file: %w", err)
		}

		if _, err := etcdbackup.ParseIdentities(data); err != nil {
			return fmt.Errorf("the identity file %s: %w; nothing was changed", file, err)
		}

		identity = data
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	dryRun := cmd.Bool(flagDryRun)

	b, err := r.getBackup(ctx, cmd.String(flagBackup))
	if err != nil {
		return err
	}

	snap, err := restoreSnapshot(b, cmd.String(flagSnapshot))
	if err != nil {
		return err
	}

	name := "etcd-restore-" + utilrand.String(5)
	ref := identityRef(secret)
	where := "Secret " + ref.Name

	if file != "" {
		ref = ichorv1alpha1.SecretReference{Name: name + "-identity"}
		where = "a new Secret " + ref.Name + ", deleted with the operation"
	}

	op := etcdbackup.NewRestoreOperation(b.Namespace, name, b, snap.Name, ref)

	facts, err := guard.LoadOperationFacts(ctx, r.c(), op)
	if err != nil {
		return r.conn.Explain(err, "reading TalosCluster "+op.Spec.ClusterName+", its backup and its operations")
	}

	refusals := guard.CheckOperation(op, facts)
	if dryRun {
		r.printf("%s\n", restoreText(op, snap, where, refusals))

		if err := refusalError("restoring etcd", refusals); err != nil {
			return err
		}

		r.printf("The checks allow this now (the webhook also checks your verbs and the cluster lock). Nothing was changed (--dry-run).\n")

		return nil
	}

	if err := refusalError("restoring etcd", refusals); err != nil {
		return err
	}

	if err := r.confirm(restoreText(op, snap, where, nil), op.Spec.ClusterName); err != nil {
		return err
	}

	if err := r.createRestore(ctx, op, identity); err != nil {
		return err
	}

	r.printf("Started operation %s: restoring %s into cluster %s.\n", op.Name, path.Base(snap.Name), op.Spec.ClusterName)

	if !cmd.Bool(flagWait) {
		r.printf("Follow it with `ichor operation get %s --watch`; the Kubernetes API goes away while etcd is restored.\n", op.Name)

		return nil
	}

	wctx, cancel := context.WithTimeout(ctx, cmd.Duration(flagTimeout))
	defer cancel()

	final := r.followRestore(wctx, op)
	if final == nil {
		return fmt.Errorf("stopped following operation %s; it goes on: `ichor operation get %s --watch`", op.Name, op.Name)
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

// createRestore writes the identity Secret (with --identity), then the
// operation, then makes the operation the Secret's owner so that the
// Secret goes with it. A refused operation takes the Secret back.
func (r *run) createRestore(ctx context.Context, op *ichorv1alpha1.TalosOperation, identity []byte) error {
	var sec *corev1.Secret

	if identity != nil {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: op.Namespace, Name: op.Spec.EtcdRestore.IdentityRef.Name,
				Labels: map[string]string{restoreIdentityLabel: op.Name},
			},
			Data: map[string][]byte{ichorv1alpha1.DefaultIdentityKey: identity},
		}

		if err := r.c().Create(ctx, sec); err != nil {
			if apierrors.IsForbidden(err) {
				return fmt.Errorf("you may not create Secrets in namespace %s, so the identity cannot be handed to the controller: ask an administrator to run "+
					"`kubectl -n %s create secret generic restore-identity --from-file=identity=FILE` and pass --identity-secret restore-identity; nothing was changed",
					op.Namespace, op.Namespace)
			}

			return r.conn.Explain(err, "storing the identity in Secret "+sec.Name)
		}
	}

	if err := r.c().Create(ctx, op); err != nil {
		if sec != nil {
			if derr := r.c().Delete(context.WithoutCancel(ctx), sec); derr != nil && !apierrors.IsNotFound(derr) {
				r.warnf("could not delete the identity Secret %s: %v; delete it by hand", sec.Name, derr)
			}
		}

		return r.conn.Explain(err, "creating the etcd restore")
	}

	if sec != nil {
		patch := client.MergeFrom(sec.DeepCopy())
		sec.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "TalosOperation", Name: op.Name, UID: op.UID,
		}}

		if err := r.c().Patch(ctx, sec, patch); err != nil {
			r.warnf("the identity Secret %s does not go with operation %s (%v); delete it once the restore has ended", sec.Name, op.Name, err)
		}
	}

	return nil
}

// followRestore follows a restore through the time its API is away or
// rolled back past the operation: errors reading it and its absence are
// waited out, and the operation recreated from its marker is followed on. It
// returns the settled operation, or nil when ctx ended first.
func (r *run) followRestore(ctx context.Context, op *ichorv1alpha1.TalosOperation) *ichorv1alpha1.TalosOperation {
	first := string(op.UID)
	cur := op
	away := false

	for {
		final, err := r.followOperation(ctx, cur, false)
		if err == nil {
			return final
		}

		if !away {
			r.printf("The Kubernetes API does not show operation %s now (%v): etcd is being restored; waiting for it to come back.\n", op.Name, err)

			away = true
		}

		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * followInterval):
			}

			next := &ichorv1alpha1.TalosOperation{}
			if gerr := r.c().Get(ctx, client.ObjectKeyFromObject(op), next); gerr != nil {
				continue
			}

			if next.UID == cur.UID || next.Annotations[ichorv1alpha1.RestoreMarkerAnnotation] == first {
				cur, away = next, false

				break
			}
		}
	}
}
