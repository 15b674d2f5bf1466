package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The backup commands run here without a controller: the test answers a
// request by writing the status the controller writes (the controller's
// own tests take real snapshots).

func newBackup(ns, name string) *ichorv1alpha1.TalosEtcdBackup {
	return &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{
			ClusterName: "prod", Schedule: "0 3 * * *",
			S3: ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd", Prefix: "prod",
				CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
			EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"},
		},
	}
}

// answer waits for a request on the backup and writes the controller's
// answer: a stored snapshot, or the failure.
func answer(t *testing.T, ns, name string, ok bool) {
	t.Helper()

	var token string

	testenv.EventuallyOK(t, testenv.WaitTimeout, "the request annotation", func() (bool, string) {
		b := &ichorv1alpha1.TalosEtcdBackup{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return false, err.Error()
		}

		token = b.Annotations[ichorv1alpha1.BackupRequestedAnnotation]

		return token != "" && token != b.Status.LastHandledRequest, "no new token"
	})

	testenv.UpdateStatus(t, k8s, &ichorv1alpha1.TalosEtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, func(b *ichorv1alpha1.TalosEtcdBackup) {
		now := metav1.NewTime(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
		b.Status.LastHandledRequest = token
		b.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.SnapshotStoredReason,
			Message: "stored", LastTransitionTime: now}}

		if !ok {
			b.Status.LastFailureTime = &now
			b.Status.LastFailure = "EncryptionKeyUnavailable: the encryption Secret \"age\" does not exist"
			b.Status.Conditions[0].Status, b.Status.Conditions[0].Reason = metav1.ConditionFalse, ichorv1alpha1.EncryptionKeyUnavailableReason

			return
		}

		b.Status.LastSuccessfulTime = &now
		b.Status.Snapshots = append([]ichorv1alpha1.SnapshotInfo{{
			Name: "prod/" + ns + "/prod/snapshots/20261201T030000Z-r4242.db.age", TakenAt: now, SizeBytes: 3 << 20, EtcdRevision: 4242, Node: "cp-2",
		}}, b.Status.Snapshots...)
	})
}

// `ichor etcd backup now` sets a new request token; with --wait it follows
// the request to the snapshot, or fails with the controller's reason;
// `ichor etcd backup list` shows the snapshots. An unknown backup is named
// with those that exist.
func TestEtcdBackupNowAndList(t *testing.T) {
	ns := namespace(t, "etcd-backup")
	must(t, k8s.Create(context.Background(), newBackup(ns, "nightly")))

	mustFail(t, ichor(t, "-n", ns, "etcd", "backup", "now", "weekly"), `TalosEtcdBackup "weekly" not found`, "nightly")

	out := mustSucceed(t, ichor(t, "-n", ns, "etcd", "backup", "now", "nightly"))
	if !strings.Contains(out.stdout, "Requested a snapshot of cluster prod") {
		t.Errorf("now printed %q", out.stdout)
	}

	answer(t, ns, "nightly", true)

	done := make(chan result, 1)
	go func() { done <- ichor(t, "-n", ns, "etcd", "backup", "now", "nightly", "--wait", "--timeout", "1m") }()
	answer(t, ns, "nightly", true)

	if r := mustSucceed(t, <-done); !strings.Contains(r.stdout, "20261201T030000Z-r4242.db.age: etcd revision 4242") {
		t.Errorf("now --wait printed %q", r.stdout)
	}

	go func() { done <- ichor(t, "-n", ns, "etcd", "backup", "now", "nightly", "--wait", "--timeout", "1m") }()
	answer(t, ns, "nightly", false)
	mustFail(t, <-done, "the snapshot failed: EncryptionKeyUnavailable", "ichor etcd backup now nightly")

	list := mustSucceed(t, ichor(t, "-n", ns, "etcd", "backup", "list"))
	for _, want := range []string{"Backup", "nightly", "0 3 * * * (UTC)", "https://s3.example.com/etcd/prod", "20261201T030000Z-r4242.db.age", "4242", "cp-2", "Last failure"} {
		if !strings.Contains(list.stdout, want) {
			t.Errorf("list does not show %q:\n%s", want, list.stdout)
		}
	}
}

// `ichor etcd restore` refuses without an identity, with a bad identity file
// (naming the line, never its content) or a snapshot the backup does not
// list (naming those it lists); --dry-run prints the steps and writes
// nothing; a confirmed restore writes the identity Secret, owned by the
// etcd-restore operation that names it, for the newest snapshot; a second
// restore of the cluster is refused while the first has not finished.
func TestEtcdRestore(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "etcd-restore")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))
	must(t, k8s.Create(ctx, newBackup(ns, "nightly")))
	testenv.UpdateStatus(t, k8s, &ichorv1alpha1.TalosEtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"}}, func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Status.Snapshots = []ichorv1alpha1.SnapshotInfo{
			{Name: "prod/" + ns + "/prod/snapshots/20261202T030000Z-r50.db.age", TakenAt: metav1.NewTime(time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)), EtcdRevision: 50, Node: "cp-2"},
			{Name: "prod/" + ns + "/prod/snapshots/20261201T030000Z-r42.db.age", TakenAt: metav1.NewTime(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)), EtcdRevision: 42, Node: "cp-1"},
		}
	})

	id, err := age.GenerateX25519Identity()
	must(t, err)

	dir := t.TempDir()
	good, bad := filepath.Join(dir, "key.txt"), filepath.Join(dir, "bad.txt")
	must(t, os.WriteFile(good, []byte("# restore key\n"+id.String()+"\n"), 0o600))
	must(t, os.WriteFile(bad, []byte("AGE-SECRET-KEY-1SECRETLOOKINGBUTWRONG\n"), 0o600))

	restore := func(args ...string) []string {
		return append([]string{"-n", ns, "etcd", "restore", "--backup", "nightly"}, args...)
	}

	mustFail(t, ichor(t, restore()...), "--identity FILE", "--identity-secret NAME")
	r := mustFail(t, ichor(t, restore("--identity", bad)...), "line 1 is not an age identity", "nothing was changed")
	if strings.Contains(r.stderr, "SECRETLOOKING") {
		t.Errorf("the error quotes the identity file: %s", r.stderr)
	}
	mustFail(t, ichor(t, restore("--identity", good, "--snapshot", "nope.db.age")...), `lists no snapshot "nope.db.age"`, "20261201T030000Z-r42.db.age")
	mustFail(t, ichor(t, restore("--identity", good, "--backup", "weekly")...), `TalosEtcdBackup "weekly" not found`)

	dry := mustSucceed(t, ichor(t, restore("--identity", good, "--dry-run")...))
	for _, want := range []string{"20261202T030000Z-r50.db.age (revision 50", "into the live cluster prod", "reset every control plane once", "Nothing was changed"} {
		if !strings.Contains(dry.stdout, want) {
			t.Errorf("--dry-run does not say %q:\n%s", want, dry.stdout)
		}
	}

	mustFail(t, ichorWith(t, invocation{stdin: "staging\n"}, restore("--identity", good, "--snapshot", "20261201T030000Z-r42.db.age")...), "not confirmed")

	ops := func() []ichorv1alpha1.TalosOperation {
		list := &ichorv1alpha1.TalosOperationList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))
		return list.Items
	}
	secrets := func() []corev1.Secret {
		list := &corev1.SecretList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))
		return list.Items
	}
	if len(ops()) != 0 || len(secrets()) != 0 {
		t.Fatalf("a refused or unconfirmed restore wrote %d operations and %d Secrets", len(ops()), len(secrets()))
	}

	out := mustSucceed(t, ichorWith(t, invocation{stdin: "prod\n"}, restore("--identity", good, "--snapshot", "20261201T030000Z-r42.db.age")...))
	if !strings.Contains(out.stdout, "Started operation etcd-restore-") {
		t.Errorf("restore printed %q", out.stdout)
	}

	list := ops()
	if len(list) != 1 {
		t.Fatalf("%d operations", len(list))
	}
	op := list[0]
	want := ichorv1alpha1.EtcdRestore{BackupName: "nightly", Snapshot: "prod/" + ns + "/prod/snapshots/20261201T030000Z-r42.db.age", ConfirmClusterName: "prod",
		IdentityRef: ichorv1alpha1.SecretReference{Name: op.Name + "-identity"}}
	if op.Spec.Type != ichorv1alpha1.OperationEtcdRestore || op.Spec.EtcdRestore == nil || *op.Spec.EtcdRestore != want {
		t.Fatalf("the operation's spec: %+v", op.Spec)
	}

	sec := &corev1.Secret{}
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: op.Name + "-identity"}, sec))
	if string(sec.Data[ichorv1alpha1.DefaultIdentityKey]) != "# restore key\n"+id.String()+"\n" ||
		len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != op.UID {
		t.Errorf("the identity Secret: owners %+v, %d bytes", sec.OwnerReferences, len(sec.Data[ichorv1alpha1.DefaultIdentityKey]))
	}

	mustFail(t, ichor(t, append(restore("--identity-secret", op.Name+"-identity"), "--yes")...), "has not finished: "+op.Name)
}
