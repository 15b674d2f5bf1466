package v1alpha1

import (
	"fmt"
	"net"
	"slices"
)

// ParseDiscoveryTarget reads an address (192.168.10.5) or a subnet
// (192.168.10.0/24) to discover; exactly one of the results is set. A subnet
// written with host bits is refused with the subnet it probably meant.
func ParseDiscoveryTarget(s string) (address, subnet string, err error) {
	if ip := net.ParseIP(s); ip != nil {
		return ip.String(), "", nil
	}
	if _, n, err := net.ParseCIDR(s); err == nil {
		if n.String() != s {
			return "", "", fmt.Errorf("%q is not a subnet address: did you mean %s?", s, n.String())
		}
		return "", s, nil
	}
	return "", "", fmt.Errorf("%q is neither an IP address (192.168.10.5) nor a subnet (192.168.10.0/24)", s)
}

// Add appends the addresses and subnets d does not have yet and returns those
// it added, in order.
func (d *DiscoverySpec) Add(addresses, subnets []string) []string {
	var added []string
	for _, a := range addresses {
		if !slices.Contains(d.Addresses, a) {
			d.Addresses = append(d.Addresses, a)
			added = append(added, a)
		}
	}
	for _, s := range subnets {
		if !slices.Contains(d.Subnets, s) {
			d.Subnets = append(d.Subnets, s)
			added = append(added, s)
		}
	}
	return added
}

// PendingScanRequest returns the value of the cluster's scan request
// (ScanRequestedAnnotation) when no scan has answered it yet, "" otherwise.
func (c *TalosCluster) PendingScanRequest() string {
	v := c.Annotations[ScanRequestedAnnotation]
	if v == "" || v == c.Status.Discovery.LastHandledScanRequest {
		return ""
	}
	return v
}
