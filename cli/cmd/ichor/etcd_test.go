package main

import (
	"context"
	"strings"
	"testing"
	"time"

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
