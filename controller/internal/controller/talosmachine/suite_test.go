package talosmachine

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server, one controller manager and one
// small emulated world: a control plane and two workers, configured in
// TestMain the way provisioning (issue 8) would configure them.
var (
	env    *testenv.Env
	scheme *runtime.Scheme
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
	// cached is the manager's client: its cache serves the field indexes.
	cached client.Client
)

const (
	ns          = "default"
	clusterName = "prod"
	// driftInterval is short so drift shows within the tests' deadlines.
	driftInterval = 300 * time.Millisecond
)

// machineNames are the world's machines: the control plane first (workers get
// their API certificate from it).
var machineNames = []string{"cp-1", "w-1", "w-2"}

// diskMachine is the worker with two data disks, sda (serial DATA-A) and sdb (DATA-B).
const diskMachine = "w-1"

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, scheme, k8s = s.Env, s.Scheme, s.Env.Client

		err := setup(ctx, s)
		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

func setup(ctx context.Context, s *testenv.Suite) error {
	spec := &talosemu.Spec{Subnet: "127.0.77.0/24"}
	for i, n := range machineNames {
		role := talosemu.RoleHintWorker
		if i == 0 {
			role = talosemu.RoleHintControlPlane
		}

		ms := talosemu.MachineSpec{Name: n, Role: role}
		if n == diskMachine {
			// Two data disks beside the system disk, for the disk-role tests.
			ms.Disks = []talosemu.DiskSpec{
				{Type: talosemu.DiskNVMe},
				{Type: talosemu.DiskSATA, Size: "50GiB", Serial: new("DATA-A")},
				{Type: talosemu.DiskSATA, Size: "50GiB", Serial: new("DATA-B")},
			}
		}

		spec.Machines = append(spec.Machines, ms)
	}

	spec.Durations = talosemu.Durations{
		Install: talosemu.Duration(100 * time.Millisecond),
		Reboot:  talosemu.Duration(100 * time.Millisecond),
		Boot:    talosemu.Duration(50 * time.Millisecond),
	}

	var err error

	if world, err = talosemu.Start(ctx, spec, s.Dir); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	c := testCluster()

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

	for _, n := range machineNames {
		em, err := world.Machine(n)
		if err != nil {
			return err
		}

		tm := testMachine(n, em.IP())
		if err := configure(ctx, c, tm, em); err != nil {
			return fmt.Errorf("configuring %s: %w", n, err)
		}

		if err := k8s.Create(ctx, tm); err != nil {
			return err
		}

		// What provisioning (issue 8) records once the machine runs its configuration.
		tm.Status.Stage = ichorv1alpha1.StageRunning
		tm.Status.Installed = true
		apimeta.SetStatusCondition(&tm.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", Message: "test setup",
		})

		if err := k8s.Status().Update(ctx, tm); err != nil {
			return err
		}
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	cached = mgr.GetClient()

	r := &Reconciler{DriftInterval: driftInterval}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}

	return testenv.StartManager(ctx, mgr)
}

func testCluster() *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

func testMachine(name, ip string) *ichorv1alpha1.TalosMachine {
	role := ichorv1alpha1.RoleWorker
	if name == "cp-1" {
		role = ichorv1alpha1.RoleControlPlane
	}

	now := metav1.Now()

	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"pool": name}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: clusterName,
			Identity:    ichorv1alpha1.MachineIdentity{Serial: "SER-" + name},
			Address:     ip,
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        role,
			Hostname:    name,
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}
}

// configure sends a maintenance machine its rendered configuration, as
// provisioning does, and waits until it runs it.
func configure(ctx context.Context, c *ichorv1alpha1.TalosCluster, tm *ichorv1alpha1.TalosMachine, em *talosemu.Machine) error {
	res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: theBun})
	if err != nil {
		return err
	}

	return em.ApplyInMaintenance(ctx, res.Bytes, 30*time.Second)
}

// adminNode connects to an emulated machine as Ichor does.
func adminNode(t testing.TB, name string) *talos.Node {
	t.Helper()

	em, err := world.Machine(name)
	if err != nil {
		t.Fatal(err)
	}

	n, err := (&talos.Dialer{}).Dial(context.Background(), em.IP(), theBun)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(n.Close)

	return n
}

// eventually polls cond until it returns nil or the deadline passes.
// waitTimeout bounds every wait of the tests.
const waitTimeout = testenv.WaitTimeout

func getMachine(t testing.TB, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
		t.Fatal(err)
	}

	return m
}

var _ = corev1.EventTypeNormal
