package talos

import (
	"context"
	"fmt"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// VolumeStatus is one volume as the node reports it (VolumeStatuses in the
// runtime namespace, block.talos.dev): its ID (EPHEMERAL, u-<name>,
// r-<name>, ...), phase, the disk it lives on and its size.
type VolumeStatus struct {
	ID     string
	Phase  string
	Parent string
	Size   uint64
}

// Volumes reads the node's volumes and its disks (as discovery reports them),
// the facts the disk-role and storage checks judge.
func (n *Node) Volumes(ctx context.Context) ([]VolumeStatus, []ichorv1alpha1.DiscoveredDisk, error) {
	list, err := safe.StateListAll[*block.VolumeStatus](ctx, n.c.COSI)
	if err != nil {
		return nil, nil, fmt.Errorf("read VolumeStatuses: %w", err)
	}

	var out []VolumeStatus

	for v := range list.All() {
		s := v.TypedSpec()
		out = append(out, VolumeStatus{ID: v.Metadata().ID(), Phase: s.Phase.String(), Parent: s.ParentLocation, Size: s.Size})
	}

	inv := &Inventory{}
	if err := readDisks(ctx, n.c, inv); err != nil {
		return nil, nil, err
	}

	return out, inv.Hardware.Disks, nil
}
