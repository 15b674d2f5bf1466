package approval

import (
	"fmt"
	"net"
	"strings"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// NetworkInput is the primary NIC as a person gave it.
type NetworkInput struct {
	// NIC is the permanent MAC of the primary NIC; empty for none.
	NIC string
	// DHCP takes the address from DHCP.
	DHCP bool
	// Addresses are static addresses in CIDR form.
	Addresses []string
	// Gateway is the default gateway of a static configuration.
	Gateway string
	// Nameservers are DNS servers.
	Nameservers []string
	// VLAN is a VLAN ID on the NIC; 0 for none.
	VLAN int
}

// NetworkFields are how a front end names the NetworkInput fields.
type NetworkFields struct {
	NIC, DHCP, Address, Gateway, Nameserver, VLAN string
}

// Network checks in against the links discovery read and returns the
// TalosMachine's spec.network.
func Network(in NetworkInput, links []ichorv1alpha1.DiscoveredLink, f NetworkFields) (ichorv1alpha1.MachineNetwork, error) {
	var n ichorv1alpha1.MachineNetwork
	if in.NIC != "" {
		hw, err := net.ParseMAC(in.NIC)
		if err != nil || len(hw) != 6 {
			return n, fmt.Errorf("%s %q is not a MAC address such as 52:54:00:12:34:56", f.NIC, in.NIC)
		}
		n.MACAddress = hw.String()
		if len(links) > 0 {
			known := false
			var macs []string
			for _, l := range links {
				if l.PermanentMAC != "" {
					macs = append(macs, l.PermanentMAC+" ("+l.Name+")")
				}
				if strings.EqualFold(l.PermanentMAC, n.MACAddress) {
					known = true
				}
			}
			if !known {
				return n, fmt.Errorf("%s %s is not a permanent MAC discovery read on the machine; the links are: %s", f.NIC, n.MACAddress, strings.Join(macs, ", "))
			}
		}
	}
	if in.DHCP && len(in.Addresses) > 0 {
		return n, fmt.Errorf("%s and %s exclude each other: use DHCP or static addresses", f.DHCP, f.Address)
	}
	if in.DHCP {
		n.DHCP = new(true)
	}
	for _, a := range in.Addresses {
		if _, _, err := net.ParseCIDR(a); err != nil {
			return n, fmt.Errorf("%s %q is not an address in CIDR form such as 192.168.10.5/24", f.Address, a)
		}
		n.Addresses = append(n.Addresses, a)
	}
	if in.Gateway != "" {
		if len(n.Addresses) == 0 {
			return n, fmt.Errorf("%s needs a static %s", f.Gateway, f.Address)
		}
		if net.ParseIP(in.Gateway) == nil {
			return n, fmt.Errorf("%s %q is not an IP address", f.Gateway, in.Gateway)
		}
		n.Gateway = in.Gateway
	}
	for _, ns := range in.Nameservers {
		if net.ParseIP(ns) == nil {
			return n, fmt.Errorf("%s %q is not an IP address", f.Nameserver, ns)
		}
		n.Nameservers = append(n.Nameservers, ns)
	}
	if in.VLAN != 0 {
		if in.VLAN < 1 || in.VLAN > 4094 {
			return n, fmt.Errorf("%s %d is not a VLAN ID (1-4094)", f.VLAN, in.VLAN)
		}
		v := int32(in.VLAN)
		n.VLAN = &v
	}
	return n, nil
}
