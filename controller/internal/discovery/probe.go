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
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
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
	// Inventory is what a node in maintenance mode reports (its version,
	// stage, identity, hardware and SecureBoot state); empty for
	// KindAlreadyConfigured.
	talos.Inventory
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

	return read(ctx, addr, port, target)
}

// read reads the node over the maintenance connection, its certificate's
// fingerprint recorded on the first handshake and pinned for the later ones.
func read(ctx context.Context, addr netip.Addr, port int, target string) (*Result, error) {
	mn, err := talos.DialMaintenance(ctx, addr.String(), port, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", target, err)
	}

	defer mn.Close()

	inv, err := mn.Inventory(ctx)
	if err != nil {
		// A configured node refuses the first read (the Talos version); a
		// node configured between two reads refuses a later one.
		if mn.Configured(err) {
			return &Result{Address: addr, Kind: KindAlreadyConfigured, Fingerprint: mn.Fingerprint()}, nil
		}

		return nil, fmt.Errorf("%s: %w", target, err)
	}

	res := &Result{Address: addr, Kind: KindMaintenance, Fingerprint: mn.Fingerprint(), Inventory: *inv}
	if res.Fingerprint == "" {
		return nil, fmt.Errorf("%s: no certificate fingerprint was recorded", target)
	}

	return res, nil
}
