package commands

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// selectorSyntax is how a disk selector is written on the command line.
const selectorSyntax = "wwid=ID, serial=SERIAL, byid=/dev/disk/by-id/NAME, buspath=PATH or dev=/dev/sdX"

// parseDiskSelector reads KEY=VALUE: wwid, serial, byid, buspath or dev.
func parseDiskSelector(s string) (ichorv1alpha1.DiskSelector, error) {
	key, value, ok := strings.Cut(s, "=")
	if !ok || value == "" {
		return ichorv1alpha1.DiskSelector{}, fmt.Errorf("disk selector %q: write it as %s", s, selectorSyntax)
	}
	var sel ichorv1alpha1.DiskSelector
	switch strings.ToLower(key) {
	case "wwid":
		sel.WWID = value
	case "serial":
		sel.Serial = value
	case "byid", "by-id":
		sel.ByID = value
	case "buspath", "bus-path":
		sel.BusPath = value
	case "dev", "devicepath", "device":
		sel.DevicePath = value
	default:
		return ichorv1alpha1.DiskSelector{}, fmt.Errorf("disk selector %q: %q is not a disk attribute; write it as %s", s, key, selectorSyntax)
	}
	return sel, nil
}

func describeDisks(disks []ichorv1alpha1.DiscoveredDisk) string {
	parts := make([]string, 0, len(disks))
	for _, d := range disks {
		sel, _ := d.StableSelector()
		parts = append(parts, fmt.Sprintf("%s (%s)", d.DevicePath, sel.String()))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// findDisk resolves a selector against the discovered disks; with no
// discovered disks, the selector is taken as given.
func findDisk(sel ichorv1alpha1.DiskSelector, disks []ichorv1alpha1.DiscoveredDisk) (*ichorv1alpha1.DiscoveredDisk, error) {
	if len(disks) == 0 {
		return nil, nil
	}
	for i := range disks {
		if sel.Matches(disks[i]) {
			return &disks[i], nil
		}
	}
	return nil, fmt.Errorf("no disk discovered on the machine matches %s; the disks are: %s", sel.String(), describeDisks(disks))
}

// parseDiskRole reads ROLE=SELECTOR[,volume=NAME][,maxSize=SIZE][,confirmWipe].
func parseDiskRole(s string) (ichorv1alpha1.DiskRole, error) {
	const syntax = "ROLE=SELECTOR[,volume=NAME][,maxSize=SIZE][,confirmWipe], for example userVolume=serial=S3Z9NB0K,volume=data"
	role, rest, ok := strings.Cut(s, "=")
	if !ok {
		return ichorv1alpha1.DiskRole{}, fmt.Errorf("--disk %q: write it as %s", s, syntax)
	}
	var dr ichorv1alpha1.DiskRole
	switch role {
	case ichorv1alpha1.DiskRoleEphemeral, ichorv1alpha1.DiskRoleUserVolume:
		dr.Role = role
	case ichorv1alpha1.DiskRoleSystem:
		return dr, fmt.Errorf("--disk %q: the system disk is set with --install-disk", s)
	default:
		return dr, fmt.Errorf("--disk %q: role %q is not offered at approval: use ephemeral or userVolume (storage and unused are not implemented yet)", s, role)
	}
	parts := strings.Split(rest, ",")
	sel, err := parseDiskSelector(parts[0])
	if err != nil {
		return dr, fmt.Errorf("--disk %q: %w", s, err)
	}
	dr.Disk = sel
	for _, opt := range parts[1:] {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "volume":
			dr.VolumeName = v
		case "maxSize":
			dr.MaxSize = v
		case "confirmWipe":
			dr.ConfirmWipe = true
		default:
			return dr, fmt.Errorf("--disk %q: unknown option %q; write it as %s", s, opt, syntax)
		}
	}
	if dr.Role == ichorv1alpha1.DiskRoleUserVolume && dr.VolumeName == "" {
		return dr, fmt.Errorf("--disk %q: a userVolume needs a name: add ,volume=NAME", s)
	}
	if dr.Role != ichorv1alpha1.DiskRoleUserVolume && dr.VolumeName != "" {
		return dr, fmt.Errorf("--disk %q: only a userVolume has a volume name", s)
	}
	return dr, nil
}

// parseLabels reads KEY=VALUE node labels.
func parseLabels(in []string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for _, l := range in {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("--label %q: write it as KEY=VALUE", l)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--label %q: the key is not a valid label key: %s", l, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("--label %q: the value is not a valid label value: %s", l, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

// parseNetwork builds spec.network from the approval flags.
func parseNetwork(nic string, dhcp bool, addresses []string, gateway string, nameservers []string, vlan int, links []ichorv1alpha1.DiscoveredLink) (ichorv1alpha1.MachineNetwork, error) {
	var n ichorv1alpha1.MachineNetwork
	if nic != "" {
		hw, err := net.ParseMAC(nic)
		if err != nil || len(hw) != 6 {
			return n, fmt.Errorf("--nic %q is not a MAC address such as 52:54:00:12:34:56", nic)
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
				return n, fmt.Errorf("--nic %s is not a permanent MAC discovery read on the machine; the links are: %s", n.MACAddress, strings.Join(macs, ", "))
			}
		}
	}
	if dhcp && len(addresses) > 0 {
		return n, fmt.Errorf("--dhcp and --address exclude each other: use DHCP or static addresses")
	}
	if dhcp {
		n.DHCP = new(true)
	}
	for _, a := range addresses {
		if _, _, err := net.ParseCIDR(a); err != nil {
			return n, fmt.Errorf("--address %q is not an address in CIDR form such as 192.168.10.5/24", a)
		}
		n.Addresses = append(n.Addresses, a)
	}
	if gateway != "" {
		if len(n.Addresses) == 0 {
			return n, fmt.Errorf("--gateway needs a static --address")
		}
		if net.ParseIP(gateway) == nil {
			return n, fmt.Errorf("--gateway %q is not an IP address", gateway)
		}
		n.Gateway = gateway
	}
	for _, ns := range nameservers {
		if net.ParseIP(ns) == nil {
			return n, fmt.Errorf("--nameserver %q is not an IP address", ns)
		}
		n.Nameservers = append(n.Nameservers, ns)
	}
	if vlan != 0 {
		if vlan < 1 || vlan > 4094 {
			return n, fmt.Errorf("--vlan %d is not a VLAN ID (1-4094)", vlan)
		}
		v := int32(vlan)
		n.VLAN = &v
	}
	return n, nil
}

func itoa(n int) string { return strconv.Itoa(n) }
