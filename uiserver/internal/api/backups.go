package api

import (
	"context"
	"path"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

const resBackups = "talosetcdbackups"

// BackupService implements the UI API's BackupService (the Backups page):
// the backups from the cache after an access review as the signed-in user,
// Back up now and the restore written as that user. The restore is checked
// as `ichor etcd restore` checks it (guard.CheckOperation with the facts
// read as the user), and the admission webhook checks it again; the age
// identity is a Secret named by the user, never sent here.
type BackupService struct {
	ichorv1.UnimplementedBackupServiceServer
	Deps
}

// ListBackups implements BackupService.
func (s *BackupService) ListBackups(ctx context.Context, _ *ichorv1.ListBackupsRequest) (*ichorv1.ListBackupsResponse, error) {
	if err := s.Clients.Authorize(ctx, "list", resBackups); err != nil {
		return nil, apiError(ctx, err, "listing backups")
	}

	list := &ichorv1alpha1.TalosEtcdBackupList{}
	if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, "listing backups")
	}

	c := s.cluster(ctx)
	out := &ichorv1.ListBackupsResponse{Cluster: s.ClusterName, Backups: []*ichorv1.Backup{}}

	for i := range list.Items {
		if b := &list.Items[i]; b.Spec.ClusterName == s.ClusterName {
			out.Backups = append(out.Backups, backupToProto(b, c))
		}
	}

	sort.Slice(out.Backups, func(i, j int) bool { return out.Backups[i].Name < out.Backups[j].Name })

	return out, nil
}

// cluster is the served cluster from the cache; nil when it cannot be read.
func (s *BackupService) cluster(ctx context.Context) *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil
	}

	return c
}

// backup reads one backup of the served cluster as the signed-in user.
func (s *BackupService) backup(ctx context.Context, name, what string) (*ichorv1alpha1.TalosEtcdBackup, error) {
	if name == "" {
		return nil, invalid("%s: name the backup; nothing was changed", what)
	}

	b := &ichorv1alpha1.TalosEtcdBackup{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, b); err != nil {
		return nil, apiError(ctx, err, what)
	}

	if b.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "%s: TalosEtcdBackup %s backs up cluster %s, not %s", what, name, b.Spec.ClusterName, s.ClusterName)
	}

	return b, nil
}

// BackUpNow implements BackupService: it sets the backup-requested-at
// annotation as the signed-in user (patch needs `patch` on talosetcdbackups).
func (s *BackupService) BackUpNow(ctx context.Context, req *ichorv1.BackUpNowRequest) (*ichorv1.BackUpNowResponse, error) {
	what := "asking backup " + req.GetName() + " for a snapshot now"

	b, err := s.backup(ctx, req.GetName(), what)
	if err != nil {
		return nil, err
	}

	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch := client.MergeFrom(b.DeepCopy())

	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}

	b.Annotations[ichorv1alpha1.BackupRequestedAnnotation] = token

	if err := s.Clients.User.Patch(ctx, b, patch); err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.BackUpNowResponse{Backup: backupToProto(b, s.cluster(ctx)), Token: token}, nil
}

// restoreSnapshot picks the snapshot a request names: its key or short
// name, the newest when empty.
func restoreSnapshot(b *ichorv1alpha1.TalosEtcdBackup, name, what string) (ichorv1alpha1.SnapshotInfo, error) {
	if len(b.Status.Snapshots) == 0 {
		return ichorv1alpha1.SnapshotInfo{}, status.Errorf(codes.FailedPrecondition, "%s: backup %s lists no snapshot yet; take one with Back up now", what, b.Name)
	}

	if name == "" {
		return b.Status.Snapshots[0], nil
	}

	if s, ok := guard.SnapshotListed(b, name); ok {
		return s, nil
	}

	return ichorv1alpha1.SnapshotInfo{}, status.Errorf(codes.NotFound, "%s: backup %s lists no snapshot %q; pick one of the list", what, b.Name, name)
}

// restoreOperation is the operation a request asks for, with what refuses it.
func (s *BackupService) restoreOperation(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, snap ichorv1alpha1.SnapshotInfo,
	ref ichorv1alpha1.SecretReference, what string,
) (*ichorv1alpha1.TalosOperation, []guard.Refusal, error) {
	op := etcdbackup.NewRestoreOperation(s.Clients.Namespace, "etcd-restore-"+utilrand.String(5), b, snap.Name, ref)

	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, nil, apiError(ctx, err, what)
	}

	return op, guard.CheckOperation(op, facts), nil
}

// PreviewRestore implements BackupService.
func (s *BackupService) PreviewRestore(ctx context.Context, req *ichorv1.PreviewRestoreRequest) (*ichorv1.PreviewRestoreResponse, error) {
	what := "previewing a restore from backup " + req.GetName()

	b, err := s.backup(ctx, req.GetName(), what)
	if err != nil {
		return nil, err
	}

	snap, err := restoreSnapshot(b, req.GetSnapshot(), what)
	if err != nil {
		return nil, err
	}

	where := "the Secret you name"
	if req.GetIdentitySecret() != "" {
		where = "Secret " + req.GetIdentitySecret()
	}

	_, refusals, err := s.restoreOperation(ctx, b, snap, ichorv1alpha1.SecretReference{Name: req.GetIdentitySecret()}, what)
	if err != nil {
		return nil, err
	}

	out := &ichorv1.PreviewRestoreResponse{Cluster: s.ClusterName, Snapshot: snapshotToProto(snap), Steps: etcdbackup.RestoreSteps(where)}
	for _, r := range refusals {
		out.Refusals = append(out.Refusals, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
	}

	return out, nil
}

// StartRestore implements BackupService: after the typed cluster name and
// the checks, it creates the etcd-restore operation as the signed-in user.
func (s *BackupService) StartRestore(ctx context.Context, req *ichorv1.StartRestoreRequest) (*ichorv1.StartRestoreResponse, error) {
	what := "restoring a snapshot of backup " + req.GetName() + " into cluster " + s.ClusterName

	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "created"); err != nil {
		return nil, err
	}

	if req.GetIdentitySecret() == "" {
		return nil, invalid("%s: identity_secret is required: the Secret (in namespace %s) holding an age identity of one of the backup's recipients, "+
			"created by an administrator with `kubectl -n %s create secret generic restore-identity --from-file=identity=FILE`; nothing was created",
			what, s.Clients.Namespace, s.Clients.Namespace)
	}

	b, err := s.backup(ctx, req.GetName(), what)
	if err != nil {
		return nil, err
	}

	snap, err := restoreSnapshot(b, req.GetSnapshot(), what)
	if err != nil {
		return nil, err
	}

	op, refusals, err := s.restoreOperation(ctx, b, snap, ichorv1alpha1.SecretReference{Name: req.GetIdentitySecret(), Key: req.GetIdentityKey()}, what)
	if err != nil {
		return nil, err
	}

	if len(refusals) > 0 {
		return nil, refused(codes.FailedPrecondition, what, refusals)
	}

	if err := s.Clients.User.Create(ctx, op); err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.StartRestoreResponse{Operation: operationToProto(op)}, nil
}

func backupToProto(b *ichorv1alpha1.TalosEtcdBackup, c *ichorv1alpha1.TalosCluster) *ichorv1.Backup {
	out := &ichorv1.Backup{
		Name: b.Name, Schedule: b.Spec.Schedule, Suspended: b.Spec.Suspend,
		Store:       strings.TrimSuffix(b.Spec.S3.Endpoint, "/") + "/" + path.Join(b.Spec.S3.Bucket, b.Spec.S3.Prefix),
		LastSuccess: ts(b.Status.LastSuccessfulTime), LastFailureTime: ts(b.Status.LastFailureTime), LastFailure: b.Status.LastFailure,
		Conditions: conditions(b.Status.Conditions), StoreInCluster: guard.BackupStoreInCluster(b, c),
		Snapshots: make([]*ichorv1.Snapshot, 0, len(b.Status.Snapshots)),
	}

	if tok := b.Annotations[ichorv1alpha1.BackupRequestedAnnotation]; tok != "" && tok != b.Status.LastHandledRequest {
		out.Requested = true
	}

	if c := apimeta.FindStatusCondition(b.Status.Conditions, ichorv1alpha1.StoreInClusterCondition); c != nil && c.Status == "True" && out.StoreInCluster == "" {
		out.StoreInCluster = c.Message
	}

	for _, sn := range b.Status.Snapshots {
		out.Snapshots = append(out.Snapshots, snapshotToProto(sn))
	}

	return out
}

func snapshotToProto(sn ichorv1alpha1.SnapshotInfo) *ichorv1.Snapshot {
	return &ichorv1.Snapshot{
		Name: sn.Name, ShortName: path.Base(sn.Name), TakenAt: ts(&sn.TakenAt), SizeBytes: sn.SizeBytes, EtcdRevision: sn.EtcdRevision, Node: sn.Node,
	}
}
