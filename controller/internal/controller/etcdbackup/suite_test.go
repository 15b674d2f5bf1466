package etcdbackup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server with the reconciler in a
// manager, an emulated cluster of two control planes running real etcd
// members, and a real S3 server (versitygw) on loopback.
var (
	k8s      client.Client
	world    *talosemu.World
	theBun   *secrets.Bundle
	s3       *testenv.S3
	identity *age.X25519Identity
	worldDir string
	// reconciler is the one in the manager (the benchmark calls its attempt).
	reconciler *Reconciler
)

const (
	ns          = "default"
	clusterName = "prod"
	bucket      = "etcd-backups"
	credsSecret = "s3-creds"
	ageSecret   = "backup-age"
	// retryAfter is short so a failed attempt is retried within the tests.
	retryAfter = 2 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		err := setup(ctx, s)

		return func() {
			if world != nil {
				world.Close()
			}

			_ = s3.Stop()
		}, err
	}))
}

func setup(ctx context.Context, s *testenv.Suite) error {
	var err error

	if s3, err = testenv.StartS3(ctx, filepath.Join(s.Dir, "s3"), "", bucket); err != nil {
		return err
	}

	spec := &talosemu.Spec{
		Subnet: "127.0.123.0/24",
		Machines: []talosemu.MachineSpec{
			{Name: "cp-1", Role: talosemu.RoleHintControlPlane},
			{Name: "cp-2", Role: talosemu.RoleHintControlPlane},
		},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond),
			Reboot:  talosemu.Duration(100 * time.Millisecond),
			Boot:    talosemu.Duration(50 * time.Millisecond),
		},
	}

	worldDir = filepath.Join(s.Dir, "world")

	if world, err = talosemu.Start(ctx, spec, worldDir); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	c := testenv.TalosCluster(ns, clusterName)
	c.Spec.SecretsBundleRef = ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"}
	c.Spec.ControlPlane.Count = 2

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	if identity, err = age.GenerateX25519Identity(); err != nil {
		return err
	}

	for _, o := range []client.Object{
		sec, c,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credsSecret}, Data: map[string][]byte{
			"accessKeyID": []byte(s3.AccessKeyID), "secretAccessKey": []byte(s3.SecretAccessKey),
		}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ageSecret}, Data: map[string][]byte{
			"recipients": []byte("# the backup's recipient\n" + identity.Recipient().String() + "\n"),
		}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}

	if err := provision(ctx, c); err != nil {
		return err
	}

	// Keys for the snapshots to hold (Kubernetes does not run here).
	if err := etcdPut(ctx, "registry/test", 10, 100); err != nil {
		return fmt.Errorf("writing to etcd: %w", err)
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	if err := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}

	reconciler = &Reconciler{RetryAfter: retryAfter, TempDir: s.Dir}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return err
	}

	return testenv.StartManager(ctx, mgr)
}

// provision creates the TalosMachines, configures both control planes
// through maintenance mode, bootstraps etcd on cp-1 and waits until cp-2
// joined it.
func provision(ctx context.Context, c *ichorv1alpha1.TalosCluster) error {
	now := metav1.Now()

	for _, em := range world.Machines() {
		tm := &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: em.Name()},
			Spec: ichorv1alpha1.TalosMachineSpec{
				ClusterName: clusterName, Address: em.IP(), Role: ichorv1alpha1.RoleControlPlane, Hostname: em.Name(),
				Identity: ichorv1alpha1.MachineIdentity{Serial: "SER-" + em.Name()},
				Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
				Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
			},
		}

		res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: theBun})
		if err != nil {
			return err
		}

		if err := em.ApplyInMaintenance(ctx, res.Bytes, 60*time.Second); err != nil {
			return fmt.Errorf("configuring %s: %w", em.Name(), err)
		}

		if err := k8s.Create(ctx, tm); err != nil {
			return err
		}
	}

	cp1, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	deadline := time.Now().Add(3 * waitTimeout)

	for bootstrapped := false; ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not come up with two members (bootstrapped: %v)", bootstrapped)
		}

		n, err := (&talos.Dialer{}).Dial(ctx, cp1.IP(), theBun)
		if err != nil {
			continue
		}

		if !bootstrapped {
			_, err = n.Client().MachineClient.Bootstrap(ctx, &machine.BootstrapRequest{})
			bootstrapped = err == nil || status.Code(err) == codes.AlreadyExists
		}

		members, err := n.EtcdMembers(ctx)
		n.Close()

		if err == nil && len(members) == 2 && !members[0].Learner && !members[1].Learner {
			return nil
		}
	}
}

// etcdPut writes n values of size bytes into the cluster's etcd through
// cp-1's member (with the member's own client certificate, as an etcd
// client on the node would), so snapshots hold keys and revisions.
func etcdPut(ctx context.Context, prefix string, n, size int) error {
	cp1, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	pki := filepath.Join(worldDir, "cp-1", "pki", "etcd")

	tlsConf, err := transport.TLSInfo{
		CertFile: filepath.Join(pki, "member.crt"), KeyFile: filepath.Join(pki, "member.key"), TrustedCAFile: filepath.Join(pki, "ca.crt"),
	}.ClientConfig()
	if err != nil {
		return err
	}

	c, err := clientv3.New(clientv3.Config{
		Endpoints: []string{"https://" + cp1.IP() + ":2379"}, TLS: tlsConf, DialTimeout: 10 * time.Second, Logger: zap.NewNop(),
	})
	if err != nil {
		return err
	}

	defer c.Close() //nolint:errcheck // test

	val := strings.Repeat("x", size)

	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("/%s/%06d", prefix, i), val); err != nil {
			return err
		}
	}

	return nil
}

// waitTimeout bounds every wait of the tests.
const waitTimeout = testenv.WaitTimeout

// newBackup is a backup of the cluster into the test store, under its own
// prefix so the tests do not see each other's snapshots.
func newBackup(name string, mut ...func(*ichorv1alpha1.TalosEtcdBackup)) *ichorv1alpha1.TalosEtcdBackup {
	b := &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{
			ClusterName: clusterName,
			Schedule:    "0 3 * * *",
			S3: ichorv1alpha1.S3Destination{
				Endpoint: s3.Endpoint, Bucket: bucket, Prefix: name,
				CredentialsRef: ichorv1alpha1.SecretReference{Name: credsSecret},
			},
			EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: ageSecret},
		},
	}
	for _, m := range mut {
		m(b)
	}

	return b
}
