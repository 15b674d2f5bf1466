package talosnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/cosi-project/runtime/pkg/safe"
	cryptox509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// ErrFingerprintMismatch is returned when a maintenance node presents a
// certificate whose fingerprint is not the pinned one.
var ErrFingerprintMismatch = errors.New("the node presents another maintenance certificate than the one pinned")

// Maintenance is a connection to a node in maintenance mode: TLS without a
// client certificate and without verifying the server against a CA (the node
// has none yet), so the caller is os:reader and the only trust is the
// maintenance certificate's SPKI fingerprint, recorded at discovery and pinned
// here (machinery client WithMaintenanceMode does the same pinning,
// pkg/machinery/client/options.go).
type Maintenance struct {
	c *talosclient.Client

	mu   sync.Mutex
	seen string
}

// DialMaintenance connects to address in maintenance mode. With a non-empty
// pin, a handshake with any other certificate fails with ErrFingerprintMismatch
// before a byte of the request is sent. Port zero means Talos's apid port.
func DialMaintenance(ctx context.Context, address string, port int, pin string) (*Maintenance, error) {
	if port == 0 {
		port = constants.ApidPort
	}

	m := &Maintenance{}

	c, err := talosclient.New(ctx,
		talosclient.WithEndpoints(net.JoinHostPort(address, strconv.Itoa(port))),
		talosclient.WithTLSConfig(&tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // maintenance mode has no CA; the SPKI fingerprint is pinned below
			MinVersion:         tls.VersionTLS12,
			// VerifyConnection runs on every handshake, resumed ones included.
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the node presented no certificate")
				}

				fp, err := cryptox509.SPKIFingerprintFromDER(cs.PeerCertificates[0].Raw)
				if err != nil {
					return fmt.Errorf("read the maintenance certificate: %w", err)
				}

				m.mu.Lock()
				m.seen = fp.String()
				m.mu.Unlock()

				if pin != "" && fp.String() != pin {
					return ErrFingerprintMismatch
				}

				return nil
			},
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}

	m.c = c

	return m, nil
}

// Close closes the connection.
func (m *Maintenance) Close() { _ = m.c.Close() }

// Fingerprint is the SPKI fingerprint of the certificate the node presented,
// "" before the first handshake.
func (m *Maintenance) Fingerprint() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.seen
}

// Stage reads MachineStatus: the node's stage in Ichor's words.
func (m *Maintenance) Stage(ctx context.Context) (string, error) {
	return readStage(ctx, m.c)
}

// UUID reads the SMBIOS UUID from SystemInformation.
func (m *Maintenance) UUID(ctx context.Context) (string, error) {
	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, m.c.COSI, hardware.SystemInformationID)
	if err != nil {
		return "", fmt.Errorf("read SystemInformation: %w", err)
	}

	return si.TypedSpec().UUID, nil
}

// Apply sends the configuration. In maintenance mode the call returns once the
// configuration is stored; the install runs afterwards, so the caller follows
// MachineStatus rather than trusting the return (architecture, "Nodes").
func (m *Maintenance) Apply(ctx context.Context, cfg []byte) error {
	if _, err := m.c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		return fmt.Errorf("apply the configuration in maintenance mode: %w", err)
	}

	return nil
}

func readStage(ctx context.Context, c *talosclient.Client) (string, error) {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, c.COSI, runtime.MachineStatusID)
	if err != nil {
		return "", fmt.Errorf("read MachineStatus: %w", err)
	}

	return StageName(ms.TypedSpec().Stage), nil
}

// StageName maps Talos's machine stage to status.stage.
func StageName(s runtime.MachineStage) string {
	switch s {
	case runtime.MachineStageMaintenance:
		return ichorv1alpha1.StageMaintenance
	case runtime.MachineStageInstalling:
		return ichorv1alpha1.StageInstalling
	case runtime.MachineStageRunning:
		return ichorv1alpha1.StageRunning
	case runtime.MachineStageResetting:
		return ichorv1alpha1.StageResetting
	case runtime.MachineStageRebooting, runtime.MachineStageShuttingDown, runtime.MachineStageUpgrading:
		return ichorv1alpha1.StageRebooting
	default:
		return ichorv1alpha1.StageBooting
	}
}
