package initflow

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	cryptox509 "github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// versionID is the ID of the runtime.Version resource (machinery resources/runtime/version.go).
const versionID = "version"

// ErrFingerprint is wrapped when the node presents another maintenance
// certificate than the pinned one.
var ErrFingerprint = errors.New("the node presents another maintenance certificate than the one pinned")

// ErrConfiguredElsewhere is wrapped when the node runs a Talos configured with
// another cluster's CA: init never touches it.
var ErrConfiguredElsewhere = errors.New("the node runs a configured Talos that does not trust this cluster's secrets bundle")

// Node is what init reads from the first node in maintenance mode.
type Node struct {
	Address      string
	Fingerprint  string
	TalosVersion string
	Stage        string
	Identity     ichorv1alpha1.MachineIdentity
	Hardware     ichorv1alpha1.MachineHardware
}

// maintenance is a connection to a node in maintenance mode: TLS without a
// client certificate, the server's self-signed certificate unverifiable, so
// the only trust is its SPKI fingerprint, recorded on the first handshake and
// pinned (machinery client/options.go WithMaintenanceMode pins the same way).
type maintenance struct {
	c             *talosclient.Client
	mu            sync.Mutex
	seen          string
	certRequested atomic.Bool
}

func endpoint(address string, port int) string {
	if port == 0 {
		port = constants.ApidPort
	}

	return net.JoinHostPort(address, strconv.Itoa(port))
}

func dialMaintenance(ctx context.Context, address string, port int, pin string) (*maintenance, error) {
	m := &maintenance{}

	c, err := talosclient.New(ctx,
		talosclient.WithEndpoints(endpoint(address, port)),
		talosclient.WithTLSConfig(&tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // maintenance mode has no CA; the SPKI fingerprint is pinned below
			MinVersion:         tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				m.certRequested.Store(true)

				return &tls.Certificate{}, nil
			},
			// VerifyConnection runs on resumed sessions too.
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the node presented no certificate")
				}

				fp, err := cryptox509.SPKIFingerprintFromDER(cs.PeerCertificates[0].Raw)
				if err != nil {
					return fmt.Errorf("read the node's certificate: %w", err)
				}

				m.mu.Lock()
				m.seen = fp.String()
				m.mu.Unlock()

				if pin != "" && fp.String() != pin {
					return ErrFingerprint
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

func (m *maintenance) close() { _ = m.c.Close() }

func (m *maintenance) fingerprint() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.seen
}

// configured tells a refusal for want of a client certificate: the node is
// configured (its apid asked for a certificate, or said so).
func (m *maintenance) configured(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	case codes.Unavailable:
		return m.certRequested.Load()
	default:
		return false
	}
}

// read reads the node's version, stage, identity, disks and links, the
// reads `talosctl get --insecure` makes (os:reader in maintenance mode).
func (m *maintenance) read(ctx context.Context, address string) (*Node, error) {
	n, err := readNode(ctx, m.c, address)
	if err != nil {
		return nil, err
	}

	n.Fingerprint = m.fingerprint()

	return n, nil
}

// readNode reads a node's version, stage, identity, disks and links; over a
// maintenance connection or an os:admin one alike.
func readNode(ctx context.Context, c *talosclient.Client, address string) (*Node, error) {
	ver, err := safe.StateGetByID[*talosruntime.Version](ctx, c.COSI, versionID)
	if err != nil {
		return nil, err
	}

	n := &Node{Address: address, TalosVersion: ver.TypedSpec().Version}

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		return nil, fmt.Errorf("read SystemInformation: %w", err)
	}

	spec := si.TypedSpec()
	n.Identity.UUID, n.Identity.Serial = strings.ToLower(strings.TrimSpace(spec.UUID)), strings.TrimSpace(spec.SerialNumber)
	n.Hardware.Manufacturer, n.Hardware.ProductName = strings.TrimSpace(spec.Manufacturer), strings.TrimSpace(spec.ProductName)

	ms, err := safe.StateGetByID[*talosruntime.MachineStatus](ctx, c.COSI, talosruntime.MachineStatusID)
	if err != nil {
		return nil, fmt.Errorf("read MachineStatus: %w", err)
	}

	n.Stage = stageName(ms.TypedSpec().Stage)

	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		return nil, fmt.Errorf("read Disks: %w", err)
	}

	parted := map[resource.ID]bool{}
	if vols, err := safe.StateListAll[*block.DiscoveredVolume](ctx, c.COSI); err == nil {
		for v := range vols.All() {
			if p := v.TypedSpec().Parent; p != "" {
				parted[p] = true
			}
		}
	}

	for d := range disks.All() {
		s := d.TypedSpec()
		if s.CDROM || len(n.Hardware.Disks) == 64 {
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

		n.Hardware.Disks = append(n.Hardware.Disks, disk)
	}

	links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		return nil, fmt.Errorf("read LinkStatuses: %w", err)
	}

	for l := range links.All() {
		s := l.TypedSpec()
		if !s.Physical() || len(n.Hardware.Links) == 64 {
			continue
		}

		link := ichorv1alpha1.DiscoveredLink{Name: l.Metadata().ID()}
		if len(s.PermanentAddr) > 0 {
			link.PermanentMAC = strings.ToLower(net.HardwareAddr(s.PermanentAddr).String())
			n.Identity.MACAddresses = append(n.Identity.MACAddresses, link.PermanentMAC)
		}

		n.Hardware.Links = append(n.Hardware.Links, link)
	}

	slices.Sort(n.Identity.MACAddresses)
	n.Identity.MACAddresses = slices.Compact(n.Identity.MACAddresses)
	return n, nil
}

// apply sends the configuration insecurely (the maintenance connection). The
// call returns once the node stored it; the install runs afterwards.
func (m *maintenance) apply(ctx context.Context, cfg []byte) error {
	if _, err := m.c.ApplyConfiguration(ctx, &machineapi.ApplyConfigurationRequest{Data: cfg, Mode: machineapi.ApplyConfigurationRequest_AUTO}); err != nil {
		return fmt.Errorf("the node refused the configuration: %w", err)
	}

	return nil
}

func stageName(s talosruntime.MachineStage) string {
	switch s {
	case talosruntime.MachineStageMaintenance:
		return ichorv1alpha1.StageMaintenance
	case talosruntime.MachineStageInstalling:
		return ichorv1alpha1.StageInstalling
	case talosruntime.MachineStageRunning:
		return ichorv1alpha1.StageRunning
	case talosruntime.MachineStageResetting:
		return ichorv1alpha1.StageResetting
	case talosruntime.MachineStageRebooting, talosruntime.MachineStageShuttingDown, talosruntime.MachineStageUpgrading:
		return ichorv1alpha1.StageRebooting
	default:
		return ichorv1alpha1.StageBooting
	}
}

// adminCertTTL is the lifetime of the os:admin certificate init uses for its
// own calls; the talosconfig it stores has machinery's default (one year).
const adminCertTTL = 30 * time.Minute

// dialAdmin connects to a configured node as os:admin with a certificate
// issued from the bundle's OS CA, verifying the node against that CA.
func dialAdmin(ctx context.Context, address string, port int, b *secrets.Bundle) (*talosclient.Client, error) {
	pem, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), adminCertTTL)
	if err != nil {
		return nil, fmt.Errorf("issue an os:admin client certificate: %w", err)
	}

	cert, err := tls.X509KeyPair(pem.Crt, pem.Key)
	if err != nil {
		return nil, fmt.Errorf("load the os:admin client certificate: %w", err)
	}

	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM(b.Certs.OS.Crt) {
		return nil, errors.New("the secrets bundle's OS CA does not parse")
	}

	c, err := talosclient.New(ctx,
		talosclient.WithEndpoints(endpoint(address, port)),
		talosclient.WithTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS13}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}

	return c, nil
}

// configuredStage reads the stage over the admin connection.
func configuredStage(ctx context.Context, c *talosclient.Client) (string, error) {
	ms, err := safe.StateGetByID[*talosruntime.MachineStatus](ctx, c.COSI, talosruntime.MachineStatusID)
	if err != nil {
		return "", err
	}

	return stageName(ms.TypedSpec().Stage), nil
}

// bootstrap creates the etcd cluster on the node. AlreadyExists (its data
// directory holds a member) means an earlier run did it: not an error
// (siderolabs/talos internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Bootstrap).
func bootstrap(ctx context.Context, c *talosclient.Client) (already bool, err error) {
	err = c.Bootstrap(ctx, &machineapi.BootstrapRequest{})
	if status.Code(err) == codes.AlreadyExists {
		return true, nil
	}

	return false, err
}

// talosconfig is the os:admin talosconfig of the cluster, for the store: the
// recovery path that needs no controller.
func talosconfig(cluster, address string, b *secrets.Bundle) ([]byte, error) {
	pem, err := b.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		return nil, fmt.Errorf("issue the os:admin client certificate: %w", err)
	}

	cfg := clientconfig.NewConfig(cluster, []string{address}, b.Certs.OS.Crt, pem)
	if ctx, ok := cfg.Contexts[cluster]; ok {
		ctx.Nodes = []string{address}
	}

	return cfg.Bytes()
}
