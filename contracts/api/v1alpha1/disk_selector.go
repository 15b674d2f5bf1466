package v1alpha1

import "strings"

// StableSelector keys a discovered disk on the most stable attribute it has:
// WWID, then serial, then the by-id path, then the bus path, and the device
// path as a last resort, when stable is false ("nothing stable to key on" is
// a state to show, not an error). Talos fills WWID and serial from sysfs with
// a udev fallback only for ata and scsi, so NVMe is reliable while a plain
// virtio-blk disk usually has neither (architecture, "Nodes").
func (d DiscoveredDisk) StableSelector() (sel DiskSelector, stable bool) {
	switch {
	case d.WWID != "":
		return DiskSelector{WWID: d.WWID}, true
	case d.Serial != "":
		return DiskSelector{Serial: d.Serial}, true
	case d.ByID != "":
		return DiskSelector{ByID: d.ByID}, true
	case d.BusPath != "":
		return DiskSelector{BusPath: d.BusPath}, true
	default:
		return DiskSelector{DevicePath: d.DevicePath}, false
	}
}

// Matches reports whether the selector selects the discovered disk, by the
// one attribute the selector names. A WWID is compared without regard to
// case (a hex identifier a person may type in either case).
func (s DiskSelector) Matches(d DiscoveredDisk) bool {
	switch {
	case s.WWID != "":
		return strings.EqualFold(s.WWID, d.WWID)
	case s.Serial != "":
		return s.Serial == d.Serial
	case s.ByID != "":
		return s.ByID == d.ByID
	case s.BusPath != "":
		return s.BusPath == d.BusPath
	case s.DevicePath != "":
		return s.DevicePath == d.DevicePath
	default:
		return false
	}
}

// String is the selector as `ichor machine approve --install-disk` takes it:
// wwid=, serial=, byid=, buspath= or dev=.
func (s DiskSelector) String() string {
	switch {
	case s.WWID != "":
		return "wwid=" + s.WWID
	case s.Serial != "":
		return "serial=" + s.Serial
	case s.ByID != "":
		return "byid=" + s.ByID
	case s.BusPath != "":
		return "buspath=" + s.BusPath
	case s.DevicePath != "":
		return "dev=" + s.DevicePath
	default:
		return ""
	}
}
