package commands

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func TestStableSelectorFallback(t *testing.T) {
	for _, tc := range []struct {
		disk   ichorv1alpha1.DiscoveredDisk
		want   string
		stable bool
	}{
		{ichorv1alpha1.DiscoveredDisk{DevicePath: "/dev/sda", WWID: "naa.1", Serial: "S", ByID: "/dev/disk/by-id/x", BusPath: "/pci/1"}, "wwid=naa.1", true},
		{ichorv1alpha1.DiscoveredDisk{DevicePath: "/dev/sda", Serial: "S", ByID: "/dev/disk/by-id/x", BusPath: "/pci/1"}, "serial=S", true},
		{ichorv1alpha1.DiscoveredDisk{DevicePath: "/dev/sda", ByID: "/dev/disk/by-id/x", BusPath: "/pci/1"}, "byid=/dev/disk/by-id/x", true},
		{ichorv1alpha1.DiscoveredDisk{DevicePath: "/dev/vda", BusPath: "/pci/1"}, "buspath=/pci/1", true},
		{ichorv1alpha1.DiscoveredDisk{DevicePath: "/dev/vda"}, "dev=/dev/vda", false},
	} {
		sel, stable := tc.disk.StableSelector()
		if sel.String() != tc.want || stable != tc.stable {
			t.Errorf("%+v: got %s stable=%v, want %s stable=%v", tc.disk, sel.String(), stable, tc.want, tc.stable)
		}
		back, err := parseDiskSelector(tc.want)
		if err != nil || back != sel {
			t.Errorf("%s does not parse back: %+v %v", tc.want, back, err)
		}
	}
}

func TestParseDiskRole(t *testing.T) {
	dr, err := parseDiskRole("userVolume=serial=S3Z9,volume=data,maxSize=-25%,confirmWipe")
	if err != nil {
		t.Fatal(err)
	}
	if dr.Role != ichorv1alpha1.DiskRoleUserVolume || dr.Disk.Serial != "S3Z9" || dr.VolumeName != "data" || dr.MaxSize != "-25%" || !dr.ConfirmWipe {
		t.Fatalf("%+v", dr)
	}
	for in, want := range map[string]string{
		"userVolume=serial=S":        "volume=NAME",
		"system=wwid=x":              "--install-disk",
		"scratch=wwid=x":             "not a disk role",
		"storage=wwid=x,volume=lh":   "only a userVolume has a volume name",
		"unused=wwid=x,maxSize=1GiB": "an unused disk is left alone",
		"ephemeral=wwid=x,oops":      "unknown option",
		"ephemeral":                  "ROLE=SELECTOR",
		"ephemeral=size=10":          "not a disk attribute",
	} {
		if _, err := parseDiskRole(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: want an error containing %q, got %v", in, want, err)
		}
	}
}

// TestParseDiskRoleStorageAndUnused: storage and unused are offered at approval.
func TestParseDiskRoleStorageAndUnused(t *testing.T) {
	dr, err := parseDiskRole("storage=wwid=naa.5000,maxSize=-10%,confirmWipe")
	if err != nil || dr.Role != ichorv1alpha1.DiskRoleStorage || dr.Disk.WWID != "naa.5000" || dr.MaxSize != "-10%" || !dr.ConfirmWipe {
		t.Fatalf("%+v %v", dr, err)
	}
	dr, err = parseDiskRole("unused=serial=S9")
	if err != nil || dr.Role != ichorv1alpha1.DiskRoleUnused || dr.Disk.Serial != "S9" {
		t.Fatalf("%+v %v", dr, err)
	}
}

func TestParseNetwork(t *testing.T) {
	links := []ichorv1alpha1.DiscoveredLink{{Name: "eth0", PermanentMAC: "52:54:00:00:00:01"}}
	n, err := parseNetwork("52:54:00:00:00:01", false, []string{"10.0.0.5/24"}, "10.0.0.1", []string{"1.1.1.1"}, 20, links)
	if err != nil || n.MACAddress != "52:54:00:00:00:01" || *n.VLAN != 20 || n.Gateway != "10.0.0.1" {
		t.Fatalf("%+v %v", n, err)
	}
	for _, tc := range []struct {
		nic, gw string
		dhcp    bool
		addrs   []string
		vlan    int
		want    string
	}{
		{nic: "zz", want: "not a MAC"},
		{nic: "52:54:00:00:00:09", want: "eth0"},
		{dhcp: true, addrs: []string{"10.0.0.5/24"}, want: "exclude each other"},
		{gw: "10.0.0.1", want: "needs a static --address"},
		{addrs: []string{"10.0.0.5"}, want: "CIDR"},
		{vlan: 5000, want: "1-4094"},
	} {
		if _, err := parseNetwork(tc.nic, tc.dhcp, tc.addrs, tc.gw, nil, tc.vlan, links); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: want %q, got %v", tc, tc.want, err)
		}
	}
}
