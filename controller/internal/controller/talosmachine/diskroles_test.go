package talosmachine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// diskRoles waits until diskMachine's DiskRolesEffective has status want,
// for its current generation, and returns it.
func diskRoles(t *testing.T, want metav1.ConditionStatus) *metav1.Condition {
	t.Helper()

	const name = diskMachine

	var c *metav1.Condition

	testenv.Eventually(t, waitTimeout, name+" DiskRolesEffective "+string(want), func() error {
		m := getMachine(t, name)
		if m.Status.ObservedGeneration != m.Generation {
			return fmt.Errorf("observed %d of %d", m.Status.ObservedGeneration, m.Generation)
		}

		c = apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.DiskRolesEffectiveCondition)
		if c == nil || c.Status != want {
			return fmt.Errorf("condition %+v", c)
		}

		return nil
	})

	return c
}

// cosiLists is how many COSI Lists diskMachine's node has answered.
func cosiLists(t *testing.T) int {
	t.Helper()

	em, err := world.Machine(diskMachine)
	testenv.Must(t, err)

	return em.RPCCounts()["/cosi.resource.State/List"]
}

// nodeVolume waits until the node reports volume id on disk parent.
func nodeVolume(t *testing.T, name, id, parent string) {
	t.Helper()

	n := adminNode(t, name)

	testenv.Eventually(t, waitTimeout, name+" volume "+id+" on "+parent, func() error {
		vols, _, err := n.Volumes(context.Background())
		if err != nil {
			return err
		}

		for _, v := range vols {
			if v.ID == id && v.Parent == parent && v.Phase == storage.VolumePhaseReady {
				return nil
			}
		}

		return fmt.Errorf("volumes %+v", vols)
	})
}

// TestTalosMachineReconciler_DiskRolesEffective: a user volume provisioned
// on DATA-A stays there when its disk role is edited to DATA-B with a lower
// maxSize: the node accepts the configuration (InSync) and the machine
// reports DiskRolesEffective False, AcceptedNoEffect, with both paths and the
// way out, instead of looking applied.
func TestTalosMachineReconciler_DiskRolesEffective(t *testing.T) {
	const name = diskMachine

	diskRoles(t, metav1.ConditionTrue)

	// Without a disk role the render places no volume: the drift checks do
	// not read the node's volumes (no COSI List at all).
	lists := cosiLists(t)

	pollsPass(t, name)

	if n := cosiLists(t) - lists; n != 0 {
		t.Errorf("%d COSI Lists in four drift checks of a machine without disk roles, want 0", n)
	}

	role := func(serial, maxSize string) []ichorv1alpha1.DiskRole {
		return []ichorv1alpha1.DiskRole{{
			Disk: ichorv1alpha1.DiskSelector{Serial: serial}, Role: ichorv1alpha1.DiskRoleUserVolume, VolumeName: "data", MaxSize: maxSize,
		}}
	}

	t.Cleanup(func() {
		setDisks(t, name, nil)
		diskRoles(t, metav1.ConditionTrue)
		inSync(t, name)
	})

	setDisks(t, name, role("DATA-A", "20GiB"))
	nodeVolume(t, name, "u-data", "/dev/sda")

	// With one, every drift check reads them (VolumeStatuses, Disks and
	// DiscoveredVolumes).
	lists = cosiLists(t)

	pollsPass(t, name)

	if n := cosiLists(t) - lists; n < 4*3 {
		t.Errorf("%d COSI Lists in four drift checks of a machine with a disk role, want at least 12", n)
	}

	if c := diskRoles(t, metav1.ConditionTrue); c.Reason != storage.DiskRolesInEffectReason {
		t.Fatalf("provisioned as asked: %+v", c)
	}

	setDisks(t, name, role("DATA-B", "10GiB"))

	c := diskRoles(t, metav1.ConditionFalse)
	if c.Reason != ichorv1alpha1.AcceptedNoEffectReason {
		t.Errorf("reason %s, want %s", c.Reason, ichorv1alpha1.AcceptedNoEffectReason)
	}

	for _, want := range []string{"spec.disks[0].disk", "spec.disks[0].maxSize", "/dev/sda", "reset and reinstall"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q does not name %q", c.Message, want)
		}
	}

	// Talos accepted the edit: the node runs the render (InSync), the volume
	// did not move. Ready does not summarise DiskRolesEffective: the node
	// works, the attention list shows the warning.
	testenv.Eventually(t, waitTimeout, name+" applied the edit", func() error {
		m := getMachine(t, name)
		if !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.InSyncCondition) || m.Status.AppliedConfigHash != m.Status.RenderedConfigHash {
			return fmt.Errorf("not applied: %+v", m.Status.Conditions)
		}

		return nil
	})
	nodeVolume(t, name, "u-data", "/dev/sda")

	// Putting the fields back is the other way out.
	setDisks(t, name, role("DATA-A", "20GiB"))
	diskRoles(t, metav1.ConditionTrue)
}
