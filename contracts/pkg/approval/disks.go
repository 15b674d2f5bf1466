// Package approval holds the disk rules of approving a machine, shared by the
// CLI (`ichor machine approve`) and the UI backend (ApproveMachine): which
// disk Talos installs to when none is named, and which disks may be wiped.
// Each front end names its own fields in the messages (Fields).
package approval

import (
	"errors"
	"fmt"
	"strings"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Fields are how a front end names the inputs in its messages.
type Fields struct {
	// InstallDisk asks for an install disk: "pass --install-disk KEY=VALUE".
	InstallDisk string
	// ConfirmWipe names the install disk's wipe consent: "--confirm-wipe".
	ConfirmWipe string
	// DiskRole names a disk role's input: "--disk userVolume=serial=S".
	DiskRole func(ichorv1alpha1.DiskRole) string
	// RoleConfirmWipe asks for a disk role's wipe consent: "add ,confirmWipe".
	RoleConfirmWipe string
}

// Describe lists disks with their most stable key: "/dev/sda (wwid=...)".
func Describe(disks []ichorv1alpha1.DiscoveredDisk) string {
	parts := make([]string, 0, len(disks))
	for _, d := range disks {
		sel, _ := d.StableSelector()
		parts = append(parts, fmt.Sprintf("%s (%s)", d.DevicePath, sel.String()))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Find resolves a selector against the discovered disks; with no discovered
// disks, the selector is taken as given (nil, nil).
func Find(sel ichorv1alpha1.DiskSelector, disks []ichorv1alpha1.DiscoveredDisk) (*ichorv1alpha1.DiscoveredDisk, error) {
	if len(disks) == 0 {
		return nil, nil
	}
	for i := range disks {
		if sel.Matches(disks[i]) {
			return &disks[i], nil
		}
	}
	return nil, fmt.Errorf("no disk discovered on the machine matches %s; the disks are: %s", sel.String(), Describe(disks))
}

// ChooseInstallDisk returns the system disk: the one given, or else the only
// discovered disk without another role, keyed on its most stable attribute.
// note says which disk and key it is, and warns when the key is not stable.
func ChooseInstallDisk(given *ichorv1alpha1.DiskSelector, disks []ichorv1alpha1.DiscoveredDisk, roles []ichorv1alpha1.DiskRole, f Fields) (*ichorv1alpha1.DiskSelector, string, error) {
	if given != nil {
		d, err := Find(*given, disks)
		if err != nil {
			return nil, "", fmt.Errorf("install disk: %w", err)
		}
		if d == nil {
			return given, "", nil
		}
		if sel, stable := d.StableSelector(); !stable {
			return given, fmt.Sprintf("install disk %s: nothing stable to key on (no WWID, serial, by-id or bus path); the device name may change across boots", d.DevicePath), nil
		} else if sel.String() != given.String() {
			return given, fmt.Sprintf("install disk %s by %s (a more stable key exists: %s)", d.DevicePath, given.String(), sel.String()), nil
		}
		return given, fmt.Sprintf("install disk %s by %s", d.DevicePath, given.String()), nil
	}
	var candidates []ichorv1alpha1.DiscoveredDisk
	for _, d := range disks {
		taken := false
		for _, dr := range roles {
			if dr.Disk.Matches(d) {
				taken = true
			}
		}
		if !taken {
			candidates = append(candidates, d)
		}
	}
	switch len(candidates) {
	case 0:
		if len(disks) == 0 {
			return nil, "", errors.New("discovery read no disks on this machine, so the install disk cannot be chosen: " + f.InstallDisk)
		}
		return nil, "", errors.New("every discovered disk has another role: " + f.InstallDisk)
	case 1:
	default:
		return nil, "", fmt.Errorf("the machine has %d disks, so the install disk is not guessed: %s with one of: %s",
			len(candidates), f.InstallDisk, Describe(candidates))
	}
	d := candidates[0]
	sel, stable := d.StableSelector()
	if !stable {
		return &sel, fmt.Sprintf("install disk %s: nothing stable to key on (no WWID, serial, by-id or bus path); keyed on the device path, which may change across boots", d.DevicePath), nil
	}
	return &sel, fmt.Sprintf("install disk %s by %s", d.DevicePath, sel.String()), nil
}

// ApprovalRoles are the disk roles a person gives disks at approval, besides
// the install disk (the system role, chosen as the install disk): ephemeral
// moves EPHEMERAL to its own disk, storage hands a disk to the storage
// system through the TalosStorage preset that selects the machine,
// userVolume makes a Talos user volume, and unused records that a disk is
// left alone (so the install disk is not guessed among the others).
var ApprovalRoles = []string{
	ichorv1alpha1.DiskRoleEphemeral, ichorv1alpha1.DiskRoleStorage, ichorv1alpha1.DiskRoleUserVolume, ichorv1alpha1.DiskRoleUnused,
}

// CheckRole checks one disk role given at approval: a role offered at
// approval, a volume name exactly for a userVolume, and nothing to size or
// wipe on an unused disk. name says how the front end names the role's
// input ("--disk storage=serial=S", "disks[1]"); volumeName and system how
// it asks for a volume name and for the install disk.
func CheckRole(dr ichorv1alpha1.DiskRole, name, volumeName, system string) error {
	switch dr.Role {
	case ichorv1alpha1.DiskRoleEphemeral, ichorv1alpha1.DiskRoleStorage, ichorv1alpha1.DiskRoleUserVolume, ichorv1alpha1.DiskRoleUnused:
	case ichorv1alpha1.DiskRoleSystem:
		return fmt.Errorf("%s: the system disk is the install disk: %s", name, system)
	default:
		return fmt.Errorf("%s: role %q is not a disk role: use one of %s", name, dr.Role, strings.Join(ApprovalRoles, ", "))
	}
	switch {
	case dr.Role == ichorv1alpha1.DiskRoleUserVolume && dr.VolumeName == "":
		return fmt.Errorf("%s: a userVolume needs a name: %s", name, volumeName)
	case dr.Role != ichorv1alpha1.DiskRoleUserVolume && dr.VolumeName != "":
		return fmt.Errorf("%s: only a userVolume has a volume name; a storage disk's volume is named by the TalosStorage preset", name)
	case dr.Role == ichorv1alpha1.DiskRoleUnused && (dr.MaxSize != "" || dr.ConfirmWipe):
		return fmt.Errorf("%s: an unused disk is left alone, so it takes no size and no wipe confirmation; give it the role storage or userVolume to use it", name)
	}
	return nil
}

// CheckWipes refuses disks that hold partitions or filesystems unless the
// person confirmed: the install wipes the system disk (machine.install.wipe
// defaults to true), and Talos does not provision a volume over existing data.
func CheckWipes(install *ichorv1alpha1.DiskSelector, confirmInstall bool, roles []ichorv1alpha1.DiskRole, disks []ichorv1alpha1.DiscoveredDisk, f Fields) error {
	if install != nil && !confirmInstall {
		if d, _ := Find(*install, disks); d != nil && d.HasPartitions {
			return fmt.Errorf("install disk %s holds partitions or filesystems, which the install wipes: set %s if that is intended, or choose another install disk", d.DevicePath, f.ConfirmWipe)
		}
	}
	for _, dr := range roles {
		if dr.ConfirmWipe || dr.Role == ichorv1alpha1.DiskRoleUnused {
			// Nothing is ever written to an unused disk.
			continue
		}
		if d, _ := Find(dr.Disk, disks); d != nil && d.HasPartitions {
			return fmt.Errorf("%s: %s holds partitions or filesystems, and Talos does not provision a volume over them: %s to use it anyway",
				f.DiskRole(dr), d.DevicePath, f.RoleConfirmWipe)
		}
	}
	return nil
}
