package talos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cosi-project/runtime/pkg/safe"
	cryptox509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

var (
	// ErrFingerprintMismatch is returned when a maintenance node presents a
	// certificate whose fingerprint is not the pin the caller gave.
	ErrFingerprintMismatch = errors.New("the node presents another maintenance certificate than the one pinned")
	// ErrCertificateChanged is returned when a connection dialed without a pin
	// meets, on a later handshake, another certificate than on its first:
	// two nodes' answers are never mixed under one fingerprint.
	ErrCertificateChanged = errors.New("the node presented another certificate on a second connection")
)

// Maintenance is a connection to a node in maintenance mode: TLS without a
// client certificate and without verifying the server against a CA (the node
// has none yet), so the caller is os:reader
// (t:internal/app/machined/pkg/controllers/runtime/api_service_config.go) and
// the only trust is the maintenance certificate's SPKI fingerprint, pinned
// (machinery client WithMaintenanceMode does the same pinning,
// pkg/machinery/client/options.go). The fingerprint is the base64 SHA-256 of
// the certificate's SubjectPublicKeyInfo, the one talosctl's
// --cert-fingerprint takes (github.com/siderolabs/crypto x509/fingerprint.go).
type Maintenance struct {
	c *talosclient.Client

	mu sync.Mutex
	// pin is the caller's pin, or the fingerprint of the first handshake.
	pin   string
	given bool
	seen  string
	// certRequested is set when the server asked for a client certificate,
	// which a node in maintenance mode never does.
	certRequested atomic.Bool
}

// DialMaintenance connects to address in maintenance mode. With a non-empty
// pin, a handshake with any other certificate fails with ErrFingerprintMismatch
// before a byte of the request is sent; with none, the first handshake's
// certificate is recorded and pinned for the later ones (ErrCertificateChanged).
// Port zero means Talos's apid port.
func DialMaintenance(ctx context.Context, address string, port int, pin string) (*Maintenance, error) {
	m := &Maintenance{pin: pin, given: pin != ""}

	c, err := talosclient.New(ctx, append([]talosclient.OptionFunc{
		talosclient.WithEndpoints(endpoint(address, port)),
		talosclient.WithTLSConfig(&tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // maintenance mode has no CA; the SPKI fingerprint is pinned in VerifyConnection
			MinVersion:         tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				m.certRequested.Store(true)

				return &tls.Certificate{}, nil // none: the caller holds no credential for this node
			},
			// VerifyConnection runs on every handshake, resumed ones included.
			VerifyConnection: m.verify,
		}),
	}, dialOptions()...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}

	m.c = c

	return m, nil
}

func (m *Maintenance) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the node presented no certificate")
	}

	fp := cryptox509.SPKIFingerprint(cs.PeerCertificates[0]).String()

	m.mu.Lock()
	defer m.mu.Unlock()

	m.seen = fp

	switch {
	case m.pin == "":
		m.pin = fp
	case fp == m.pin:
	case m.given:
		return ErrFingerprintMismatch
	default:
		return ErrCertificateChanged
	}

	return nil
}

// Close closes the connection.
func (m *Maintenance) Close() { _ = m.c.Close() }

// Fingerprint is the SPKI fingerprint of the certificate the node presented
// on the latest handshake, "" before the first.
func (m *Maintenance) Fingerprint() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.seen
}

// Configured tells whether err, from a call on this connection, is a refusal
// for want of a client certificate: the node runs a configured Talos, whose
// apid demands one signed by its OS CA. Either the API said PermissionDenied
// or Unauthenticated, or the server asked for a certificate during the
// handshake and the call found the node unavailable.
func (m *Maintenance) Configured(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	case codes.Unavailable:
		return m.certRequested.Load()
	default:
		return false
	}
}

// Stage reads MachineStatus: the node's stage in Ichor's words.
func (m *Maintenance) Stage(ctx context.Context) (string, error) {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, m.c.COSI, runtime.MachineStatusID)
	if err != nil {
		return "", fmt.Errorf("read MachineStatus: %w", err)
	}

	return StageName(ms.TypedSpec().Stage), nil
}

// UUID reads the SMBIOS UUID from SystemInformation.
func (m *Maintenance) UUID(ctx context.Context) (string, error) {
	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, m.c.COSI, hardware.SystemInformationID)
	if err != nil {
		return "", fmt.Errorf("read SystemInformation: %w", err)
	}

	return si.TypedSpec().UUID, nil
}

// Inventory reads who the node is and what hardware it has (ReadInventory).
func (m *Maintenance) Inventory(ctx context.Context) (*Inventory, error) {
	return ReadInventory(ctx, m.c)
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
