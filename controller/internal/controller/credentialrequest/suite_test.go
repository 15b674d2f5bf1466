package credentialrequest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	stdx509 "crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server, the reconciler in a manager, and
// one emulated control plane running the cluster's configuration.
var (
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
	node   *talosemu.Machine
)

const (
	ns          = "default"
	clusterName = "prod"
	// retention is short so the deletion of answered requests shows within the tests.
	retention = 4 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		err := setup(ctx, s)
		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

func setup(ctx context.Context, s *testenv.Suite) error {
	spec := &talosemu.Spec{
		Subnet:   "127.0.101.0/24",
		Machines: []talosemu.MachineSpec{{Name: "cp-1", Role: talosemu.RoleHintControlPlane}},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond),
			Reboot:  talosemu.Duration(100 * time.Millisecond),
			Boot:    talosemu.Duration(50 * time.Millisecond),
		},
	}

	var err error

	if world, err = talosemu.Start(ctx, spec, s.Dir); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	c := testCluster(clusterName, clusterName+"-secrets")

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	if err := k8s.Create(ctx, sec); err != nil {
		return err
	}

	if err := k8s.Create(ctx, c); err != nil {
		return err
	}

	// a cluster whose bundle Secret is gone
	if err := k8s.Create(ctx, testCluster("orphan", "orphan-secrets")); err != nil {
		return err
	}

	if node, err = world.Machine("cp-1"); err != nil {
		return err
	}

	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-1"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: clusterName, Address: node.IP(), Role: ichorv1alpha1.RoleControlPlane, Hostname: "cp-1",
			Identity: ichorv1alpha1.MachineIdentity{Serial: "SER-cp-1"},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}

	res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: theBun})
	if err != nil {
		return err
	}

	if err := node.ApplyInMaintenance(ctx, res.Bytes, 30*time.Second); err != nil {
		return err
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	if err := (&Reconciler{Retention: retention}).SetupWithManager(mgr); err != nil {
		return err
	}

	return testenv.StartManager(ctx, mgr)
}

func testCluster(name, secret string) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: secret},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

// waitTimeout bounds every wait of the tests.
const waitTimeout = testenv.WaitTimeout

// newKey makes a key pair and returns it with its PEM public key.
func newKey(t testing.TB) (*ecdsa.PrivateKey, string) {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	der, err := stdx509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	return key, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}
