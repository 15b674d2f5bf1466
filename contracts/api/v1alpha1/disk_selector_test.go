package v1alpha1

import "testing"

func TestStableSelectorFallback(t *testing.T) {
	t.Parallel()

	full := DiscoveredDisk{DevicePath: "/dev/sda", WWID: "naa.1", Serial: "S1", ByID: "ata-X", BusPath: "/pci0/ata1"}

	for _, tc := range []struct {
		name   string
		disk   DiscoveredDisk
		want   string
		stable bool
	}{
		{"wwid first", full, "wwid=naa.1", true},
		{"then serial", DiscoveredDisk{DevicePath: "/dev/sda", Serial: "S1", ByID: "ata-X", BusPath: "/p"}, "serial=S1", true},
		{"then by-id", DiscoveredDisk{DevicePath: "/dev/sda", ByID: "ata-X", BusPath: "/p"}, "byid=ata-X", true},
		{"then bus path", DiscoveredDisk{DevicePath: "/dev/vda", BusPath: "/pci0/virtio2"}, "buspath=/pci0/virtio2", true},
		{"nothing stable", DiscoveredDisk{DevicePath: "/dev/vda"}, "dev=/dev/vda", false},
	} {
		sel, stable := tc.disk.StableSelector()
		if sel.String() != tc.want || stable != tc.stable {
			t.Errorf("%s: %s (stable %t), want %s (stable %t)", tc.name, sel, stable, tc.want, tc.stable)
		}

		if !sel.Matches(tc.disk) {
			t.Errorf("%s: the disk's own selector %s does not match it", tc.name, sel)
		}
	}

	if !(DiskSelector{WWID: "NAA.1"}).Matches(full) {
		t.Error("a WWID typed in upper case does not match")
	}

	if (DiskSelector{WWID: "naa.2"}).Matches(full) || (DiskSelector{}).Matches(full) {
		t.Error("a selector matches a disk it does not name")
	}
}
