package hook_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server, an emulated world of one
// schedulable control plane and one worker with a real Kubernetes control
// plane on cp-1 (the workload cluster, where Longhorn's CRDs go), and a
// manager running the lifecycle and configuration reconcilers with the
// Longhorn hook, as cmd/main.go registers them.
var (
	env    *testenv.Env
	scheme *runtime.Scheme
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
	// storageHook is the manager's hook; tests call it directly too.
	storageHook *hook.Longhorn
)

const (
	ns          = "default"
	clusterName = "lab"
	waitTimeout = 150 * time.Second
)

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
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{Subnet: "127.0.96.0/24", Machines: []talosemu.MachineSpec{
		{Name: "cp-1", Role: talosemu.RoleHintControlPlane},
		{Name: "w-1", Role: talosemu.RoleHintWorker},
	}}
	spec.Durations = talosemu.Durations{
		Install: talosemu.Duration(200 * time.Millisecond),
		Reboot:  talosemu.Duration(200 * time.Millisecond),
		Boot:    talosemu.Duration(100 * time.Millisecond),
	}

	if world, err = talosemu.Start(ctx, spec, s.Dir, talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true}); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	cp1, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	c := testenv.TalosCluster(ns, clusterName)
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: cp1.IP()}
	c.Spec.ControlPlane = ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(true)}

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	for _, o := range []client.Object{sec, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}, c} {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}

	for _, em := range world.Machines() {
		tm := &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: em.Name(), Labels: map[string]string{ichorv1alpha1.ClusterLabel: clusterName}},
			Spec: ichorv1alpha1.TalosMachineSpec{
				ClusterName: clusterName,
				Identity:    ichorv1alpha1.MachineIdentity{UUID: em.UUID(), Serial: "SER-" + em.Name()},
				Address:     em.IP(),
				Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
			},
		}
		if err := k8s.Create(ctx, tm); err != nil {
			return err
		}

		tm.Status.Stage = ichorv1alpha1.StageMaintenance
		tm.Status.MaintenanceFingerprint = em.MaintenanceFingerprint()

		if err := k8s.Status().Update(ctx, tm); err != nil {
			return err
		}
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	if err := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}

	storageHook = &hook.Longhorn{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}

	if err := (&talosmachine.Reconciler{DriftInterval: time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	lc := &lifecycle.Reconciler{Storage: storageHook, PollInterval: 300 * time.Millisecond, MonitorInterval: time.Second, DrainTimeout: 30 * time.Second}
	if err := lc.SetupWithManager(mgr); err != nil {
		return err
	}

	return testenv.StartManager(ctx, mgr)
}

func emu(t testing.TB, name string) *talosemu.Machine {
	t.Helper()

	em, err := world.Machine(name)
	testenv.Must(t, err)

	return em
}

func getMachine(t testing.TB, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m))

	return m
}

// approve approves a machine as a person does.
func approve(t *testing.T, name, role string) {
	t.Helper()

	m := getMachine(t, name)
	now := metav1.Now()
	m.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now}
	m.Spec.Role = role
	m.Spec.Hostname = name
	m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}
	testenv.Must(t, k8s.Update(context.Background(), m))
}

func waitProvisioned(t *testing.T, name string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, name+" provisioned", func() error {
		m := getMachine(t, name)
		if c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("stage %q, Ready %v", m.Status.Stage, apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ReadyCondition))
		}

		return nil
	})
}

// workloadConfig is the workload cluster's admin configuration, from cp-1 as Ichor reads it.
func workloadConfig(t testing.TB) *rest.Config {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, "cp-1").IP(), theBun)
	testenv.Must(t, err)

	defer n.Close()

	kc, err := n.Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	return cfg
}

func contains(s string, parts ...string) error {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return fmt.Errorf("%q does not say %q", s, p)
		}
	}

	return nil
}
