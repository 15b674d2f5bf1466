// Package reclaim is "Reset and add": it inspects a machine that another
// cluster configured, over a connection made with that cluster's own
// (foreign) talosconfig (talos.DialTalosconfig), decides whether resetting it is allowed, checks the
// typed consent, and builds the one reset request Ichor sends. The CLI
// (`ichor machine reclaim ADDRESS --talosconfig FILE`) and the MachineReclaim
// controller run the same code, so a refusal reads the same in both.
//
// Nothing from the talosconfig (CA, client certificate, key) is kept in an
// Inspection or written into an error.
package reclaim

import (
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// TalosconfigKey is the key of the foreign-talosconfig Secret that holds the
// talosconfig (talos.DialTalosconfig connects with it).
const TalosconfigKey = "talosconfig"

// ResetRequest is the one builder of the reset Ichor sends, for reclaim and
// for node removal: it wipes STATE and EPHEMERAL and leaves the installed
// system (boot and EFI partitions) and every user disk in place, so the
// machine boots back into maintenance mode with the same identity.
//
// The partitions are always named: with the default mode and an empty
// system_partitions_to_wipe, Talos wipes the whole system disk, boot and EFI
// included, and the machine no longer boots the installed system
// (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go, Reset:
// `in.Mode != machine.ResetRequest_USER_DISKS && len(in.GetSystemPartitionsToWipe()) == 0`
// sets opts.systemDiskPaths from block.GetSystemDiskPaths; release-1.14 and main).
// Each entry needs Wipe: true, or Talos skips the partition (same function,
// `if resetPartitionSpec.Wipe`).
//
// graceful runs Talos's own sequence first (cordon, drain, leave etcd);
// reboot brings the machine back at once, otherwise it powers off.
func ResetRequest(graceful, reboot bool) *machine.ResetRequest {
	return &machine.ResetRequest{
		Graceful: graceful,
		Reboot:   reboot,
		Mode:     machine.ResetRequest_ALL,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{
			{Label: constants.StatePartitionLabel, Wipe: true},
			{Label: constants.EphemeralPartitionLabel, Wipe: true},
		},
	}
}

// ResetRequestWipe is the reset of a node operation (TalosOperation type
// node, action reset) in its spec.node.wipeMode: state-ephemeral (or empty)
// is ResetRequest's; system-disk names no partition, so Talos wipes the whole
// system disk, boot and EFI included, and the machine must be installed
// afresh from its install media; all does the same in mode ALL, which also
// lets Talos wipe the user disks it is given (none are named here: user
// volumes are left to the storage system's own evacuation). Always graceful
// and with a reboot.
func ResetRequestWipe(wipeMode string) *machine.ResetRequest {
	switch wipeMode {
	case "system-disk":
		return &machine.ResetRequest{Graceful: true, Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK}
	case "all":
		return &machine.ResetRequest{Graceful: true, Reboot: true, Mode: machine.ResetRequest_ALL}
	default:
		return ResetRequest(true, true)
	}
}

// EtcdRecoveryReset is the reset of Talos's etcd recovery procedure, sent to
// every control plane of a restore into the live cluster: EPHEMERAL only (the
// etcd data directory; STATE, and so the configuration, stays), not graceful
// (a graceful reset leaves etcd first, which changes the membership of the
// cluster being replaced and drains the node for nothing), and with a reboot,
// so the node comes back configured with its etcd service waiting in
// Preparing for the Bootstrap that recovers the snapshot. Talos's Disaster
// Recovery guide gives the same request as `talosctl reset --graceful=false
// --reboot --system-labels-to-wipe=EPHEMERAL`
// (t:website/content/v1.10/advanced/disaster-recovery.md, "Preparing Control
// Plane Nodes").
func EtcdRecoveryReset() *machine.ResetRequest {
	return &machine.ResetRequest{
		Graceful: false,
		Reboot:   true,
		SystemPartitionsToWipe: []*machine.ResetPartitionSpec{
			{Label: constants.EphemeralPartitionLabel, Wipe: true},
		},
	}
}
