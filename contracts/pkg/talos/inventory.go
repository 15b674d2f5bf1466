package talos

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// versionID is the ID of the runtime.Version resource (m:resources/runtime/version.go NewVersion).
const versionID = "version"

// maxHardwareItems is the most disks, and the most links, MachineHardware holds
// (its MaxItems).
const maxHardwareItems = 64

// Inventory is what a node reports about itself: the reads `talosctl get
// --insecure` makes, which a node in maintenance mode serves to os:reader.
type Inventory struct {
	// TalosVersion is the version the node runs (its boot media in maintenance).
	TalosVersion string
	// Stage is MachineStatus's stage in Ichor's words (StageName).
	Stage string
	// Identity is the SMBIOS UUID (lower case) and serial, and the permanent
	// MACs of every physical link (lower case, sorted, without duplicates).
	Identity ichorv1alpha1.MachineIdentity
	// Hardware is SMBIOS's manufacturer and product, the disks (CD-ROMs left
	// out) and the physical links, at most 64 of each.
	Hardware ichorv1alpha1.MachineHardware
	// SecureBoot is whether the node booted with SecureBoot (SecurityState);
	// nil when the node does not say.
	SecureBoot *bool
}

// ReadInventory reads the node's version, stage, identity, disks, links and
// SecureBoot state, over a maintenance connection or an authenticated one
// alike. The Talos version is read first: on a configured node reached
// without a client certificate that one read is refused, and nothing else is
// asked (Maintenance.Configured tells that refusal).
func ReadInventory(ctx context.Context, c *talosclient.Client) (*Inventory, error) {
	ver, err := safe.StateGetByID[*runtime.Version](ctx, c.COSI, versionID)
	if err != nil {
		return nil, fmt.Errorf("read the Talos version: %w", err)
	}

	inv := &Inventory{TalosVersion: ver.TypedSpec().Version}

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		return nil, fmt.Errorf("read SystemInformation: %w", err)
	}

	spec := si.TypedSpec()
	inv.Identity.UUID, inv.Identity.Serial = strings.ToLower(strings.TrimSpace(spec.UUID)), strings.TrimSpace(spec.SerialNumber)
	inv.Hardware.Manufacturer, inv.Hardware.ProductName = strings.TrimSpace(spec.Manufacturer), strings.TrimSpace(spec.ProductName)

	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, c.COSI, runtime.MachineStatusID)
	if err != nil {
		return nil, fmt.Errorf("read MachineStatus: %w", err)
	}

	inv.Stage = StageName(ms.TypedSpec().Stage)

	if err := readDisks(ctx, c, inv); err != nil {
		return nil, err
	}

	// SecurityState is readable in maintenance mode; best effort: a node that
	// does not serve it leaves it unknown.
	if ss, err := safe.StateGetByID[*runtime.SecurityState](ctx, c.COSI, runtime.SecurityStateID); err == nil {
		inv.SecureBoot = new(ss.TypedSpec().SecureBoot)
	}

	if err := readLinks(ctx, c, inv); err != nil {
		return nil, err
	}

	return inv, nil
}

func readDisks(ctx context.Context, c *talosclient.Client, inv *Inventory) error {
	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		return fmt.Errorf("read Disks: %w", err)
	}

	parted := partitionedDisks(ctx, c)

	for d := range disks.All() {
		s := d.TypedSpec()
		if s.CDROM || len(inv.Hardware.Disks) == maxHardwareItems {
			continue
		}

		disk := ichorv1alpha1.DiscoveredDisk{
			DevicePath: s.DevPath, WWID: s.WWID, Serial: s.Serial, BusPath: s.BusPath,
			SizeBytes: int64(min(s.Size, 1<<62)), HasPartitions: parted[d.Metadata().ID()],
		}

		for _, l := range s.Symlinks {
			if strings.HasPrefix(l, "/dev/disk/by-id/") {
				disk.ByID = l

				break
			}
		}

		inv.Hardware.Disks = append(inv.Hardware.Disks, disk)
	}

	return nil
}

// partitionedDisks names the disks that hold a partition, from
// DiscoveredVolumes (Talos ≥ 1.8, readable in maintenance). It is best effort:
// a node that does not serve them gives an empty set.
func partitionedDisks(ctx context.Context, c *talosclient.Client) map[resource.ID]bool {
	out := map[resource.ID]bool{}

	vols, err := safe.StateListAll[*block.DiscoveredVolume](ctx, c.COSI)
	if err != nil {
		return out
	}

	for v := range vols.All() {
		if p := v.TypedSpec().Parent; p != "" {
			out[p] = true
		}
	}

	return out
}

func readLinks(ctx context.Context, c *talosclient.Client, inv *Inventory) error {
	links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		return fmt.Errorf("read LinkStatuses: %w", err)
	}

	for l := range links.All() {
		s := l.TypedSpec()
		if !s.Physical() {
			continue
		}

		link := ichorv1alpha1.DiscoveredLink{Name: l.Metadata().ID()}
		if len(s.PermanentAddr) > 0 {
			link.PermanentMAC = strings.ToLower(net.HardwareAddr(s.PermanentAddr).String())
			inv.Identity.MACAddresses = append(inv.Identity.MACAddresses, link.PermanentMAC)
		}

		if len(inv.Hardware.Links) < maxHardwareItems {
			inv.Hardware.Links = append(inv.Hardware.Links, link)
		}
	}

	slices.Sort(inv.Identity.MACAddresses)
	inv.Identity.MACAddresses = slices.Compact(inv.Identity.MACAddresses)

	return nil
}
