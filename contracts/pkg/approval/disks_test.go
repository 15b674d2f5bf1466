package approval_test

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/approval"
)

func role(r, volume, maxSize string, wipe bool) ichorv1alpha1.DiskRole {
	return ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: "S1"}, Role: r, VolumeName: volume, MaxSize: maxSize, ConfirmWipe: wipe}
}

// TestCheckRoleStorageAndUnused: storage and unused are offered at approval
// next to ephemeral and userVolume, each refusal beside its allowed neighbour.
func TestCheckRoleStorageAndUnused(t *testing.T) {
	check := func(dr ichorv1alpha1.DiskRole) error {
		return approval.CheckRole(dr, "--disk "+dr.Role, "add ,volume=NAME", "use --install-disk")
	}

	for _, dr := range []ichorv1alpha1.DiskRole{
		role(ichorv1alpha1.DiskRoleStorage, "", "", false),
		role(ichorv1alpha1.DiskRoleStorage, "", "500GiB", true),
		role(ichorv1alpha1.DiskRoleUnused, "", "", false),
		role(ichorv1alpha1.DiskRoleEphemeral, "", "-25%", false),
		role(ichorv1alpha1.DiskRoleUserVolume, "data", "", false),
	} {
		if err := check(dr); err != nil {
			t.Errorf("%+v refused: %v", dr, err)
		}
	}

	for _, tc := range []struct {
		dr   ichorv1alpha1.DiskRole
		want []string
	}{
		{role(ichorv1alpha1.DiskRoleStorage, "longhorn", "", false), []string{"--disk storage", "only a userVolume has a volume name", "TalosStorage preset"}},
		{role(ichorv1alpha1.DiskRoleUnused, "", "10GiB", false), []string{"--disk unused", "left alone", "no size", "storage or userVolume"}},
		{role(ichorv1alpha1.DiskRoleUnused, "", "", true), []string{"no wipe confirmation"}},
		{role(ichorv1alpha1.DiskRoleUserVolume, "", "", false), []string{"needs a name", "add ,volume=NAME"}},
		{role(ichorv1alpha1.DiskRoleSystem, "", "", false), []string{"install disk", "use --install-disk"}},
		{role("scratch", "", "", false), []string{`"scratch" is not a disk role`, "ephemeral, storage, userVolume, unused"}},
	} {
		err := check(tc.dr)
		if err == nil {
			t.Errorf("%+v admitted", tc.dr)

			continue
		}

		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q does not say %q", tc.dr, err, w)
			}
		}
	}
}

// TestCheckWipesUnusedDisk: a disk with partitions needs the wipe
// confirmation as storage, not as unused (nothing is written to it).
func TestCheckWipesUnusedDisk(t *testing.T) {
	disks := []ichorv1alpha1.DiscoveredDisk{
		{DevicePath: "/dev/sda", Serial: "S1", HasPartitions: true},
	}
	f := approval.Fields{ConfirmWipe: "--confirm-wipe", RoleConfirmWipe: "add ,confirmWipe",
		DiskRole: func(dr ichorv1alpha1.DiskRole) string { return "--disk " + dr.Role }}

	if err := approval.CheckWipes(nil, false, []ichorv1alpha1.DiskRole{role(ichorv1alpha1.DiskRoleUnused, "", "", false)}, disks, f); err != nil {
		t.Errorf("an unused disk with partitions refused: %v", err)
	}

	err := approval.CheckWipes(nil, false, []ichorv1alpha1.DiskRole{role(ichorv1alpha1.DiskRoleStorage, "", "", false)}, disks, f)
	if err == nil || !strings.Contains(err.Error(), "--disk storage: /dev/sda holds partitions") || !strings.Contains(err.Error(), "add ,confirmWipe") {
		t.Errorf("a storage disk with partitions: %v", err)
	}

	if err := approval.CheckWipes(nil, false, []ichorv1alpha1.DiskRole{role(ichorv1alpha1.DiskRoleStorage, "", "", true)}, disks, f); err != nil {
		t.Errorf("a confirmed storage disk refused: %v", err)
	}
}
