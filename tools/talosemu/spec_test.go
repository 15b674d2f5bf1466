package talosemu_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

func TestParseSpecErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown field", "machines:\n  - name: a\n    colour: red\nsubnet: 127.0.1.0/24\n", "field colour not found"},
		{"malformed yaml", "machines: [", "malformed spec"},
		{"no machines", "subnet: 127.0.1.0/24\n", "spec has no machines"},
		{"bad subnet", "subnet: 10.0.0.0/24\nmachines: [{}]\n", "must be an IPv4 range inside 127.0.0.0/8"},
		{"duplicate name", "subnet: 127.0.1.0/24\nmachines: [{name: a}, {name: a}]\n", `name "a" is already used by machines[0]`},
		{"duplicate address", "machines: [{name: a, address: 127.0.1.5}, {name: b, address: 127.0.1.5}]\n", "address 127.0.1.5 is already used"},
		{"no address", "machines: [{name: a}]\n", "no address and no subnet"},
		{"bad role", "subnet: 127.0.1.0/24\nmachines: [{role: master}]\n", `role "master" is not one of`},
		{"bad disk type", "subnet: 127.0.1.0/24\nmachines: [{disks: [{type: floppy}]}]\n", `type "floppy" is not one of nvme, virtio, sata`},
		{"bad size", "subnet: 127.0.1.0/24\nmachines: [{disks: [{size: lots}]}]\n", `size "lots" is not a positive number`},
		{"bad mac", "subnet: 127.0.1.0/24\nmachines: [{links: [{mac: 'zz:00'}]}]\n", `mac "zz:00"`},
		{"bad duration", "subnet: 127.0.1.0/24\ndurations: {install: soon}\nmachines: [{}]\n", `invalid duration "soon"`},
		{"subnet full", "subnet: 127.0.1.0/30\nmachines: [{}, {}, {}]\n", "has no address left for machine-3"},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := talosemu.ParseSpec([]byte(c.yaml))
			if err == nil {
				t.Fatalf("want error containing %q, got none", c.want)
			}

			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestGenerateSpecErrors(t *testing.T) {
	if _, err := talosemu.GenerateSpec(0, 0, "127.0.1.0/24"); err == nil || !strings.Contains(err.Error(), "--machines must be at least 1") {
		t.Fatalf("got %v", err)
	}

	if _, err := talosemu.GenerateSpec(2, 3, "127.0.1.0/24"); err == nil || !strings.Contains(err.Error(), "--controlplanes must be between 0 and 2") {
		t.Fatalf("got %v", err)
	}

	if _, err := talosemu.GenerateSpec(2, 0, "not-a-subnet"); err == nil || !strings.Contains(err.Error(), `subnet "not-a-subnet"`) {
		t.Fatalf("got %v", err)
	}
}

// TestSpecIdentityAndHardware starts machines from a YAML spec with an empty UUID, a duplicated
// UUID, explicit MACs and mixed disks, and reads them back through machinery's client.
func TestSpecIdentityAndHardware(t *testing.T) {
	spec, err := talosemu.ParseSpec([]byte(`
subnet: 127.77.250.0/24
durations: {boot: 10ms}
machines:
  - name: empty-uuid
    identity: {uuid: "", serial: "SER-1", manufacturer: "Acme"}
    links: [{name: eth0, mac: "0a:00:00:00:00:01"}, {name: eth1}]
  - name: dup-a
    role: controlplane
    identity: {uuid: "00000000-0000-0000-0000-000000000001"}
    disks:
      - {type: nvme, size: 512GiB, serial: "NVSER"}
      - {type: virtio, size: 16GiB}
      - {type: sata}
  - name: dup-b
    identity: {uuid: "00000000-0000-0000-0000-000000000001"}
`))
	if err != nil {
		t.Fatal(err)
	}

	w := startWorld(t, spec, "")

	read := func(name string) (*hardware.SystemInformation, *safe.List[*network.LinkStatus]) {
		m, err := w.Machine(name)
		if err != nil {
			t.Fatal(err)
		}

		cl := maintenanceClient(t, m.IP())

		si, err := safe.StateGetByID[*hardware.SystemInformation](t.Context(), cl.COSI, hardware.SystemInformationID)
		if err != nil {
			t.Fatal(err)
		}

		links, err := safe.StateListAll[*network.LinkStatus](t.Context(), cl.COSI)
		if err != nil {
			t.Fatal(err)
		}

		return si, &links
	}

	si, links := read("empty-uuid")
	if si.TypedSpec().UUID != "" || si.TypedSpec().SerialNumber != "SER-1" || si.TypedSpec().Manufacturer != "Acme" {
		t.Fatalf("identity %+v", si.TypedSpec())
	}

	macs := map[string]string{}
	for l := range links.All() {
		macs[l.Metadata().ID()] = l.TypedSpec().PermanentAddr.String()
	}

	if macs["eth0"] != "0a:00:00:00:00:01" || macs["eth1"] == "" || macs["eth1"] == macs["eth0"] {
		t.Fatalf("permanent MACs %v", macs)
	}

	a, _ := read("dup-a")
	b, _ := read("dup-b")

	if a.TypedSpec().UUID != b.TypedSpec().UUID || a.TypedSpec().SerialNumber == b.TypedSpec().SerialNumber {
		t.Fatalf("duplicated UUID machines: %+v / %+v", a.TypedSpec(), b.TypedSpec())
	}

	m, err := w.Machine("dup-a")
	if err != nil {
		t.Fatal(err)
	}

	cl := maintenanceClient(t, m.IP())

	resp, err := cl.Disks(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}

	for _, d := range resp.GetMessages()[0].GetDisks() {
		got[d.GetDeviceName()] = d.GetType().String() + "|" + d.GetSerial() + "|" + d.GetWwid()

		if d.GetDeviceName() == "/dev/nvme0n1" && d.GetSize() != 512<<30 {
			t.Fatalf("nvme size %d", d.GetSize())
		}
	}

	if !strings.HasPrefix(got["/dev/nvme0n1"], "NVME|NVSER|eui.") {
		t.Fatalf("nvme: %q", got["/dev/nvme0n1"])
	}

	if got["/dev/vda"] != "SSD||" {
		t.Fatalf("virtio: %q", got["/dev/vda"])
	}

	if !strings.HasPrefix(got["/dev/sda"], "SSD|") || strings.HasSuffix(got["/dev/sda"], "|") {
		t.Fatalf("sata: %q", got["/dev/sda"])
	}

	if info := m.Info(); info.RoleHint != talosemu.RoleHintControlPlane {
		t.Fatalf("role hint %q", info.RoleHint)
	}
}

func TestPortClash(t *testing.T) {
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.77.251.1:50000")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close() //nolint:errcheck

	spec, err := talosemu.GenerateSpec(2, 0, "127.77.251.0/24")
	if err != nil {
		t.Fatal(err)
	}

	_, err = talosemu.Start(t.Context(), spec, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "machine machine-1: address 127.77.251.1:50000 is not free") {
		t.Fatalf("want a port clash error naming the machine and address, got %v", err)
	}
}

func TestLoadSpecFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spec.yaml")

	if err := os.WriteFile(path, []byte("subnet: 127.0.1.0/24\nmachines: [{name: x, disks: [{type: tape}]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	_, err := talosemu.LoadSpec(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "machines[0] (x): disks[0]") {
		t.Fatalf("want an error naming the file and the machine, got %v", err)
	}

	if _, err := talosemu.LoadSpec(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file accepted")
	}
}
