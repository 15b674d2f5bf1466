// Package discovery finds Talos nodes in maintenance mode: it probes one
// address, or scans subnets for the Talos API port, over the unauthenticated,
// read-only maintenance connection (architecture, "Nodes" and "Trust").
//
// A node in maintenance mode serves its API with a self-signed certificate and
// asks for no client certificate; every caller is os:reader
// (t:internal/app/machined/pkg/controllers/runtime/api_service_config.go).
// A configured node's apid demands a client certificate signed by its OS CA,
// so a probe without one is refused: that node is AlreadyConfigured.
package discovery

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind is what answered at an address.
type Kind string

const (
	// KindMaintenance is a node in maintenance mode: its hardware was read.
	KindMaintenance Kind = "Maintenance"
	// KindAlreadyConfigured is a node that runs a configured Talos: its API
	// demands a client certificate, so nothing was read.
	KindAlreadyConfigured Kind = "AlreadyConfigured"
)

// ErrUnreachable is wrapped by the error of a probe that found nothing
// listening on the Talos API port (refused, no route, or the dial timed out).
var ErrUnreachable = errors.New("nothing answers on the Talos API port")

// versionID is the ID of the runtime.Version resource (m:resources/runtime/version.go NewVersion).
const versionID = "version"

// DefaultTimeout bounds one probe when the caller's context has no deadline.
const DefaultTimeout = 5 * time.Second

// Result is what a probe found at one address.
type Result struct {
	// Address is the probed IP address.
	Address netip.Addr
	// Kind says whether the node is in maintenance mode or already configured.
	Kind Kind
	// Fingerprint is the base64 SHA-256 of the SubjectPublicKeyInfo of the
	// certificate the node presented: the SPKI fingerprint talosctl's
	// --cert-fingerprint and machinery's WithMaintenanceMode pin
	// (github.com/siderolabs/crypto x509/fingerprint.go SPKIFingerprint,
	// m:client/options.go WithMaintenanceMode). An SPKI pin survives a
	// re-issued certificate for the same key, which is how Talos keeps its
	// maintenance key. Set for both kinds.
	Fingerprint string
	// UUID, Serial, Manufacturer and ProductName come from SMBIOS (SystemInformation).
	UUID, Serial, Manufacturer, ProductName string
	// TalosVersion is the version the node runs (its boot media in maintenance).
	TalosVersion string
	// Stage is MachineStatus's stage in lower case, for example "maintenance".
	Stage string
	// Disks are the node's disks (CD-ROMs left out).
	Disks []Disk
	// Links are the physical links (ethernet, no kind), with their permanent MACs.
	Links []Link
	// SecureBoot is whether the node booted with SecureBoot (SecurityState);
	// nil when the node does not say.
	SecureBoot *bool
}

// MACs returns the permanent MAC addresses of the physical links, sorted and
// without duplicates or empty ones: the MAC part of the identity.
func (r *Result) MACs() []string {
	out := make([]string, 0, len(r.Links))

	for _, l := range r.Links {
		if l.PermanentMAC != "" {
			out = append(out, l.PermanentMAC)
		}
	}

	slices.Sort(out)

	return slices.Compact(out)
}

// Disk is one disk as Talos reports it, with the fields that identify it.
type Disk struct {
	DevicePath string
	WWID       string
	Serial     string
	// ByID is the first /dev/disk/by-id symlink, when udev made one.
	ByID    string
	BusPath string
	Size    uint64
	// HasPartitions is true when Talos discovered partitions on the disk. It is
	// read from DiscoveredVolumes; a node that does not serve them reports false.
	HasPartitions bool
}

// Link is one physical network link.
type Link struct {
	Name string
	// PermanentMAC is the permanent hardware address in lower-case colon form.
	PermanentMAC string
}

// Probe reads the node at address. A node in maintenance mode gives a Result
// of KindMaintenance with its hardware; a configured node gives a Result of
// KindAlreadyConfigured with only its certificate's fingerprint; an address
// where nothing listens gives an error wrapping ErrUnreachable. Port zero
// means Talos's apid port (50000). Without a deadline on ctx the probe gives
// up after DefaultTimeout.
func Probe(ctx context.Context, address string, port int) (*Result, error) {
	addr, err := netip.ParseAddr(address)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IP address: %w", address, err)
	}

	if port == 0 {
		port = constants.ApidPort
	}

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc

		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}

	target := net.JoinHostPort(addr.String(), strconv.Itoa(port))

	// A plain TCP connection first: cheap, and it tells "nothing listens" apart
	// from "something listens and refused us".
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", target, ErrUnreachable, err)
	}

	_ = conn.Close()

	return read(ctx, addr, target)
}

// peer records what the TLS handshakes of one probe saw.
type peer struct {
	mu          sync.Mutex
	fingerprint string
	// certRequested is set when the server asked for a client certificate,
	// which a node in maintenance mode never does.
	certRequested atomic.Bool
}

func (p *peer) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the node presented no certificate")
	}

	sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)

	p.mu.Lock()
	defer p.mu.Unlock()

	fp := base64.StdEncoding.EncodeToString(sum[:])
	if p.fingerprint != "" && p.fingerprint != fp {
		// gRPC reconnected and another certificate answered: refuse to mix two
		// nodes' answers under one fingerprint.
		return errors.New("the node presented another certificate on a second connection")
	}

	p.fingerprint = fp

	return nil
}

func (p *peer) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.fingerprint
}

func read(ctx context.Context, addr netip.Addr, target string) (*Result, error) {
	p := &peer{}

	c, err := talosclient.New(ctx,
		talosclient.WithEndpoints(target),
		talosclient.WithTLSConfig(&tls.Config{
			// Maintenance mode presents a self-signed certificate nobody can
			// verify; the SPKI fingerprint is recorded instead and pinned later.
			InsecureSkipVerify: true, //nolint:gosec // maintenance mode: fingerprint recorded in VerifyConnection
			VerifyConnection:   p.verify,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				p.certRequested.Store(true)

				return &tls.Certificate{}, nil // none: we hold no credential for this node
			},
			MinVersion: tls.VersionTLS12,
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", target, err)
	}

	defer func() { _ = c.Close() }()

	res := &Result{Address: addr}

	// The first read is the Version resource (os:reader in maintenance, the
	// same that `talosctl get version --insecure` reads).
	ver, err := safe.StateGetByID[*talosruntime.Version](ctx, c.COSI, versionID)
	if err != nil {
		if configured(err, p) {
			res.Kind, res.Fingerprint = KindAlreadyConfigured, p.get()

			return res, nil
		}

		return nil, fmt.Errorf("%s: reading the Talos version: %w", target, err)
	}

	res.Kind = KindMaintenance
	res.TalosVersion = ver.TypedSpec().Version

	if err := readHardware(ctx, c, res); err != nil {
		if configured(err, p) {
			return &Result{Address: addr, Kind: KindAlreadyConfigured, Fingerprint: p.get()}, nil
		}

		return nil, fmt.Errorf("%s: %w", target, err)
	}

	res.Fingerprint = p.get()
	if res.Fingerprint == "" {
		return nil, fmt.Errorf("%s: no certificate fingerprint was recorded", target)
	}

	return res, nil
}

// configured tells a refusal for want of a client certificate: the server
// asked for one during the handshake and the call failed, or the API said
// PermissionDenied or Unauthenticated.
func configured(err error, p *peer) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	case codes.Unavailable:
		return p.certRequested.Load()
	default:
		return false
	}
}

func readHardware(ctx context.Context, c *talosclient.Client, res *Result) error {
	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		return fmt.Errorf("reading SystemInformation: %w", err)
	}

	spec := si.TypedSpec()
	res.UUID, res.Serial = strings.TrimSpace(spec.UUID), strings.TrimSpace(spec.SerialNumber)
	res.Manufacturer, res.ProductName = strings.TrimSpace(spec.Manufacturer), strings.TrimSpace(spec.ProductName)

	ms, err := safe.StateGetByID[*talosruntime.MachineStatus](ctx, c.COSI, talosruntime.MachineStatusID)
	if err != nil {
		return fmt.Errorf("reading MachineStatus: %w", err)
	}

	res.Stage = strings.ToLower(ms.TypedSpec().Stage.String())

	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		return fmt.Errorf("reading Disks: %w", err)
	}

	withPartitions := partitionedDisks(ctx, c)

	for d := range disks.All() {
		s := d.TypedSpec()
		if s.CDROM {
			continue
		}

		disk := Disk{
			DevicePath: s.DevPath, WWID: s.WWID, Serial: s.Serial, BusPath: s.BusPath, Size: s.Size,
			HasPartitions: withPartitions[d.Metadata().ID()],
		}

		for _, l := range s.Symlinks {
			if strings.HasPrefix(l, "/dev/disk/by-id/") {
				disk.ByID = l

				break
			}
		}

		res.Disks = append(res.Disks, disk)
	}

	// SecurityState is readable in maintenance mode (talos-api.md, COSI
	// resources); best effort: a node that does not serve it leaves it unknown.
	if ss, err := safe.StateGetByID[*talosruntime.SecurityState](ctx, c.COSI, talosruntime.SecurityStateID); err == nil {
		res.SecureBoot = new(ss.TypedSpec().SecureBoot)
	}

	links, err := safe.StateListAll[*network.LinkStatus](ctx, c.COSI)
	if err != nil {
		return fmt.Errorf("reading LinkStatuses: %w", err)
	}

	for l := range links.All() {
		s := l.TypedSpec()
		if !s.Physical() {
			continue
		}

		link := Link{Name: l.Metadata().ID()}
		if len(s.PermanentAddr) > 0 {
			link.PermanentMAC = strings.ToLower(net.HardwareAddr(s.PermanentAddr).String())
		}

		res.Links = append(res.Links, link)
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
