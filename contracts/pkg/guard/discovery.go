package guard

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Discovery limits: how often and how much the controller scans. A scan
// probes every address of every subnet (64 at a time, each with a timeout of
// seconds), so a subnet that is too large, or an interval that is too short,
// makes the controller a port scanner of the provisioning network.
const (
	// MinDiscoveryInterval is the shortest spec.discovery.interval.
	MinDiscoveryInterval = time.Minute
	// MaxScanSubnetBits is the most host bits one subnet may have: /20 for
	// IPv4, /116 for IPv6, 4096 addresses.
	MaxScanSubnetBits = 12
	// MaxScanSubnetAddresses is the most addresses one subnet may hold.
	MaxScanSubnetAddresses = 1 << MaxScanSubnetBits
	// MaxScanAddresses is the most addresses all the subnets together may hold
	// (two /20s, or thirty-two /24s).
	MaxScanAddresses = 2 * MaxScanSubnetAddresses
	// MinScanRequestGap is the shortest time between two scans of one
	// cluster that a scan request (ichor.maesh.dev/scan-requested-at) can
	// bring about: a request made sooner after the last scan is answered
	// this long after it, not dropped.
	MinScanRequestGap = 30 * time.Second
)

const fieldDiscoverySubnets = "spec.discovery.subnets"

// ScanSize returns the number of addresses of a subnet, or an error when it
// is not a CIDR or is larger than one subnet may be.
func ScanSize(subnet string) (int, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return 0, fmt.Errorf("%q is not a subnet such as 192.168.10.0/24", subnet)
	}
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits > MaxScanSubnetBits {
		return 0, fmt.Errorf("subnet %s holds more than %d addresses, the most one scanned subnet may hold (/%d)",
			p, MaxScanSubnetAddresses, p.Addr().BitLen()-MaxScanSubnetBits)
	}
	return 1 << hostBits, nil
}

// checkDiscovery refuses a discovery interval under a minute and subnets
// larger than a scan may be. Each rule is checked when its field changes, so
// a cluster admitted before the rule keeps working until its discovery is edited.
func checkDiscovery(old, c *ichorv1alpha1.TalosCluster) []Refusal {
	var out []Refusal
	d := c.Spec.Discovery
	var oldD ichorv1alpha1.DiscoverySpec
	if old != nil {
		oldD = old.Spec.Discovery
	}
	if i := d.Interval; i != nil && i.Duration < MinDiscoveryInterval && (oldD.Interval == nil || oldD.Interval.Duration != i.Duration) {
		out = append(out, Refusal{
			Field:  "spec.discovery.interval",
			Rule:   fmt.Sprintf("the discovery interval is at least %s, not %s: each scan probes every address of the subnets", MinDiscoveryInterval, i.Duration),
			WayOut: "set spec.discovery.interval to 1m or longer, or leave it empty for 5m",
		})
	}
	if old != nil && slices.Equal(oldD.Subnets, d.Subnets) {
		return out
	}
	total := 0
	for _, s := range d.Subnets {
		n, err := ScanSize(s)
		if err != nil {
			out = append(out, Refusal{
				Field:  fieldDiscoverySubnets,
				Rule:   err.Error(),
				WayOut: fmt.Sprintf("split it into subnets of /%d (IPv4) or /%d (IPv6) or smaller, or register the machines by address", 32-MaxScanSubnetBits, 128-MaxScanSubnetBits),
			})
			continue
		}
		total += n
	}
	if total > MaxScanAddresses {
		out = append(out, Refusal{
			Field: fieldDiscoverySubnets,
			Rule: fmt.Sprintf("the subnets hold %d addresses in all; a scan covers at most %d (%d per subnet)",
				total, MaxScanAddresses, MaxScanSubnetAddresses),
			WayOut: "scan only the subnets the machines boot in, or register the machines by address (spec.discovery.addresses)",
		})
	}
	return out
}

// ScanRequest refuses a scan request (`ichor cluster discovery scan`, the
// console's Scan now) that nothing would answer: the cluster is paused, or it
// registers no address or subnet to scan.
func ScanRequest(c *ichorv1alpha1.TalosCluster) []Refusal {
	if c.Spec.Paused {
		return []Refusal{{
			Field:  "spec.paused",
			Rule:   fmt.Sprintf("cluster %s is paused: discovery scans nothing until it is resumed", c.Name),
			WayOut: fmt.Sprintf("resume it first (`ichor cluster resume %s`, or Resume on the console's Overview)", c.Name),
		}}
	}
	if len(c.Spec.Discovery.Subnets)+len(c.Spec.Discovery.Addresses) == 0 {
		return []Refusal{{
			Field:  "spec.discovery",
			Rule:   fmt.Sprintf("cluster %s registers no address or subnet for discovery to scan", c.Name),
			WayOut: "register one first (`ichor cluster discovery add ADDRESS|CIDR`, or Register on the console's Add node page)",
		}}
	}
	return nil
}
