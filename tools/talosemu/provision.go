package talosemu

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// ApplyInMaintenance sends cfg to a machine in maintenance mode the way a
// first provisioning does (machinery's client over the machine's own Talos
// API, no client certificate, mode AUTO) and waits until it runs. Tests use
// it to stand for Ichor's provisioning or a foreign cluster's own tooling.
func (m *Machine) ApplyInMaintenance(ctx context.Context, cfg []byte, timeout time.Duration) error {
	c, err := talosclient.New(ctx, talosclient.WithEndpoints(m.Address()),
		talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // maintenance mode has no CA
	if err != nil {
		return err
	}

	defer func() { _ = c.Close() }()

	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		return fmt.Errorf("machine %s: apply in maintenance mode: %w", m.Name(), err)
	}

	return m.WaitStage(ctx, runtime.MachineStageRunning, timeout)
}

// WaitStage waits until the machine reaches stage.
func (m *Machine) WaitStage(ctx context.Context, stage runtime.MachineStage, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)

	for m.Stage() != stage {
		if time.Now().After(deadline) {
			return fmt.Errorf("machine %s did not reach %s within %s (stage %s)", m.Name(), stage, timeout, m.Stage())
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}

	return nil
}
