package guard

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func sharedMachine(role string, disks ...ichorv1alpha1.DiskRole) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m1"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Role: role,
			Install: ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, SystemDiskLayout: ichorv1alpha1.SystemDiskLayoutShared},
			Disks:   disks,
		},
	}
}

// TestSystemDiskLayoutAdmission: the shared layout is refused when it cannot
// work (with the field and a way out) and warned about, not refused, on a
// control plane.
func TestSystemDiskLayoutAdmission(t *testing.T) {
	sys := func(maxSize string) ichorv1alpha1.DiskRole {
		return ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, Role: ichorv1alpha1.DiskRoleSystem, MaxSize: maxSize}
	}

	for _, tc := range []struct {
		name  string
		m     *ichorv1alpha1.TalosMachine
		field string // "" when admitted
	}{
		{"shared worker", sharedMachine(ichorv1alpha1.RoleWorker), ""},
		{"shared with a 40GiB cap", sharedMachine(ichorv1alpha1.RoleWorker, sys("40GiB")), ""},
		{"cap under 2GiB", sharedMachine(ichorv1alpha1.RoleWorker, sys("1500MiB")), "spec.disks[0].maxSize"},
		{"cap as space to leave free", sharedMachine(ichorv1alpha1.RoleWorker, sys("-20%")), "spec.disks[0].maxSize"},
		{"ephemeral disk beside it", sharedMachine(ichorv1alpha1.RoleWorker,
			ichorv1alpha1.DiskRole{Disk: ichorv1alpha1.DiskSelector{Serial: "E"}, Role: ichorv1alpha1.DiskRoleEphemeral}), "spec.disks[0].role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusals := ValidateMachine(nil, tc.m, MachineFacts{})
			if tc.field == "" {
				if len(refusals) != 0 {
					t.Fatalf("refused: %v", refusals)
				}

				return
			}

			if len(refusals) != 1 || refusals[0].Field != tc.field || refusals[0].WayOut == "" {
				t.Fatalf("refusals %+v, want one on %s with a way out", refusals, tc.field)
			}
		})
	}

	if w := MachineWarnings(nil, sharedMachine(ichorv1alpha1.RoleWorker)); len(w) != 0 {
		t.Errorf("a shared worker is warned about: %v", w)
	}

	cp := sharedMachine(ichorv1alpha1.RoleControlPlane)
	if r := ValidateMachine(nil, cp, MachineFacts{}); len(r) != 0 {
		t.Errorf("a shared control plane is refused: %v", r)
	}

	w := MachineWarnings(nil, cp)
	if len(w) != 1 || !strings.Contains(w[0], "etcd") {
		t.Errorf("warnings %v, want the etcd warning", w)
	}

	if w := MachineWarnings(cp, cp); len(w) != 0 {
		t.Errorf("an unchanged shared control plane is warned about again on every update: %v", w)
	}
}
