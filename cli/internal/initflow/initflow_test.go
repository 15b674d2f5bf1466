package initflow

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

func TestPresetTopology(t *testing.T) {
	for preset, want := range map[string]Topology{
		PresetSingle:    {ControlPlanes: 1, Schedulable: true},
		PresetCompactHA: {ControlPlanes: 3, Schedulable: true},
		PresetStandard:  {ControlPlanes: 3},
		PresetLarge:     {ControlPlanes: 5},
	} {
		got, err := PresetTopology(preset)
		if err != nil || got != want {
			t.Errorf("PresetTopology(%q) = %+v, %v; want %+v", preset, got, err, want)
		}
	}

	if _, err := PresetTopology("huge"); err == nil || !strings.Contains(err.Error(), "single, compact-ha, standard, large") {
		t.Errorf("an unknown preset gave %v; want the list of presets", err)
	}
}

func TestValidateDefaults(t *testing.T) {
	o := Options{Cluster: "c", Preset: PresetStandard, Node: "10.5.0.2"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}

	if o.Namespace != "ichor-system" || o.Tunnel != "vxlan" || o.Endpoint != "10.5.0.2" ||
		o.EndpointType != ichorv1alpha1.EndpointTypeNode || o.Install != InstallManifest || o.Timeout <= 0 || o.CiliumVersion != release.DefaultCiliumVersion {
		t.Fatalf("defaults not filled: %+v", o)
	}

	older := Options{Cluster: "c", Preset: PresetSingle, Node: "10.5.0.2", CiliumVersion: "1.19.3"}
	if err := older.Validate(); err != nil || older.CiliumVersion != "v1.19.3" {
		t.Fatalf("--cilium-version 1.19.3 gave %q, %v", older.CiliumVersion, err)
	}

	v := Options{Cluster: "c", Preset: PresetSingle, Node: "10.5.0.2", Endpoint: "10.5.0.100"}
	if err := v.Validate(); err != nil || v.EndpointType != ichorv1alpha1.EndpointTypeVIP {
		t.Fatalf("another endpoint host gave type %q, %v; want vip", v.EndpointType, err)
	}
}

func TestValidateRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Preset: "big", Node: "10.5.0.2"}, `--preset "big"`},
		{Options{Preset: PresetSingle}, "--node is missing"},
		{Options{Preset: PresetSingle, Node: "node-1"}, "is not an IP address"},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", Tunnel: "gre"}, `--cni-tunnel "gre"`},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", UIURL: "http://x"}, "--ui-url"},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", EndpointType: "vip"}, "other than the node's own address"},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", Endpoint: "10.5.0.9", EndpointType: "node"}, "--endpoint-type node"},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", EndpointType: "dns"}, `--endpoint-type "dns"`},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", Install: "helm"}, `--install "helm"`},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", CiliumVersion: "v1.18.0"}, "--cilium-version v1.18.0: this Ichor embeds the Cilium charts v1.19.3, v1.20.2"},
		{Options{Preset: PresetSingle, Node: "10.5.0.2", CiliumVersion: "v1.20.2", KubernetesVersion: "1.32.3"}, "incompatible pair"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v; want an error containing %q", tc.o, err, tc.want)
		}
	}
}

func TestProgressInAPipe(t *testing.T) {
	var b bytes.Buffer

	p := NewProgress(&b, false)
	p.Step("First")
	p.Detailf("stage %s", "installing")
	p.Detailf("stage %s", "installing") // unchanged: not repeated
	p.Detailf("stage running")
	p.Notef("a note")
	p.Step("Second")
	p.Fail()

	got := b.String()
	want := "==> First\n    stage installing\n    stage running\na note\n==> Second\n    failed after "

	if !strings.HasPrefix(got, want) {
		t.Fatalf("pipe output:\n%s\nwant it to start with:\n%s", got, want)
	}

	if strings.Contains(got, "\r") || strings.Contains(got, "\033") {
		t.Fatalf("pipe output holds terminal control characters: %q", got)
	}
}

func TestProgressOnATerminal(t *testing.T) {
	var b bytes.Buffer

	p := NewProgress(&b, true)
	p.Step("First")
	p.Detailf("working")
	p.Done()

	got := b.String()
	if !strings.Contains(got, "\r\033[K") || !strings.Contains(got, "✓ First (") || !strings.Contains(got, "First: working") {
		t.Fatalf("terminal output %q lacks the spinner line or the done mark", got)
	}
}

func TestTransient(t *testing.T) {
	gr := schema.GroupResource{Group: "ichor.maesh.dev", Resource: "talosclusters"}

	for _, err := range []error{
		apierrors.NewServiceUnavailable("starting"),
		apierrors.NewInternalError(errors.New(`failed calling webhook "x": connection refused`)),
		apierrors.NewTooManyRequests("slow down", 1),
		apierrors.NewConflict(gr, "c", errors.New("modified")),
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED),
	} {
		if !Transient(err) {
			t.Errorf("Transient(%v) = false, want true", err)
		}
	}

	for _, err := range []error{
		apierrors.NewForbidden(gr, "c", errors.New("no")),
		apierrors.NewBadRequest("invalid"),
		errors.New("the bundle does not load"),
	} {
		if Transient(err) {
			t.Errorf("Transient(%v) = true, want false", err)
		}
	}
}

func TestMachineNameIsTheDiscoveryName(t *testing.T) {
	id := ichorv1alpha1.MachineIdentity{UUID: "ABC", Serial: "S1", MACAddresses: []string{"0A:00:00:00:00:02", "0a:00:00:00:00:01"}}
	same := ichorv1alpha1.MachineIdentity{UUID: "abc", Serial: "S1", MACAddresses: []string{"0a:00:00:00:00:01", "0a:00:00:00:00:02"}}

	a, b := ichorv1alpha1.MachineName("prod", id), ichorv1alpha1.MachineName("prod", same)
	if a != b || !strings.HasPrefix(a, "prod-") || len(a) != len("prod-")+10 {
		t.Fatalf("machineName = %q and %q; want one name prod-<10 hex> for one identity", a, b)
	}

	if ichorv1alpha1.MachineName("prod", ichorv1alpha1.MachineIdentity{UUID: "other"}) == a {
		t.Fatal("two identities got one name")
	}
}

func TestInstallDiskChoice(t *testing.T) {
	s := &state{p: NewProgress(&bytes.Buffer{}, false), node: &Node{Address: "10.5.0.2"}}
	s.node.Hardware.Disks = []ichorv1alpha1.DiscoveredDisk{
		{DevicePath: "/dev/sda", Serial: "OLD", HasPartitions: true},
		{DevicePath: "/dev/vdb", BusPath: "/pci0000:00/0000:00:05.0"},
	}

	sel, parted, err := s.installDisk()
	if err != nil || parted || sel.BusPath != "/pci0000:00/0000:00:05.0" {
		t.Fatalf("installDisk() = %+v, %v, %v; want the empty disk by its bus path", sel, parted, err)
	}

	s.o.InstallDisk = &ichorv1alpha1.DiskSelector{Serial: "OLD"}

	if sel, parted, err := s.installDisk(); err != nil || !parted || sel.Serial != "OLD" {
		t.Fatalf("installDisk(serial=OLD) = %+v, %v, %v; want the partitioned disk, reported as such", sel, parted, err)
	}

	s.o.InstallDisk = &ichorv1alpha1.DiskSelector{Serial: "NONE"}

	if _, _, err := s.installDisk(); err == nil || !strings.Contains(err.Error(), "/dev/sda, /dev/vdb") {
		t.Fatalf("a selector matching no disk gave %v; want the list of disks", err)
	}
}

func TestReleaseVersion(t *testing.T) {
	for in, want := range map[string]string{"v0.0.0-dev+4114e82": "v0.0.0-dev", "v1.2.3": "v1.2.3", "v1.2.3-rc.1": "v1.2.3-rc.1"} {
		if got := releaseVersion(in); got != want {
			t.Errorf("releaseVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
