package discovery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server, one controller manager and one
// emulated world in 127.77.16.0/24; each test uses its own cluster and its own
// machines (an identity is unique across every cluster).
var (
	env    *testenv.Env
	scheme *runtime.Scheme
	k8s    client.Client
	world  *talosemu.World
	// cached reads through the manager's cache, which the reconciler reads.
	cached client.Reader
)

const (
	ns = "default"
	// scanSubnet holds the scan test's three machines (127.77.16.1-3).
	scanSubnet = "127.77.16.0/28"
	// nobody is an address where nothing listens.
	nobody = "127.77.16.99"
	// scanRequestGap is the suite's shortest time between a scan and the
	// next one a scan request brings about (guard.MinScanRequestGap in production).
	scanRequestGap = 5 * time.Second
)

// worldSpec: machines of the scan subnet, then one machine per other test.
func worldSpec() *talosemu.Spec {
	none := ""
	dup := "5e1f0000-0000-4000-8000-00000000d0b1"

	return &talosemu.Spec{
		Subnet: "127.77.16.0/24",
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond),
			Reboot:  talosemu.Duration(100 * time.Millisecond),
			Boot:    talosemu.Duration(50 * time.Millisecond),
		},
		Machines: []talosemu.MachineSpec{
			{Name: "scan-1", Address: "127.77.16.1", Identity: talosemu.Identity{Serial: "S-1", Manufacturer: "Acme", ProductName: "Box"}, SecureBoot: true},
			{Name: "scan-2", Address: "127.77.16.2"},
			{Name: "scan-3", Address: "127.77.16.3"},
			{Name: "weak", Address: "127.77.16.17", Identity: talosemu.Identity{UUID: &none, Serial: "WEAK-1", Manufacturer: "NoName"}},
			{Name: "dup", Address: "127.77.16.18", Identity: talosemu.Identity{UUID: &dup, Serial: "DUP-1"}},
			{Name: "configured", Address: "127.77.16.21", Role: talosemu.RoleHintControlPlane},
			{Name: "added", Address: "127.77.16.22"},
			{Name: "held", Address: "127.77.16.25"},
			{Name: "returner", Address: "127.77.16.23"},
			{Name: "approved", Address: "127.77.16.24"},
			// late is powered off until TestDiscoveryScanNow turns it on.
			{Name: "late", Address: "127.77.16.41"},
		},
	}
}

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, setup))
}

func setup(ctx context.Context, s *testenv.Suite) (func(), error) {
	env, scheme, k8s = s.Env, s.Scheme, s.Env.Client

	var err error
	if world, err = talosemu.Start(ctx, worldSpec(), s.Dir); err != nil {
		return nil, fmt.Errorf("starting the emulated world: %w", err)
	}

	if err := configure(ctx, emMachine("configured")); err != nil {
		return world.Close, fmt.Errorf("configuring a machine: %w", err)
	}

	mgr, err := s.NewManager()
	if err != nil {
		return world.Close, err
	}

	// Scans repeat only on spec changes within the tests; rechecks are quick.
	cached = mgr.GetClient()

	// late waits powered off: only a scan after it boots can find it.
	if err := emMachine("late").PowerOff(); err != nil {
		return world.Close, err
	}

	r := &Reconciler{DefaultInterval: time.Hour, RecheckInterval: 200 * time.Millisecond, ProbeTimeout: 2 * time.Second, ScanRequestGap: scanRequestGap}
	if err := r.SetupWithManager(mgr); err != nil {
		return world.Close, err
	}

	return world.Close, testenv.StartManager(ctx, mgr)
}

func emMachine(name string) *talosemu.Machine {
	m, err := world.Machine(name)
	if err != nil {
		panic(err)
	}

	return m
}

func testCluster(name string, d ichorv1alpha1.DiscoverySpec) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
			Discovery:         d,
		},
	}
}

// configure sends a maintenance machine a configuration of a foreign cluster,
// as another tool would have, and waits until it runs it.
func configure(ctx context.Context, em *talosemu.Machine) error {
	bun, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		return err
	}

	c := testCluster("foreign", ichorv1alpha1.DiscoverySpec{})
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: em.IP()}
	c.Spec.ControlPlane.Schedulable = new(true)
	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: em.Name()},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "foreign", Address: em.IP(), Role: ichorv1alpha1.RoleControlPlane, Hostname: em.Name(),
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}

	res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: bun})
	if err != nil {
		return err
	}

	return em.ApplyInMaintenance(ctx, res.Bytes, 30*time.Second)
}

// waitTimeout bounds every wait of the tests.
const waitTimeout = testenv.WaitTimeout

// machinesOf lists the TalosMachines labelled with the cluster.
func machinesOf(t testing.TB, cluster string) []ichorv1alpha1.TalosMachine {
	t.Helper()

	var list ichorv1alpha1.TalosMachineList
	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{ichorv1alpha1.ClusterLabel: cluster}))

	return list.Items
}

// resultFor waits for the cluster's discovery result of address and returns it.
func resultFor(t testing.TB, cluster, address string) ichorv1alpha1.DiscoveryResult {
	t.Helper()

	var out ichorv1alpha1.DiscoveryResult

	testenv.Eventually(t, waitTimeout, fmt.Sprintf("a discovery result for %s on %s", address, cluster), func() error {
		c := &ichorv1alpha1.TalosCluster{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: cluster}, c); err != nil {
			return err
		}

		for _, e := range c.Status.Discovery.Addresses {
			if e.Address == address {
				out = e

				return nil
			}
		}

		return errors.New("no result yet")
	})

	return out
}

// waitCached waits until the manager's cache, which the reconciler reads, holds the machine.
func waitCached(t testing.TB, m *ichorv1alpha1.TalosMachine) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, "the cache holds "+m.Name, func() error {
		return cached.Get(context.Background(), client.ObjectKeyFromObject(m), &ichorv1alpha1.TalosMachine{})
	})
}
