// Package etcdrestore_test runs the etcd restore into the live cluster
// (TalosOperation type etcd-restore, controller/internal/controller/operation
// restore.go) end to end: a real S3 store (versitygw), the backup controller
// taking the snapshot, and an emulated cluster of three control planes, each
// with a real etcd member, and a real Kubernetes control plane on cp-1.
package etcdrestore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/etcdbackup"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server, the S3 store, one emulated
// world of three control planes, a manager running the machine, lifecycle
// and backup reconcilers, and a second manager running the operation
// reconciler, which the chaos test stops.
var (
	env      *testenv.Env
	scheme   *runtime.Scheme
	k8s      client.Client
	world    *talosemu.World
	theBun   *secrets.Bundle
	s3       *testenv.S3
	identity *age.X25519Identity
	tempDir  string
	stopOp   context.CancelFunc
	opDone   chan struct{}
)

const (
	ns          = "default"
	clusterName = "rst"
	bucket      = "etcd-backups"
	backupName  = "nightly"
	credsSecret = "s3-creds"
	ageSecret   = "backup-age"
	idSecret    = "restore-identity"
	waitTimeout = 240 * time.Second
)

var machineNames = []string{"cp-1", "cp-2", "cp-3"}

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, scheme, k8s = s.Env, s.Scheme, s.Env.Client
		tempDir = filepath.Join(s.Dir, "restore")

		err := setup(ctx, s)

		return func() {
			if world != nil {
				world.Close()
			}

			if s3 != nil {
				_ = s3.Stop()
			}
		}, err
	}))
}

func newManager() (ctrl.Manager, error) {
	return ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
	})
}

func setup(ctx context.Context, s *testenv.Suite) error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	if s3, err = testenv.StartS3(ctx, filepath.Join(s.Dir, "s3"), "", bucket); err != nil {
		return err
	}

	spec := &talosemu.Spec{Subnet: "127.0.131.0/24"}
	for _, n := range machineNames {
		spec.Machines = append(spec.Machines, talosemu.MachineSpec{Name: n, Role: talosemu.RoleHintControlPlane})
	}

	spec.Durations = talosemu.Durations{
		Install: talosemu.Duration(200 * time.Millisecond),
		Reboot:  talosemu.Duration(300 * time.Millisecond),
		Boot:    talosemu.Duration(100 * time.Millisecond),
	}

	world, err = talosemu.Start(ctx, spec, filepath.Join(s.Dir, "world"), talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true})
	if err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	if identity, err = age.GenerateX25519Identity(); err != nil {
		return err
	}

	cp1, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	c := testenv.TalosCluster(ns, clusterName)
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: cp1.IP()}
	c.Spec.SecretsBundleRef = ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"}
	c.Spec.ControlPlane = ichorv1alpha1.ControlPlaneTopology{Count: 3, Schedulable: new(true)}

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	for _, o := range []client.Object{
		sec, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}, c,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credsSecret}, Data: map[string][]byte{
			"accessKeyID": []byte(s3.AccessKeyID), "secretAccessKey": []byte(s3.SecretAccessKey),
		}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ageSecret}, Data: map[string][]byte{
			"recipients": []byte(identity.Recipient().String() + "\n"),
		}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: idSecret}, Data: map[string][]byte{
			ichorv1alpha1.DefaultIdentityKey: []byte("# the restore's identity\n" + identity.String() + "\n"),
		}},
		&ichorv1alpha1.TalosEtcdBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: backupName},
			Spec: ichorv1alpha1.TalosEtcdBackupSpec{
				ClusterName: clusterName, Schedule: "0 3 * * *",
				S3:               ichorv1alpha1.S3Destination{Endpoint: s3.Endpoint, Bucket: bucket, Prefix: "live", CredentialsRef: ichorv1alpha1.SecretReference{Name: credsSecret}},
				EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: ageSecret},
			},
		},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}

	mgr, err := newManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	if err := (&talosmachine.Reconciler{DriftInterval: 2 * time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&lifecycle.Reconciler{PollInterval: 300 * time.Millisecond, MonitorInterval: time.Second, DrainTimeout: 30 * time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&etcdbackup.Reconciler{RetryAfter: time.Hour, TempDir: s.Dir}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return err
	}

	if err := startOperations(ctx); err != nil {
		return err
	}

	return (testworld.Cluster{Client: k8s, World: world, Bundle: theBun, Namespace: ns, Name: clusterName, Machines: machineNames}).
		Provision(ctx, time.Now().Add(3*waitTimeout))
}

// newOperations is the operation reconciler with the tests' timings.
func newOperations() *operation.Reconciler {
	return &operation.Reconciler{
		PollInterval: 300 * time.Millisecond, LockWait: 300 * time.Millisecond, DrainTimeout: 60 * time.Second,
		RebootTimeout: 2 * time.Minute, APIServerSettle: 30 * time.Second, APIServerTimeout: 3 * time.Minute,
		TempDir: tempDir,
	}
}

// startOperations runs the operation reconciler in its own manager, until stopOperations.
func startOperations(ctx context.Context) error {
	mgr, err := newManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	if err := newOperations().SetupWithManager(mgr); err != nil {
		return err
	}

	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})

	go func() {
		defer close(done)

		_ = mgr.Start(mctx)
	}()

	if !mgr.GetCache().WaitForCacheSync(mctx) {
		cancel()

		return errors.New("the operation manager's cache did not sync")
	}

	stopOp, opDone = cancel, done

	return nil
}

// stopOperations stops the operation reconciler's manager and waits until it has stopped.
func stopOperations() {
	stopOp()
	<-opDone
}

// reconcileOnceInFreshController starts a manager (a controller process),
// runs one reconcile of the operation with a new reconciler, and stops it.
func reconcileOnceInFreshController(t *testing.T, name string) ctrl.Result {
	t.Helper()

	return testworld.ReconcileOperationOnce(t, newManager, newOperations(), client.ObjectKey{Namespace: ns, Name: name})
}

func emu(t testing.TB, name string) *talosemu.Machine {
	t.Helper()

	em, err := world.Machine(name)
	if err != nil {
		t.Fatal(err)
	}

	return em
}

// Talos methods the restore sends.
const (
	resetRPC     = "/machine.MachineService/Reset"
	recoverRPC   = "/machine.MachineService/EtcdRecover"
	bootstrapRPC = "/machine.MachineService/Bootstrap"
)

// rpcCounts are the Reset, EtcdRecover and Bootstrap calls of every machine.
func rpcCounts(t testing.TB) map[string][3]int {
	t.Helper()

	out := map[string][3]int{}

	for _, n := range machineNames {
		c := emu(t, n).RPCCounts()
		out[n] = [3]int{c[resetRPC], c[recoverRPC], c[bootstrapRPC]}
	}

	return out
}

// workload is a client of the emulated cluster's Kubernetes API, as admin.
func workload(t testing.TB) kubernetes.Interface {
	t.Helper()

	var k kubernetes.Interface

	testenv.Eventually(t, waitTimeout, "the cluster's kubeconfig", func() error {
		n, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, "cp-1").IP(), theBun)
		if err != nil {
			return err
		}
		defer n.Close()

		kc, err := n.Kubeconfig(context.Background())
		if err != nil {
			return err
		}

		cfg, err := clientConfig(kc)
		if err != nil {
			return err
		}

		k, err = kubernetes.NewForConfig(cfg)

		return err
	})

	return k
}

func getOp(t testing.TB, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	op := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op))

	return op
}

func waitPhase(t testing.TB, name, phase string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, 2*waitTimeout, name+" "+phase, func() error {
		op = getOp(t, name)
		if op.Status.FailureReason != "" {
			t.Fatalf("%s paused: %s", name, op.Status.FailureReason)
		}

		if op.Status.Phase != phase {
			return fmt.Errorf("phase %q, step %q, machines %+v", op.Status.Phase, op.Status.Step, op.Status.Machines)
		}

		return nil
	})

	return op
}
