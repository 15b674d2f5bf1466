package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

// MaxScanAddresses is the most addresses one Scan walks (a /16 of IPv4).
const MaxScanAddresses = 1 << 16

// Defaults of Scan and ProbeAll for zero arguments.
const (
	DefaultConcurrency  = 64
	DefaultProbeTimeout = 3 * time.Second
)

// Found is the outcome of probing one address: a Result, or the error that
// stopped the probe.
type Found struct {
	Address netip.Addr
	Result  *Result
	Err     error
}

// Hosts lists the host addresses of prefix in order: for IPv4 prefixes
// shorter than /31 the network and broadcast addresses are left out. It
// refuses a prefix with more than MaxScanAddresses addresses.
func Hosts(prefix netip.Prefix) ([]netip.Addr, error) {
	if !prefix.IsValid() {
		return nil, errors.New("invalid prefix")
	}

	prefix = prefix.Masked()
	hostBits := prefix.Addr().BitLen() - prefix.Bits()

	if hostBits > 16 {
		return nil, fmt.Errorf("subnet %s has more than %d addresses: split it into /%d subnets or smaller",
			prefix, MaxScanAddresses, prefix.Addr().BitLen()-16)
	}

	out := make([]netip.Addr, 0, 1<<hostBits)
	for a := prefix.Addr(); a.IsValid() && prefix.Contains(a); a = a.Next() {
		out = append(out, a)
	}

	if prefix.Addr().Is4() && hostBits >= 2 {
		out = out[1 : len(out)-1]
	}

	return out, nil
}

// Scan probes every host address of subnets on port with at most concurrency
// probes at a time, each bounded by timeout, and returns what answered, in
// address order: addresses where nothing listens are left out, addresses
// where something listened but the probe failed are kept with their error.
// Zero concurrency, timeout or port take DefaultConcurrency,
// DefaultProbeTimeout and 50000. A subnet larger than MaxScanAddresses, or
// more than MaxScanAddresses addresses in all, is an error and nothing is probed.
func Scan(ctx context.Context, subnets []netip.Prefix, port, concurrency int, timeout time.Duration) ([]Found, error) {
	var addrs []netip.Addr

	seen := map[netip.Addr]bool{}

	for _, s := range subnets {
		hosts, err := Hosts(s)
		if err != nil {
			return nil, err
		}

		for _, h := range hosts {
			if !seen[h] {
				seen[h] = true

				addrs = append(addrs, h)
			}
		}

		if len(addrs) > MaxScanAddresses {
			return nil, fmt.Errorf("the subnets hold more than %d addresses: scan fewer at a time", MaxScanAddresses)
		}
	}

	all := ProbeAll(ctx, addrs, port, concurrency, timeout)

	out := all[:0]

	for _, f := range all {
		if f.Err != nil && errors.Is(f.Err, ErrUnreachable) {
			continue
		}

		out = append(out, f)
	}

	return out, nil
}

// ProbeAll probes each address on port, at most concurrency at a time and
// each within timeout, and returns one Found per address in the order given.
// It returns early, with the remaining addresses failed by ctx's error, when
// ctx ends.
func ProbeAll(ctx context.Context, addrs []netip.Addr, port, concurrency int, timeout time.Duration) []Found {
	if concurrency <= 0 {
		concurrency = DefaultConcurrency
	}

	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}

	out := make([]Found, len(addrs))
	sem := make(chan struct{}, concurrency)

	var wg sync.WaitGroup

	for i, a := range addrs {
		out[i].Address = a

		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			out[i].Err = ctx.Err()

			continue
		}

		wg.Go(func() {
			defer func() { <-sem }()

			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()

			out[i].Result, out[i].Err = Probe(pctx, a.String(), port)
		})
	}

	wg.Wait()

	return out
}
