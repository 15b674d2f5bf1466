package talos

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// A Dialer whose Reuse is set keeps the connection it made to a node and
// hands it to the next Dial of the same node with the same trust, instead of
// a TCP connect, a TLS handshake and an HTTP/2 transport per Dial: what a
// look at an idle machine cost the controller most (bench:scale's idle
// profile at 1,000 machines put the dial at a quarter of its CPU).
//
// A kept connection is one gRPC channel. It is shared by every Node Dial
// returns for it and closed when the last of them is closed after it stopped
// being handed out, which it does:
//   - Reuse after it was made, at most half CertTTL, so that none is handed
//     out past the end of the certificate it authenticated with (the
//     certificate a handshake sends is the Dialer's current one,
//     GetClientCertificate, in the first half of its life, so a reconnect
//     never sends an old one);
//   - once a call on it failed Unavailable or DeadlineExceeded (the node
//     rebooted, powered off or hangs), or gRPC reports it in transient
//     failure or shut down: the next Dial makes a new connection at once, as
//     a Dial without Reuse would, instead of waiting on gRPC's reconnect
//     backoff;
//   - when the trust changes: the key is the address, the bundle's OS CA
//     (certificate and key) and the CAs accepted beside it (Accept), so a CA
//     rotation's stage dials anew.
//
// A call that changes a node still checks first that the node is the
// machine (VerifyIdentity), on whichever connection: keeping the connection
// keeps no identity.

// pooledConn is a connection a Dialer keeps.
type pooledConn struct {
	c    *talosclient.Client
	made time.Time
	// refs counts the open Nodes on it; kept says it is still handed out.
	// Both under the Dialer's mu.
	refs int
	kept bool
	// failed is set by the interceptors when a call failed in a way that
	// says the connection (or the node behind it) is gone.
	failed atomic.Bool
}

// connKey names a kept connection: the address and the trust it was made with.
type connKey struct {
	address string
	trust   [sha256.Size]byte
}

// sweepEvery is how often Dial looks for kept connections to close.
const sweepEvery = 30 * time.Second

// noteErr marks the connection failed when err says the node is not
// answering on it.
func (p *pooledConn) noteErr(err error) {
	switch status.Code(err) { //nolint:exhaustive // the other codes are the node's answer
	case codes.Unavailable, codes.DeadlineExceeded:
		p.failed.Store(true)
	}
}

// watchedStream notes the errors of a stream's receives (a COSI List's).
type watchedStream struct {
	grpc.ClientStream
	p *pooledConn
}

func (s watchedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.p.noteErr(err)
	}

	return err
}

// options are the dial options of a kept connection: interceptors that note
// its failed calls, and no read buffer of gRPC's own. A kept connection is
// mostly idle, and gRPC's read buffer (32 KiB by default) stays allocated for
// the connection's life: 1,000 kept connections held 36 MiB of them
// (bench:scale's heap profile). Without it the framer reads from the TLS
// connection, which reads whole records from the socket and serves reads
// from the decrypted record (crypto/tls's Conn.Read), so dropping gRPC's
// buffer adds no read syscall per frame.
func (p *pooledConn) options() talosclient.OptionFunc {
	return talosclient.WithGRPCDialOptions(
		grpc.WithReadBufferSize(0),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, opts ...grpc.CallOption,
		) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			p.noteErr(err)

			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption,
		) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				p.noteErr(err)

				return nil, err
			}

			return watchedStream{ClientStream: s, p: p}, nil
		}),
	)
}

// usable says whether a kept connection may be handed out at now.
func (p *pooledConn) usable(now time.Time, reuse time.Duration) bool {
	if p.failed.Load() || now.Sub(p.made) >= reuse {
		return false
	}

	switch p.c.Conn().GetState() { //nolint:exhaustive // idle and connecting connect on the next call
	case connectivity.TransientFailure, connectivity.Shutdown:
		return false
	}

	return true
}

// trustKey names the trust a Dial with b makes a connection with: the OS CA
// (certificate and key) and the CAs accepted beside it.
func trustKey(b *secrets.Bundle, accepted [][]byte) [sha256.Size]byte {
	ca := osCAKey(b)

	h := sha256.New()
	h.Write(ca[:])

	for _, a := range accepted {
		h.Write([]byte{0})
		h.Write(a)
	}

	var k [sha256.Size]byte

	h.Sum(k[:0])

	return k
}

// dialKept is Dial with Reuse: the kept connection of the node and trust
// when there is a usable one, else a new one, kept.
func (d *Dialer) dialKept(ctx context.Context, address string, b *secrets.Bundle, roots *stdx509.CertPool, accepted [][]byte) (*Node, error) {
	key := connKey{address: address, trust: trustKey(b, accepted)}
	now := time.Now()
	reuse := d.reuse()

	d.mu.Lock()

	closing := d.sweepLocked(now, reuse)

	p := d.conns[key]
	if p != nil && !p.usable(now, reuse) {
		if c := d.dropLocked(key, p); c != nil {
			closing = append(closing, c)
		}

		p = nil
	}

	if p == nil {
		// The certificate each handshake sends is the Dialer's current one
		// for the bundle's CA: a connection that reconnects after its first
		// certificate's window sends a newer one.
		tlsConfig := &tls.Config{
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				cert, err := d.clientCert(b)
				if err != nil {
					return nil, err
				}

				return &cert, nil
			},
			RootCAs:    roots,
			MinVersion: tls.VersionTLS13,
		}

		p = &pooledConn{made: now, kept: true}

		// talosclient.New makes the gRPC channel without connecting
		// (grpc.NewClient): the handshake happens at the first call, outside
		// the lock.
		c, err := dialTLS(ctx, address, d.Port, tlsConfig, p.options())
		if err != nil {
			d.mu.Unlock()
			closeAll(closing)

			return nil, err
		}

		p.c = c

		if d.conns == nil {
			d.conns = map[connKey]*pooledConn{}
		}

		d.conns[key] = p
	}

	p.refs++
	d.mu.Unlock()

	closeAll(closing)

	var once sync.Once

	return &Node{c: p.c, address: address, release: func() { once.Do(func() { d.release(p) }) }}, nil
}

// reuse is how long a kept connection is handed out: Reuse, at most half of
// the client certificate's life. A handshake sends a certificate in the
// first half of its life (clientCert), so a connection is never handed out
// past the end of the certificate it authenticated with.
func (d *Dialer) reuse() time.Duration {
	return min(d.Reuse, d.certTTL()/2)
}

// release is a Node's Close on a kept connection: the connection closes
// when it is no longer handed out and no Node is open on it.
func (d *Dialer) release(p *pooledConn) {
	d.mu.Lock()
	p.refs--
	done := p.refs == 0 && !p.kept
	d.mu.Unlock()

	if done {
		_ = p.c.Close()
	}
}

// dropLocked stops handing p out; it returns its client to close when no
// Node is open on it.
func (d *Dialer) dropLocked(key connKey, p *pooledConn) *talosclient.Client {
	if d.conns[key] == p {
		delete(d.conns, key)
	}

	p.kept = false

	if p.refs == 0 {
		return p.c
	}

	return nil
}

// sweepLocked drops, at most every sweepEvery, the kept connections that are
// no longer usable (too old, failed, or to a node gone): a machine removed
// from the fleet leaves no connection behind for longer than Reuse.
func (d *Dialer) sweepLocked(now time.Time, reuse time.Duration) []*talosclient.Client {
	if now.Sub(d.swept) < sweepEvery {
		return nil
	}

	d.swept = now

	var closing []*talosclient.Client

	for k, p := range d.conns {
		if !p.usable(now, reuse) {
			if c := d.dropLocked(k, p); c != nil {
				closing = append(closing, c)
			}
		}
	}

	return closing
}

// Close closes the connections the Dialer keeps (those a Node is still open
// on close when it is closed). A Dial after Close keeps new ones.
func (d *Dialer) Close() {
	d.mu.Lock()

	var closing []*talosclient.Client

	for k, p := range d.conns {
		if c := d.dropLocked(k, p); c != nil {
			closing = append(closing, c)
		}
	}

	d.mu.Unlock()

	closeAll(closing)
}

// KeptConnections is the number of connections the Dialer keeps and hands out.
func (d *Dialer) KeptConnections() int {
	d.mu.Lock()
	defer d.mu.Unlock()

	return len(d.conns)
}

func closeAll(cs []*talosclient.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// errNoOSCA is Dial's error for a bundle without the Talos API CA.
var errNoOSCA = errors.New("the secrets bundle has no OS CA")
