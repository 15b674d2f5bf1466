package etcdrestore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func clientConfig(kubeconfig []byte) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}

	cfg.Timeout = 20 * time.Second

	return cfg, nil
}

// takeBackup asks the backup controller for a snapshot now (`ichor etcd
// backup now`) and returns its key.
func takeBackup(t testing.TB, token string) string {
	t.Helper()

	ctx := context.Background()
	b := &ichorv1alpha1.TalosEtcdBackup{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: backupName}, b))

	patch := client.MergeFrom(b.DeepCopy())
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}

	b.Annotations[ichorv1alpha1.BackupRequestedAnnotation] = token
	testenv.Must(t, k8s.Patch(ctx, b, patch))

	var key string

	testenv.Eventually(t, waitTimeout, "the snapshot "+token, func() error {
		testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: backupName}, b))

		if b.Status.LastHandledRequest != token {
			return fmt.Errorf("not handled yet: %+v", b.Status.Conditions)
		}

		if b.Status.LastFailureTime != nil && (b.Status.LastSuccessfulTime == nil || b.Status.LastFailureTime.After(b.Status.LastSuccessfulTime.Time)) {
			t.Fatalf("the snapshot failed: %s", b.Status.LastFailure)
		}

		key = b.Status.Snapshots[0].Name

		return nil
	})

	return key
}

// putConfigMap writes a ConfigMap into the emulated cluster's API.
func putConfigMap(t testing.TB, k kubernetes.Interface, name string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, "ConfigMap "+name, func() error {
		_, err := k.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"written": name},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}

		return err
	})
}

// configMapExists reads a ConfigMap through the cluster's API, waiting for the API.
func configMapExists(t testing.TB, k kubernetes.Interface, name string) bool {
	t.Helper()

	var exists bool

	testenv.Eventually(t, waitTimeout, "reading ConfigMap "+name, func() error {
		_, err := k.CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			exists = false

			return nil
		}

		exists = err == nil

		return err
	})

	return exists
}

// restoreOp is the operation `ichor etcd restore` writes.
func restoreOp(name, snapshot string) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: clusterName, Type: ichorv1alpha1.OperationEtcdRestore,
			EtcdRestore: &ichorv1alpha1.EtcdRestore{
				BackupName: backupName, Snapshot: snapshot, ConfirmClusterName: clusterName,
				IdentityRef: ichorv1alpha1.SecretReference{Name: idSecret},
			},
		},
	}
}

// checkEtcd checks that etcd runs with every control plane a healthy voting member.
func checkEtcd(t testing.TB) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, "etcd with three voting members, each healthy", func() error {
		for _, n := range machineNames {
			node, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, n).IP(), theBun)
			if err != nil {
				return err
			}

			healthy := node.EtcdHealthy(context.Background())
			members, err := node.EtcdMembers(context.Background())
			node.Close()

			if err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}

			if !healthy {
				return fmt.Errorf("%s: its etcd member does not answer", n)
			}

			var names []string

			for _, m := range members {
				if !m.Learner {
					names = append(names, m.Hostname)
				}
			}

			slices.Sort(names)

			if !slices.Equal(names, machineNames) {
				return fmt.Errorf("%s lists the voting members %v", n, names)
			}
		}

		return nil
	})
}

// marker reads the marker of the restore op from the store.
func marker(t testing.TB, op *ichorv1alpha1.TalosOperation) *etcdbackup.Marker {
	t.Helper()

	st, err := store.Open(store.Destination{Endpoint: s3.Endpoint, Bucket: bucket, Prefix: "live", AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey})
	testenv.Must(t, err)

	uid := string(op.UID)
	if a := op.Annotations[ichorv1alpha1.RestoreMarkerAnnotation]; a != "" {
		uid = a
	}

	m, err := st.GetMarker(context.Background(), etcdbackup.MarkerKey("live", ns, clusterName, op.Name, uid))
	testenv.Must(t, err)

	return m
}

// Rule: a restore into the live cluster brings etcd back to the snapshot on
// every control plane: an object written before the snapshot is there, one
// written after it is gone, etcd runs with every control plane a healthy
// voting member, the Kubernetes API answers. Every control plane is reset
// (EPHEMERAL wiped, as Talos's recovery procedure does) at least once and at
// most twice (a second time only if it joined an old member while coming
// back), and exactly one EtcdRecover and one Bootstrap go to the first. The
// marker in the store says it succeeded.
func TestLiveRestore(t *testing.T) {
	k := workload(t)
	putConfigMap(t, k, "before-snapshot")

	key := takeBackup(t, "live-1")

	putConfigMap(t, k, "after-snapshot")

	if !configMapExists(t, k, "after-snapshot") {
		t.Fatal("the object written after the snapshot is not there before the restore")
	}

	before := rpcCounts(t)

	testenv.Must(t, k8s.Create(context.Background(), restoreOp("restore-live", key)))

	op := waitPhase(t, "restore-live", ichorv1alpha1.OperationSucceeded)
	t.Logf("restore: %s", readyMessage(op))

	after := rpcCounts(t)

	for _, n := range machineNames {
		resets := after[n][0] - before[n][0]
		if resets < 1 || resets > 2 {
			t.Errorf("%s got %d Reset calls, want 1 (2 if it joined an old member on its way back)", n, resets)
		}

		want := [2]int{0, 0}
		if n == "cp-1" {
			want = [2]int{1, 1}
		}

		if got := [2]int{after[n][1] - before[n][1], after[n][2] - before[n][2]}; got != want {
			t.Errorf("%s got %d EtcdRecover and %d Bootstrap calls, want %v", n, got[0], got[1], want)
		}
	}

	checkEtcd(t)

	k = workload(t)
	if !configMapExists(t, k, "before-snapshot") {
		t.Error("the object written before the snapshot is gone after the restore")
	}

	if configMapExists(t, k, "after-snapshot") {
		t.Error("the object written after the snapshot survived the restore")
	}

	if m := marker(t, op); m == nil || m.Phase != etcdbackup.MarkerSucceeded || !m.Bootstrapped || m.Snapshot.Key != key {
		t.Errorf("the restore's marker: %+v", m)
	}

	for _, p := range op.Status.Machines {
		if p.Phase != ichorv1alpha1.MachineDone {
			t.Errorf("machine %s: %+v", p.Name, p)
		}
	}

	waitLockReleased(t)
}

func readyMessage(op *ichorv1alpha1.TalosOperation) string {
	for _, c := range op.Status.Conditions {
		if c.Type == ichorv1alpha1.ReadyCondition {
			return c.Message
		}
	}

	return ""
}

// Rule (chaos): with the controller killed after every reconcile (each one a
// new controller process), and the operation deleted once the Bootstrap was
// sent (as the rolled-back API of a cluster that runs Ichor itself loses
// it), the backup controller recreates the operation from its marker, the
// restore completes from the marker, and the first control plane gets
// exactly one EtcdRecover and one Bootstrap.
func TestLiveRestoreChaos(t *testing.T) {
	stopOperations()

	defer func() { testenv.Must(t, startOperations(context.Background())) }()

	k := workload(t)
	putConfigMap(t, k, "before-chaos")

	key := takeBackup(t, "chaos-1")

	putConfigMap(t, k, "after-chaos")

	before := rpcCounts(t)

	const name = "restore-chaos"

	testenv.Must(t, k8s.Create(context.Background(), restoreOp(name, key)))

	first := getOp(t, name)
	deleted := false

	var last *ichorv1alpha1.TalosOperation

	chaos := testworld.RunChaos(t, 3*waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, name) }, func() testworld.ChaosStep {
		op := &ichorv1alpha1.TalosOperation{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op); err != nil {
			if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}

			// Waiting for the backup controller to recreate it from the marker.
			return testworld.ChaosStep{Wait: 200 * time.Millisecond}
		}

		last = op
		st := testworld.OperationStep(op, nil)
		if op.Status.FailureReason != "" && !st.Done {
			st.Failed = op.Status.FailureReason
		}

		if m := marker(t, op); !st.Done && !deleted && m != nil && m.Bootstrapped {
			// The rollback: the restored API does not know the operation.
			testenv.Must(t, client.IgnoreNotFound(k8s.Delete(context.Background(), op)))

			deleted = true
		}

		return st
	})

	if last.Annotations[ichorv1alpha1.RestoreMarkerAnnotation] != string(first.UID) {
		t.Errorf("the operation that completed was not recreated from the first one's marker: annotations %v (steps %s)", last.Annotations, chaos)
	}

	if !deleted {
		t.Fatal("the operation was never deleted after its Bootstrap: the recreation was not exercised")
	}

	after := rpcCounts(t)

	if got := [2]int{after["cp-1"][1] - before["cp-1"][1], after["cp-1"][2] - before["cp-1"][2]}; got != [2]int{1, 1} {
		t.Errorf("cp-1 got %d EtcdRecover and %d Bootstrap calls across the restarts, want exactly 1 each", got[0], got[1])
	}

	for _, n := range machineNames {
		if resets := after[n][0] - before[n][0]; resets < 1 || resets > 2 {
			t.Errorf("%s got %d Reset calls across the restarts, want 1 (2 if it joined an old member on its way back)", n, resets)
		}
	}

	checkEtcd(t)

	k = workload(t)
	if !configMapExists(t, k, "before-chaos") || configMapExists(t, k, "after-chaos") {
		t.Error("the cluster does not hold the snapshot's objects: before-chaos should be there, after-chaos gone")
	}
}

// waitLockReleased waits until nobody holds the cluster's lock.
func waitLockReleased(t testing.TB) {
	t.Helper()

	testenv.Eventually(t, 30*time.Second, "the cluster lock given back", func() error {
		h, err := (&lock.Locker{Client: k8s}).Holder(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName})
		if err != nil {
			return err
		}

		if h != "" {
			return fmt.Errorf("held by %s", h)
		}

		return nil
	})
}
