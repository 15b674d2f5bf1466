package commands

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/approval"
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

// diskFields name the approve command's disk flags in the shared messages.
var diskFields = approval.Fields{
	InstallDisk:     "pass --install-disk " + selectorSyntax,
	ConfirmWipe:     "--confirm-wipe",
	DiskRole:        func(dr ichorv1alpha1.DiskRole) string { return "--disk " + dr.Role + "=" + dr.Disk.String() },
	RoleConfirmWipe: "add ,confirmWipe",
}

// parseDiskRole reads ROLE=SELECTOR[,volume=NAME][,maxSize=SIZE][,confirmWipe].
func parseDiskRole(s string) (ichorv1alpha1.DiskRole, error) {
	const syntax = "ROLE=SELECTOR[,volume=NAME][,maxSize=SIZE][,confirmWipe] with ROLE ephemeral, storage, userVolume or unused, for example userVolume=serial=S3Z9NB0K,volume=data"
	role, rest, ok := strings.Cut(s, "=")
	if !ok {
		return ichorv1alpha1.DiskRole{}, fmt.Errorf("--disk %q: write it as %s", s, syntax)
	}
	dr := ichorv1alpha1.DiskRole{Role: role}
	if role == ichorv1alpha1.DiskRoleSystem || !slices.Contains(approval.ApprovalRoles, role) {
		return dr, approval.CheckRole(dr, fmt.Sprintf("--disk %q", s), "add ,volume=NAME", "set it with --install-disk")
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
	if err := approval.CheckRole(dr, fmt.Sprintf("--disk %q", s), "add ,volume=NAME", "set it with --install-disk"); err != nil {
		return dr, err
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
	return approval.Network(approval.NetworkInput{NIC: nic, DHCP: dhcp, Addresses: addresses, Gateway: gateway, Nameservers: nameservers, VLAN: vlan}, links,
		approval.NetworkFields{NIC: "--nic", DHCP: "--dhcp", Address: "--address", Gateway: "--gateway", Nameserver: "--nameserver", VLAN: "--vlan"})
}

func itoa(n int) string { return strconv.Itoa(n) }
