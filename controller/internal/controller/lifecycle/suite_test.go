package lifecycle_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server (Ichor's), one emulated world with
// a real etcd per control plane and one Kubernetes control plane on cp-1
// (the workload cluster), and a controller manager that the chaos test stops.
var (
	env     *testenv.Env
	scheme  *runtime.Scheme
	k8s     client.Client
	world   *talosemu.World
	theBun  *secrets.Bundle
	stopMgr context.CancelFunc
)

const (
	ns          = "default"
	clusterName = "lab"
	// waitTimeout bounds every wait: installs, etcd joins and the workload
	// API server's start on a shared 2-core machine.
	waitTimeout = 150 * time.Second
)

var machineNames = []string{"cp-1", "cp-2", "cp-3", "w-1"}

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, scheme, k8s = s.Env, s.Scheme, s.Env.Client

		err := setup(ctx, s.Dir)
		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

func setup(ctx context.Context, dir string) error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{Subnet: "127.0.81.0/24"}
	for _, n := range machineNames {
		role := talosemu.RoleHintWorker
		if strings.HasPrefix(n, "cp-") {
			role = talosemu.RoleHintControlPlane
		}

		spec.Machines = append(spec.Machines, talosemu.MachineSpec{Name: n, Role: role})
	}

	spec.Durations = talosemu.Durations{
		Install: talosemu.Duration(200 * time.Millisecond),
		Reboot:  talosemu.Duration(200 * time.Millisecond),
		Boot:    talosemu.Duration(100 * time.Millisecond),
	}

	if world, err = talosemu.Start(ctx, spec, dir, talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true}); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	cp1, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	c := testCluster(cp1.IP())

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	if err := k8s.Create(ctx, sec); err != nil {
		return err
	}

	// The cluster lock's Leases live in ichor-system, which the install manifest creates.
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}); err != nil {
		return err
	}

	if err := k8s.Create(ctx, c); err != nil {
		return err
	}

	// Discovery's part: one pending machine per node, with the fingerprint seen.
	for _, n := range machineNames {
		em, err := world.Machine(n)
		if err != nil {
			return err
		}

		tm := pendingMachine(n, em)
		if err := k8s.Create(ctx, tm); err != nil {
			return err
		}

		tm.Status.Stage = ichorv1alpha1.StageMaintenance
		tm.Status.MaintenanceFingerprint = em.MaintenanceFingerprint()

		if err := k8s.Status().Update(ctx, tm); err != nil {
			return err
		}
	}

	mctx, mcancel := context.WithCancel(ctx)
	stopMgr = mcancel

	return startManager(mctx)
}

// startManager runs the lifecycle and configuration reconcilers as
// cmd/main.go does, with short intervals.
func startManager(ctx context.Context) error {
	mgr, err := suite().NewManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	if err := (&talosmachine.Reconciler{DriftInterval: time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := newLifecycle().SetupWithManager(mgr); err != nil {
		return err
	}

	return testenv.StartManager(ctx, mgr)
}

func suite() *testenv.Suite { return &testenv.Suite{Env: env, Scheme: scheme} }

func newLifecycle() *lifecycle.Reconciler {
	return &lifecycle.Reconciler{
		PollInterval:    300 * time.Millisecond,
		MonitorInterval: time.Second,
		DrainTimeout:    30 * time.Second,
	}
}

func testCluster(endpoint string) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: endpoint},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 3, Schedulable: new(true)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

func pendingMachine(name string, em *talosemu.Machine) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{ichorv1alpha1.ClusterLabel: clusterName}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: clusterName,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: em.UUID(), Serial: "SER-" + name},
			Address:     em.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
		},
	}
}

// approve approves a machine as a person does (the webhook is not part of
// this package's world; its checks are tested with the webhooks).
func approve(t *testing.T, name, role string) {
	t.Helper()

	// The controllers write the machine too (its finalizer, labels): a
	// conflict is retried on a fresh read.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, name)
		now := metav1.Now()
		m.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now}
		m.Spec.Role = role
		m.Spec.Hostname = name
		m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}

		return k8s.Update(context.Background(), m)
	}))
}

func emu(t testing.TB, name string) *talosemu.Machine {
	t.Helper()

	em, err := world.Machine(name)
	if err != nil {
		t.Fatal(err)
	}

	return em
}

// cp1 connects to the first control plane as Ichor does.
func cp1(t testing.TB) *talos.Node {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, "cp-1").IP(), theBun)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(n.Close)

	return n
}

func rpcs(t testing.TB, name, method string) int {
	t.Helper()

	return emu(t, name).RPCCounts()["/machine.MachineService/"+method]
}

func getMachine(t testing.TB, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m))

	return m
}

func cond(m *ichorv1alpha1.TalosMachine, typ string) *metav1.Condition {
	return apimeta.FindStatusCondition(m.Status.Conditions, typ)
}

// waitProvisioned waits for Provisioned=True and returns the machine.
func waitProvisioned(t *testing.T, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	var m *ichorv1alpha1.TalosMachine

	testenv.Eventually(t, waitTimeout, name+" provisioned", func() error {
		m = getMachine(t, name)
		if c := cond(m, ichorv1alpha1.ProvisionedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("stage %q, Ready %v", m.Status.Stage, cond(m, ichorv1alpha1.ReadyCondition))
		}

		return nil
	})

	return m
}

// events lists the Events about a machine as "reason: note".
func events(t testing.TB, name string) []string {
	t.Helper()

	var list eventsv1.EventList

	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))

	var out []string

	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}

	return out
}
