package api

import (
	"google.golang.org/protobuf/types/known/timestamppb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func ts(t *metav1.Time) *timestamppb.Timestamp {
	if t == nil || t.IsZero() {
		return nil
	}
	return timestamppb.New(t.Time)
}

func conditions(in []metav1.Condition) []*ichorv1.Condition {
	if len(in) == 0 {
		return nil
	}
	out := make([]*ichorv1.Condition, 0, len(in))
	for i := range in {
		c := &in[i]
		out = append(out, &ichorv1.Condition{
			Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message,
			LastTransitionTime: ts(&c.LastTransitionTime),
		})
	}
	return out
}

// machineToProto converts a TalosMachine; it reads m and never keeps it.
func machineToProto(m *ichorv1alpha1.TalosMachine) *ichorv1.Machine {
	out := &ichorv1.Machine{
		Name:            m.Name,
		Namespace:       m.Namespace,
		ClusterName:     m.Spec.ClusterName,
		Uid:             string(m.UID),
		ResourceVersion: m.ResourceVersion,
		Identity: &ichorv1.MachineIdentity{
			Uuid: m.Spec.Identity.UUID, Serial: m.Spec.Identity.Serial,
			MacAddresses: append([]string(nil), m.Spec.Identity.MACAddresses...),
		},
		Address: m.Spec.Address,
		Approval: &ichorv1.MachineApproval{
			State: m.Spec.Approval.State, DecidedBy: m.Spec.Approval.DecidedBy, DecidedAt: ts(m.Spec.Approval.DecidedAt),
		},
		Role:                   m.Spec.Role,
		Hostname:               m.Spec.Hostname,
		Stage:                  m.Status.Stage,
		Installed:              m.Status.Installed,
		NodeName:               m.Status.NodeName,
		TalosVersion:           m.Status.TalosVersion,
		Conditions:             conditions(m.Status.Conditions),
		Deleting:               m.DeletionTimestamp != nil,
		MaintenanceFingerprint: m.Status.MaintenanceFingerprint,
		DriftPaths:             append([]string(nil), m.Status.DriftPaths...),
		RebootRequiredPaths:    append([]string(nil), m.Status.RebootRequiredPaths...),
		CreatedAt:              ts(&m.CreationTimestamp),
	}
	if len(m.Spec.Labels) > 0 {
		out.Labels = make(map[string]string, len(m.Spec.Labels))
		for k, v := range m.Spec.Labels {
			out.Labels[k] = v
		}
	}
	hw := m.Status.Hardware
	if hw.Manufacturer != "" || hw.ProductName != "" || len(hw.Disks) > 0 || len(hw.Links) > 0 {
		h := &ichorv1.MachineHardware{Manufacturer: hw.Manufacturer, ProductName: hw.ProductName}
		for _, d := range hw.Disks {
			h.Disks = append(h.Disks, &ichorv1.DiscoveredDisk{
				DevicePath: d.DevicePath, Wwid: d.WWID, Serial: d.Serial, ById: d.ByID, BusPath: d.BusPath,
				SizeBytes: d.SizeBytes, HasPartitions: d.HasPartitions,
			})
		}
		for _, l := range hw.Links {
			h.Links = append(h.Links, &ichorv1.DiscoveredLink{Name: l.Name, PermanentMac: l.PermanentMAC, Addresses: append([]string(nil), l.Addresses...)})
		}
		out.Hardware = h
	}
	for _, d := range m.Spec.Disks {
		out.Disks = append(out.Disks, &ichorv1.DiskRole{Disk: diskSelectorToProto(&d.Disk), Role: d.Role, VolumeName: d.VolumeName,
			MaxSize: d.MaxSize, ConfirmWipe: d.ConfirmWipe})
	}
	if n := m.Spec.Network; n.MACAddress != "" || n.DHCP != nil || len(n.Addresses) > 0 || n.VLAN != nil || len(n.Nameservers) > 0 {
		out.Network = &ichorv1.MachineNetwork{MacAddress: n.MACAddress, Dhcp: n.DHCP != nil && *n.DHCP,
			Addresses: append([]string(nil), n.Addresses...), Gateway: n.Gateway, Nameservers: append([]string(nil), n.Nameservers...)}
		if n.VLAN != nil {
			out.Network.Vlan = *n.VLAN
		}
	}
	out.InstallDisk = diskSelectorToProto(m.Spec.Install.Disk)
	if r := m.Status.Removal; r != nil {
		out.Removal = &ichorv1.MachineRemoval{Phase: r.Phase, StartedAt: ts(r.StartedAt), Message: r.Message}
	}
	return out
}

func diskSelectorFromProto(s *ichorv1.DiskSelector) *ichorv1alpha1.DiskSelector {
	if s == nil {
		return nil
	}
	out := &ichorv1alpha1.DiskSelector{WWID: s.GetWwid(), Serial: s.GetSerial(), ByID: s.GetById(), BusPath: s.GetBusPath(), DevicePath: s.GetDevicePath()}
	if *out == (ichorv1alpha1.DiskSelector{}) {
		return nil
	}
	return out
}

func diskSelectorToProto(s *ichorv1alpha1.DiskSelector) *ichorv1.DiskSelector {
	if s == nil || *s == (ichorv1alpha1.DiskSelector{}) {
		return nil
	}
	return &ichorv1.DiskSelector{Wwid: s.WWID, Serial: s.Serial, ById: s.ByID, BusPath: s.BusPath, DevicePath: s.DevicePath}
}
