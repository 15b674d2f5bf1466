package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/controller/internal/discovery"
	"github.com/maeshinshin/ichor/tools/talosemu"
)

// The tests' world lives in 127.77.8.0/24; the benchmark uses 127.77.0.0/22.
const testSubnet = "127.77.8.0/24"

var world *talosemu.World

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir, err := os.MkdirTemp("", "discovery-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)

		return 1
	}

	defer func() { _ = os.RemoveAll(dir) }()

	noUUID := ""
	virtioNoIDs := ""
	spec := &talosemu.Spec{
		Subnet: testSubnet,
		Machines: []talosemu.MachineSpec{
			{
				Name:     "m-1",
				Identity: talosemu.Identity{Serial: "SER-1", Manufacturer: "Acme", ProductName: "Box"},
				Disks: []talosemu.DiskSpec{
					{Type: "nvme", Size: "512GiB"},
					{Type: "virtio", Size: "20GiB", Serial: &virtioNoIDs, WWID: &virtioNoIDs},
				},
				Links:      []talosemu.LinkSpec{{Name: "eth0", MAC: "0a:00:00:00:08:02"}, {Name: "eth1", MAC: "0A:00:00:00:08:01"}},
				SecureBoot: true,
			},
			{Name: "no-uuid", Identity: talosemu.Identity{UUID: &noUUID, Serial: "SER-2"}},
			{Name: "configured", Role: talosemu.RoleHintControlPlane},
			{Name: "hung"},
			{Name: "pinned"},
		},
	}

	if world, err = talosemu.Start(ctx, spec, dir); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the emulated world: %v\n", err)

		return 1
	}

	defer world.Close()

	if err := configure(ctx, mustMachine("configured")); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: configuring a machine: %v\n", err)

		return 1
	}

	if err := mustMachine("hung").SetHung(true); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)

		return 1
	}

	return m.Run()
}

func mustMachine(name string) *talosemu.Machine {
	m, err := world.Machine(name)
	if err != nil {
		panic(err)
	}

	return m
}

// configure sends a maintenance machine a rendered configuration, as
// provisioning does, and waits until it runs it.
func configure(ctx context.Context, em *talosemu.Machine) error {
	bun, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		return err
	}

	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:         ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: em.IP()},
			SecretsBundleRef: ichorv1alpha1.SecretReference{Name: "other-secrets"},
			ControlPlane:     ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(true)},
			CNI:              ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: em.Name()},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "other", Address: em.IP(), Role: ichorv1alpha1.RoleControlPlane, Hostname: em.Name(),
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

func TestProbeMaintenanceReadsIdentityHardwareAndFingerprint(t *testing.T) {
	em := mustMachine("m-1")

	res, err := discovery.Probe(context.Background(), em.IP(), 0)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}

	info := em.Info()

	if res.Kind != discovery.KindMaintenance {
		t.Fatalf("kind %s, want %s", res.Kind, discovery.KindMaintenance)
	}

	if res.Fingerprint == "" || res.Fingerprint != em.MaintenanceFingerprint() {
		t.Errorf("fingerprint %q, want talosemu's maintenance fingerprint %q", res.Fingerprint, em.MaintenanceFingerprint())
	}

	if res.Identity.UUID == "" || res.Identity.UUID != info.UUID || res.Identity.Serial != "SER-1" || res.Hardware.Manufacturer != "Acme" || res.Hardware.ProductName != "Box" {
		t.Errorf("identity %q/%q/%q/%q, want %q/SER-1/Acme/Box", res.Identity.UUID, res.Identity.Serial, res.Hardware.Manufacturer, res.Hardware.ProductName, info.UUID)
	}

	if got, want := res.Identity.MACAddresses, []string{"0a:00:00:00:08:01", "0a:00:00:00:08:02"}; !slices.Equal(got, want) {
		t.Errorf("MACs %v, want %v (lower case, sorted)", got, want)
	}

	if res.TalosVersion != "v1.14.1" || res.Stage != "maintenance" {
		t.Errorf("version %q stage %q, want v1.14.1 maintenance", res.TalosVersion, res.Stage)
	}

	if res.SecureBoot == nil || !*res.SecureBoot {
		t.Errorf("SecureBoot %v, want true (SecurityState of a machine booted with SecureBoot)", res.SecureBoot)
	}

	if len(res.Hardware.Disks) != 2 {
		t.Fatalf("disks %+v, want 2", res.Hardware.Disks)
	}

	byPath := map[string]ichorv1alpha1.DiscoveredDisk{}
	for _, d := range res.Hardware.Disks {
		byPath[d.DevicePath] = d
	}

	nvme, vda := byPath["/dev/nvme0n1"], byPath["/dev/vda"]
	if nvme.WWID == "" || nvme.Serial == "" || !strings.HasPrefix(nvme.ByID, "/dev/disk/by-id/") || nvme.BusPath == "" || nvme.SizeBytes != 512<<30 {
		t.Errorf("nvme disk %+v: want WWID, serial, by-id, bus path and 512 GiB", nvme)
	}

	if vda.DevicePath == "" || vda.WWID != "" || vda.Serial != "" || vda.ByID != "" || vda.BusPath == "" {
		t.Errorf("virtio disk %+v: want only a bus path to key on", vda)
	}
}

func TestProbeEmptyUUID(t *testing.T) {
	res, err := discovery.Probe(context.Background(), mustMachine("no-uuid").IP(), 0)
	if err != nil {
		t.Fatal(err)
	}

	if res.Kind != discovery.KindMaintenance || res.Identity.UUID != "" || res.Identity.Serial != "SER-2" || len(res.Identity.MACAddresses) != 1 {
		t.Errorf("got %+v, want a maintenance node with no UUID, serial SER-2 and one MAC", res)
	}

	if res.SecureBoot == nil || *res.SecureBoot {
		t.Errorf("SecureBoot %v, want false (the machine boots without it)", res.SecureBoot)
	}
}

func TestProbeConfiguredNodeIsAlreadyConfigured(t *testing.T) {
	em := mustMachine("configured")
	em.ResetRPCCounts()

	res, err := discovery.Probe(context.Background(), em.IP(), 0)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}

	if res.Kind != discovery.KindAlreadyConfigured {
		t.Fatalf("kind %s, want %s", res.Kind, discovery.KindAlreadyConfigured)
	}

	if res.Identity.UUID != "" || len(res.Hardware.Disks) != 0 {
		t.Errorf("a configured node's hardware was read: %+v", res)
	}

	if res.Fingerprint == "" || res.Fingerprint == em.MaintenanceFingerprint() {
		t.Errorf("fingerprint %q: want the configured API certificate's, not the maintenance one", res.Fingerprint)
	}

	// Nothing but the one refused read reached the node's API.
	for method, n := range em.RPCCounts() {
		if method != "/cosi.resource.State/Get" && n > 0 {
			t.Errorf("the probe called %s on a configured node", method)
		}
	}
}

func TestProbeNothingListeningIsUnreachable(t *testing.T) {
	_, err := discovery.Probe(context.Background(), "127.77.8.250", 0)
	if !errors.Is(err, discovery.ErrUnreachable) {
		t.Fatalf("error %v, want one wrapping ErrUnreachable", err)
	}
}

func TestProbeHungNodeEndsAtTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()

	_, err := discovery.Probe(ctx, mustMachine("hung").IP(), 0)
	if err == nil || errors.Is(err, discovery.ErrUnreachable) {
		t.Fatalf("error %v: want a failed probe that is not 'nothing listens'", err)
	}
}

func TestProbeRefusesANonAddress(t *testing.T) {
	if _, err := discovery.Probe(context.Background(), "node-1.example", 0); err == nil || !strings.Contains(err.Error(), "not an IP address") {
		t.Fatalf("error %v, want 'not an IP address'", err)
	}
}

func TestScanFindsWhatAnswers(t *testing.T) {
	found, err := discovery.Scan(context.Background(), []netip.Prefix{netip.MustParsePrefix(testSubnet)}, 0, 32, time.Second)
	if err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}

	for _, f := range found {
		switch {
		case f.Err != nil:
			got[f.Address.String()] = "error"
		default:
			got[f.Address.String()] = string(f.Result.Kind)
		}
	}

	want := map[string]string{
		mustMachine("m-1").IP():        string(discovery.KindMaintenance),
		mustMachine("no-uuid").IP():    string(discovery.KindMaintenance),
		mustMachine("configured").IP(): string(discovery.KindAlreadyConfigured),
		mustMachine("hung").IP():       "error",
		mustMachine("pinned").IP():     string(discovery.KindMaintenance),
	}

	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scan found %v, want %v", got, want)
	}

	if !slices.IsSortedFunc(found, func(a, b discovery.Found) int { return a.Address.Compare(b.Address) }) {
		t.Errorf("results are not in address order")
	}
}

func TestHosts(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		n      int
		first  string
	}{
		{"10.0.0.0/30", 2, "10.0.0.1"},
		{"10.0.0.0/31", 2, "10.0.0.0"},
		{"10.0.0.7/32", 1, "10.0.0.7"},
		{"10.0.0.9/24", 254, "10.0.0.1"},
		{"10.0.0.0/16", 65534, "10.0.0.1"},
		{"fd00::/120", 256, "fd00::"},
	} {
		hosts, err := discovery.Hosts(netip.MustParsePrefix(tc.prefix))
		if err != nil {
			t.Errorf("%s: %v", tc.prefix, err)

			continue
		}

		if len(hosts) != tc.n || hosts[0].String() != tc.first {
			t.Errorf("%s: %d hosts from %s, want %d from %s", tc.prefix, len(hosts), hosts[0], tc.n, tc.first)
		}
	}

	for _, p := range []string{"10.0.0.0/15", "fd00::/64"} {
		if _, err := discovery.Hosts(netip.MustParsePrefix(p)); err == nil || !strings.Contains(err.Error(), "split it") {
			t.Errorf("%s: error %v, want a refusal that says how to split it", p, err)
		}
	}
}

// BenchmarkScan22With50Nodes scans a /22 of loopback (1,022 host addresses)
// where 50 emulated machines in maintenance mode answer. Goal: under 3 s per scan.
func BenchmarkScan22With50Nodes(b *testing.B) {
	ctx := context.Background()

	spec, err := talosemu.GenerateSpec(50, 0, "127.77.0.0/22")
	if err != nil {
		b.Fatal(err)
	}

	// Spread the machines over the /22 rather than packing them at its start.
	for i := range spec.Machines {
		spec.Machines[i].Address = netip.AddrFrom4([4]byte{127, 77, byte(i % 4), byte(1 + i*5)}).String()
	}

	w, err := talosemu.Start(ctx, spec, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}

	defer w.Close()

	prefix := []netip.Prefix{netip.MustParsePrefix("127.77.0.0/22")}

	b.ResetTimer()

	for b.Loop() {
		found, err := discovery.Scan(ctx, prefix, 0, discovery.DefaultConcurrency, 2*time.Second)
		if err != nil {
			b.Fatal(err)
		}

		n := 0

		for _, f := range found {
			if f.Err == nil && f.Result.Kind == discovery.KindMaintenance {
				n++
			}
		}

		if n != 50 {
			b.Fatalf("scan found %d maintenance nodes, want 50", n)
		}
	}
}
