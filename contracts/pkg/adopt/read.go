package adopt

import (
	"context"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// Read reads one configured node for the plan, read-only: its running Talos
// version, its identity, its active configuration and KubePrism's health.
func Read(ctx context.Context, n *talos.Node, address string) (Machine, error) {
	m := Machine{Address: address}

	run, err := n.Running(ctx)
	if err != nil {
		return m, err
	}

	m.TalosVersion = run.Version

	id, err := n.Identity(ctx)
	if err != nil {
		return m, err
	}

	m.UUID, m.Hostname = id.UUID, id.Hostname

	if m.Config, _, err = n.Config(ctx); err != nil {
		return m, err
	}

	kp, err := n.KubePrismStatus(ctx)
	if err != nil {
		return m, err
	}

	m.KubePrismHealthy = kp.Found && kp.Healthy

	return m, nil
}
