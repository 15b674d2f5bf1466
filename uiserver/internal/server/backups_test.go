package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func backups(t testing.TB, tok string) ichorv1.BackupServiceClient {
	return ichorv1.NewBackupServiceClient(grpcConn(t, tok))
}

// createBackup creates a backup of the served cluster with two listed snapshots.
func createBackup(t testing.TB, name, endpoint string) {
	t.Helper()
	ctx := context.Background()
	b := &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{
			ClusterName: testCluster, Schedule: "0 3 * * *",
			S3:               ichorv1alpha1.S3Destination{Endpoint: endpoint, Bucket: "etcd", Prefix: name, CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
			EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"},
		},
	}
	if err := admin.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), b) })
	b.Status.Snapshots = []ichorv1alpha1.SnapshotInfo{
		{Name: name + "/" + testNS + "/" + testCluster + "/snapshots/20261202T030000Z-r50.db.age", TakenAt: metav1.NewTime(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)), SizeBytes: 4 << 20, EtcdRevision: 50, Node: "cp-2"},
		{Name: name + "/" + testNS + "/" + testCluster + "/snapshots/20261201T030000Z-r42.db.age", TakenAt: metav1.NewTime(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)), SizeBytes: 4 << 20, EtcdRevision: 42, Node: "cp-1"},
	}
	if err := admin.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// The Backups page's API: the backups and their snapshots, Back up now as
// the user (an operator may, a viewer may not), and the restore: the preview
// names what refuses it (a store inside the cluster), the start needs the
// typed cluster name and an identity Secret and writes the etcd-restore
// operation as the user for the snapshot chosen; a second is refused while
// the first has not finished. REST serves the same.
func TestBackupsAPI(t *testing.T) {
	ctx := context.Background()
	createBackup(t, "nightly", "https://s3.example.com")
	createBackup(t, "inside", "http://minio.minio.svc:9000")

	var list *ichorv1.ListBackupsResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		list, err = backups(t, viewer(t)).ListBackups(ctx, &ichorv1.ListBackupsRequest{})
		if err == nil && len(list.GetBackups()) == 2 && len(list.GetBackups()[1].GetSnapshots()) == 2 && len(list.GetBackups()[0].GetSnapshots()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list: %v %v", list, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	inside, nightly := list.GetBackups()[0], list.GetBackups()[1]
	if nightly.GetName() != "nightly" || nightly.GetStore() != "https://s3.example.com/etcd/nightly" || nightly.GetStoreInCluster() != "" ||
		nightly.GetSnapshots()[0].GetShortName() != "20261202T030000Z-r50.db.age" || nightly.GetSnapshots()[0].GetEtcdRevision() != 50 || list.GetCluster() != testCluster {
		t.Errorf("nightly: %v", nightly)
	}
	if !strings.Contains(inside.GetStoreInCluster(), "minio.minio.svc is the name of a Service") {
		t.Errorf("inside: %v", inside)
	}

	_, err := backups(t, viewer(t)).BackUpNow(ctx, &ichorv1.BackUpNowRequest{Name: "nightly"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a viewer asked for a snapshot: %v", err)
	}
	now, err := backups(t, operator(t)).BackUpNow(ctx, &ichorv1.BackUpNowRequest{Name: "nightly"})
	if err != nil || now.GetToken() == "" || !now.GetBackup().GetRequested() {
		t.Fatalf("back up now: %v %v", now, err)
	}
	b := &ichorv1alpha1.TalosEtcdBackup{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "nightly"}, b); err != nil || b.Annotations[ichorv1alpha1.BackupRequestedAnnotation] != now.GetToken() {
		t.Errorf("the request annotation: %v %v", b.Annotations, err)
	}

	preview, err := backups(t, adminTok(t)).PreviewRestore(ctx, &ichorv1.PreviewRestoreRequest{Name: "inside", IdentitySecret: "restore-identity"})
	if err != nil || preview.GetSnapshot().GetEtcdRevision() != 50 || len(preview.GetSteps()) != 5 || len(preview.GetRefusals()) != 1 ||
		!strings.Contains(preview.GetRefusals()[0].GetRule(), "lives inside the cluster") {
		t.Errorf("preview of a store inside the cluster: %v %v", preview, err)
	}

	restore := func(tok string, mut func(*ichorv1.StartRestoreRequest)) (*ichorv1.StartRestoreResponse, error) {
		req := &ichorv1.StartRestoreRequest{Name: "nightly", Snapshot: "20261201T030000Z-r42.db.age", IdentitySecret: "restore-identity", ConfirmClusterName: testCluster}
		mut(req)
		return backups(t, tok).StartRestore(ctx, req)
	}
	if _, err := restore(adminTok(t), func(r *ichorv1.StartRestoreRequest) { r.ConfirmClusterName = "staging" }); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "type \""+testCluster+"\" to confirm") {
		t.Errorf("a wrong confirmation: %v", err)
	}
	if _, err := restore(adminTok(t), func(r *ichorv1.StartRestoreRequest) { r.IdentitySecret = "" }); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "kubectl -n "+testNS+" create secret generic restore-identity") {
		t.Errorf("no identity Secret: %v", err)
	}
	if _, err := restore(adminTok(t), func(r *ichorv1.StartRestoreRequest) { r.Name = "inside" }); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "override does not override this") {
		t.Errorf("a store inside the cluster: %v", err)
	}
	if _, err := restore(adminTok(t), func(r *ichorv1.StartRestoreRequest) { r.Snapshot = "nope.db.age" }); status.Code(err) != codes.NotFound {
		t.Errorf("an unlisted snapshot: %v", err)
	}

	started, err := restore(adminTok(t), func(*ichorv1.StartRestoreRequest) {})
	if err != nil {
		t.Fatal(err)
	}
	if got := started.GetOperation(); got.GetType() != ichorv1alpha1.OperationEtcdRestore || got.GetTo() != "20261201T030000Z-r42.db.age" {
		t.Errorf("the operation answered: %v", got)
	}
	op := getOperation(t, started.GetOperation().GetName())
	t.Cleanup(func() { _ = admin.Delete(context.Background(), op) })
	if r := op.Spec.EtcdRestore; op.Spec.Type != ichorv1alpha1.OperationEtcdRestore || r == nil || r.BackupName != "nightly" ||
		r.Snapshot != "nightly/"+testNS+"/"+testCluster+"/snapshots/20261201T030000Z-r42.db.age" || r.IdentityRef.Name != "restore-identity" ||
		r.ConfirmClusterName != testCluster || op.Spec.ClusterName != testCluster {
		t.Errorf("the operation written: %+v", op.Spec)
	}
	if _, err := restore(adminTok(t), func(*ichorv1.StartRestoreRequest) {}); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "has not finished: "+op.Name) {
		t.Errorf("a second restore: %v", err)
	}

	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/backups", viewer(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), "20261201T030000Z-r42.db.age") {
		t.Errorf("REST list: %d %v", code, body)
	}
}
