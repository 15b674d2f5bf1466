package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func clusterDiscovery(t *testing.T) ichorv1alpha1.DiscoverySpec {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
		t.Fatal(err)
	}
	return c.Spec.Discovery
}

// TestAddDiscovery: an operator adds addresses and subnets as themselves; a
// viewer is refused by the API server; bad input changes nothing.
func TestAddDiscovery(t *testing.T) {
	hc := httpClient()
	before := clusterDiscovery(t)

	code, body := rest(t, hc, http.MethodPost, "/api/v1/cluster/discovery:add", viewer(t), `{"addresses":["10.9.0.5"]}`)
	if code != http.StatusForbidden {
		t.Fatalf("viewer add: %d %v, want 403", code, body)
	}
	for _, tc := range []struct{ body, want string }{
		{`{}`, "at least one address"},
		{`{"addresses":["10.9.0.0/24"]}`, "not an IP address"},
		{`{"subnets":["10.9.0.7/24"]}`, "did you mean 10.9.0.0/24"},
		{`{"subnets":["10.9.0.7"]}`, "put it in addresses"},
		{`{"addresses":["node-7"]}`, "not an IP address"},
	} {
		code, body := rest(t, hc, http.MethodPost, "/api/v1/cluster/discovery:add", operator(t), tc.body)
		msg, _ := body["message"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %q, want 400 saying %q", tc.body, code, msg, tc.want)
		}
	}
	if got := clusterDiscovery(t); !slices.Equal(got.Addresses, before.Addresses) || !slices.Equal(got.Subnets, before.Subnets) {
		t.Fatalf("refused requests changed discovery: %+v", got)
	}

	resp, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).AddDiscovery(context.Background(),
		&ichorv1.AddDiscoveryRequest{Addresses: []string{"10.9.0.5"}, Subnets: []string{"10.9.1.0/24"}})
	if err != nil {
		t.Fatalf("operator add: %v", err)
	}
	d := resp.GetCluster().GetDiscovery()
	if !slices.Contains(d.GetAddresses(), "10.9.0.5") || !slices.Contains(d.GetSubnets(), "10.9.1.0/24") {
		t.Fatalf("response discovery: %v", d)
	}
	got := clusterDiscovery(t)
	if !slices.Contains(got.Addresses, "10.9.0.5") || !slices.Contains(got.Subnets, "10.9.1.0/24") {
		t.Fatalf("stored discovery: %+v", got)
	}
	// Adding the same again changes nothing.
	if _, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).AddDiscovery(context.Background(),
		&ichorv1.AddDiscoveryRequest{Addresses: []string{"10.9.0.5"}}); err != nil {
		t.Fatal(err)
	}
	if again := clusterDiscovery(t); len(again.Addresses) != len(got.Addresses) {
		t.Fatalf("a repeated address was added twice: %v", again.Addresses)
	}
}

// TestApproveWithNetworkAndDiskRoles: the approval form's NIC, addresses and
// disk roles reach the TalosMachine; the shared checks refuse bad ones.
func TestApproveWithNetworkAndDiskRoles(t *testing.T) {
	ctx := context.Background()
	m := createMachine(t, "net-m1", ichorv1alpha1.ApprovalPending, "")
	// Other tests count the approved workers: take this one away afterwards.
	t.Cleanup(func() {
		if err := admin.Delete(context.Background(), m); err != nil {
			t.Error(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := machines(t, adminTok(t)).GetMachine(context.Background(), &ichorv1.GetMachineRequest{Name: m.Name})
			if status.Code(err) == codes.NotFound {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the backend still sees %s: %v", m.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	m.Status.Hardware.Disks = append(m.Status.Hardware.Disks,
		ichorv1alpha1.DiscoveredDisk{DevicePath: "/dev/sdb", Serial: "DATA-1", SizeBytes: 500 << 30, HasPartitions: true})
	m.Status.Hardware.Links = []ichorv1alpha1.DiscoveredLink{{Name: "enp1s0", PermanentMAC: "52:54:00:aa:bb:01"}, {Name: "enp2s0", PermanentMAC: "52:54:00:aa:bb:02"}}
	if err := admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitCached(t, m.Name, m.ResourceVersion)
	mc := machines(t, operator(t))
	base := func() *ichorv1.ApproveMachineRequest {
		return &ichorv1.ApproveMachineRequest{
			Name: "net-m1", Role: ichorv1alpha1.RoleWorker,
			InstallDisk: &ichorv1.DiskSelector{Serial: "SER-net-m1"},
			Disks:       []*ichorv1.DiskRole{{Disk: &ichorv1.DiskSelector{Serial: "DATA-1"}, Role: "userVolume", VolumeName: "data", ConfirmWipe: true}},
			Network: &ichorv1.MachineNetwork{MacAddress: "52:54:00:AA:BB:02", Addresses: []string{"10.0.0.9/24"}, Gateway: "10.0.0.1",
				Nameservers: []string{"10.0.0.53"}, Vlan: 20},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(r *ichorv1.ApproveMachineRequest)
		want   string
	}{
		{"unknown NIC", func(r *ichorv1.ApproveMachineRequest) { r.Network.MacAddress = "52:54:00:00:00:99" }, "52:54:00:aa:bb:01 (enp1s0)"},
		{"dhcp and static", func(r *ichorv1.ApproveMachineRequest) { r.Network.Dhcp = true }, "network.dhcp and network.addresses exclude each other"},
		{"bad vlan", func(r *ichorv1.ApproveMachineRequest) { r.Network.Vlan = 5000 }, "not a VLAN ID"},
		{"no wipe consent", func(r *ichorv1.ApproveMachineRequest) { r.Disks[0].ConfirmWipe = false }, "set its confirm_wipe"},
		{"user volume without name", func(r *ichorv1.ApproveMachineRequest) { r.Disks[0].VolumeName = "" }, "needs a name: set volume_name"},
		{"storage with a volume name", func(r *ichorv1.ApproveMachineRequest) { r.Disks[0].Role = "storage" }, "only a userVolume has a volume name"},
		{"storage without wipe consent", func(r *ichorv1.ApproveMachineRequest) {
			r.Disks[0].Role, r.Disks[0].VolumeName, r.Disks[0].ConfirmWipe = "storage", "", false
		}, "disk role storage on serial=DATA-1: /dev/sdb holds partitions"},
		{"unused with a wipe consent", func(r *ichorv1.ApproveMachineRequest) { r.Disks[0].Role, r.Disks[0].VolumeName = "unused", "" }, "an unused disk is left alone"},
		{"unknown disk", func(r *ichorv1.ApproveMachineRequest) { r.Disks[0].Disk.Serial = "NOPE" }, "matches serial=NOPE"},
		{"system role", func(r *ichorv1.ApproveMachineRequest) { r.Disks[0].Role = "system" }, "set it with install_disk"},
	} {
		r := base()
		tc.change(r)
		_, err := mc.ApproveMachine(ctx, r)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", tc.name, err, tc.want)
		}
	}
	if got, err := getMachine(t, "net-m1"); err != nil || got.Spec.Approval.State != ichorv1alpha1.ApprovalPending {
		t.Fatalf("a refused approval changed the machine: %v %+v", err, got.Spec.Approval)
	}

	resp, err := mc.ApproveMachine(ctx, base())
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	got, err := getMachine(t, "net-m1")
	if err != nil {
		t.Fatal(err)
	}
	n := got.Spec.Network
	if n.MACAddress != "52:54:00:aa:bb:02" || !slices.Equal(n.Addresses, []string{"10.0.0.9/24"}) || n.Gateway != "10.0.0.1" ||
		n.VLAN == nil || *n.VLAN != 20 || n.DHCP != nil {
		t.Errorf("network: %+v", n)
	}
	if len(got.Spec.Disks) != 1 || got.Spec.Disks[0].Role != "userVolume" || got.Spec.Disks[0].VolumeName != "data" || !got.Spec.Disks[0].ConfirmWipe {
		t.Errorf("disks: %+v", got.Spec.Disks)
	}
	pm := resp.GetMachine()
	if pm.GetNetwork().GetVlan() != 20 || len(pm.GetDisks()) != 1 || pm.GetInstallDisk().GetSerial() != "SER-net-m1" {
		t.Errorf("response machine: network %v disks %v install %v", pm.GetNetwork(), pm.GetDisks(), pm.GetInstallDisk())
	}
}
