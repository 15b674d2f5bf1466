package guard

import (
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// MachineFacts is what a machine check needs to know beyond the object itself.
type MachineFacts struct {
	// Cluster is the machine's TalosCluster; nil when it does not exist.
	Cluster *ichorv1alpha1.TalosCluster
	// OtherApprovedControlPlanes is the number of approved control planes of the
	// cluster, this machine excluded.
	OtherApprovedControlPlanes int
	// OtherApprovedWorkers is the number of approved workers of the cluster, this machine excluded.
	OtherApprovedWorkers int
}

// IsApprovedControlPlane reports whether m is an approved control plane.
func IsApprovedControlPlane(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.Spec.Role == ichorv1alpha1.RoleControlPlane
}

// IsApprovedWorker reports whether m is an approved worker.
func IsApprovedWorker(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.Spec.Role == ichorv1alpha1.RoleWorker
}

// CheckControlPlaneApproval refuses an approval that would leave more approved
// control planes than the cluster's count plus one (the one being replaced).
func CheckControlPlaneApproval(count int32, otherApproved int) *Refusal {
	limit := int(count) + 1
	if otherApproved+1 <= limit {
		return nil
	}
	return &Refusal{
		Field: "spec.approval.state",
		Rule: fmt.Sprintf("approving this control plane would make %d approved control planes; the cluster declares %d "+
			"(at most %d while one is being replaced)", otherApproved+1, count, limit),
		WayOut: "approve it as a worker, remove a control plane first, or raise spec.controlPlane.count on the TalosCluster (1, 3 or 5)",
	}
}

// ValidateMachine checks a TalosMachine being created (old nil) or updated.
func ValidateMachine(old, m *ichorv1alpha1.TalosMachine, facts MachineFacts) []Refusal {
	var out []Refusal
	becomesApproved := m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved &&
		(old == nil || old.Spec.Approval.State != ichorv1alpha1.ApprovalApproved || old.Spec.Role != m.Spec.Role)
	if becomesApproved {
		if facts.Cluster == nil {
			out = append(out, Refusal{
				Field:  "spec.clusterName",
				Rule:   fmt.Sprintf("TalosCluster %q does not exist in namespace %q, so the machine cannot be approved", m.Spec.ClusterName, m.Namespace),
				WayOut: "create the TalosCluster first, or correct spec.clusterName",
			})
		} else if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			if r := CheckControlPlaneApproval(facts.Cluster.Spec.ControlPlane.Count, facts.OtherApprovedControlPlanes); r != nil {
				out = append(out, *r)
			}
		}
	}
	if old != nil && old.Status.Installed {
		out = append(out, checkInstalledDisks(old, m)...)
	}
	out = append(out, CheckSystemDiskLayout(m)...)
	if r := CheckAddressFixed(old, m); r != nil {
		out = append(out, *r)
	}
	return out
}

// AddressFixed reports whether a machine's spec.address may no longer change:
// once it is approved (or installed), the controller sends its configuration,
// with the cluster's CA keys, and later a reset, to that address. The CRD's
// CEL rule on TalosMachine says the same; this is the early answer for the
// CLI and ichor-ui.
func AddressFixed(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved || m.Status.Installed
}

// CheckAddressFixed refuses a change of spec.address once the machine was approved.
func CheckAddressFixed(old, m *ichorv1alpha1.TalosMachine) *Refusal {
	if old == nil || !AddressFixed(old) || old.Spec.Address == m.Spec.Address {
		return nil
	}
	return &Refusal{
		Field: "spec.address",
		Rule: fmt.Sprintf("the address of an approved machine is fixed (%q to %q): the controller sends its configuration, "+
			"with the cluster's keys, and its reset to that address", old.Spec.Address, m.Spec.Address),
		WayOut: fmt.Sprintf("to move the machine, remove it (`ichor node remove %s`) and approve it again at the new address (`ichor machine approve`)", m.Name),
	}
}

// CheckDeletingUnchanged refuses a change of the spec of a machine being
// deleted: the removal sequence acts on the spec it started with (the
// address it resets, the role that leaves etcd). The one change allowed is
// setting spec.forceRemove, the way out of a removal that waits on a node
// that cannot drain or reset.
func CheckDeletingUnchanged(old, m *ichorv1alpha1.TalosMachine) *Refusal {
	if old.DeletionTimestamp == nil {
		return nil
	}
	probe := old.Spec.DeepCopy()
	if m.Spec.ForceRemove {
		probe.ForceRemove = true
	}
	if reflect.DeepEqual(*probe, m.Spec) {
		return nil
	}
	return &Refusal{
		Field:  fieldSpec,
		Rule:   fmt.Sprintf("machine %s is being removed: its spec is fixed until the removal ends, except spec.forceRemove", m.Name),
		WayOut: "wait until the removal finishes and approve the machine again when it reappears; set spec.forceRemove: true to skip drain and reset for dead hardware",
	}
}

// CheckSystemDiskLayout refuses a shared system disk layout that cannot
// work: an EPHEMERAL cap under Talos's 2 GiB minimum or one that is space to
// leave free (render.SharedEphemeralMaxSize), or an ephemeral disk role,
// which moves EPHEMERAL off the system disk the layout shares.
func CheckSystemDiskLayout(m *ichorv1alpha1.TalosMachine) []Refusal {
	if !render.SharedLayout(m) {
		return nil
	}
	var out []Refusal
	if _, path, err := render.SharedEphemeralMaxSize(m); err != nil {
		out = append(out, Refusal{
			Field:  path,
			Rule:   err.Error(),
			WayOut: "give the spec.disks entry with the role system a maxSize of at least 2GiB or a percentage such as 50%, or leave it out for 50%",
		})
	}
	for i, d := range m.Spec.Disks {
		if d.Role == ichorv1alpha1.DiskRoleEphemeral {
			out = append(out, Refusal{
				Field:  fmt.Sprintf("spec.disks[%d].role", i),
				Rule:   "systemDiskLayout shared keeps EPHEMERAL on the system disk, capped; an ephemeral disk moves it to its own disk",
				WayOut: "drop the ephemeral role (the shared layout is for a single disk), or set spec.install.systemDiskLayout to dedicated",
			})
		}
	}
	return out
}

// MachineWarnings are what admission lets through but a person should know:
// the shared system disk layout on a control plane, where etcd shares the
// disk's I/O with the storage system (architecture, "Disks").
func MachineWarnings(old, m *ichorv1alpha1.TalosMachine) []string {
	if !render.SharedLayout(m) || m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return nil
	}
	if old != nil && render.SharedLayout(old) && old.Spec.Role == m.Spec.Role {
		return nil
	}
	return []string{fmt.Sprintf("machine %s: systemDiskLayout shared on a control plane puts etcd on the disk the storage system uses: "+
		"etcd is sensitive to I/O latency, so a busy volume can cost the cluster its quorum; a dedicated system disk is recommended", m.Name)}
}

// ReinstallDiskRoles are the disk roles whose change needs a reset and reinstall.
var ReinstallDiskRoles = []string{ichorv1alpha1.DiskRoleSystem, ichorv1alpha1.DiskRoleEphemeral}

func checkInstalledDisks(old, m *ichorv1alpha1.TalosMachine) []Refusal {
	var out []Refusal
	if !reflect.DeepEqual(old.Spec.Install, m.Spec.Install) {
		out = append(out, Refusal{
			Field:  "spec.install",
			Rule:   "the install disk is fixed once the machine is installed: Talos ignores volume changes after provisioning",
			WayOut: "remove the machine (annotation " + ichorv1alpha1.AllowDeleteAnnotation + `: "true", then delete), and approve it again with the new disk`,
		})
	}
	if !reflect.DeepEqual(reinstallRoles(old.Spec.Disks), reinstallRoles(m.Spec.Disks)) {
		out = append(out, Refusal{
			Field:  "spec.disks",
			Rule:   "disks with the role system or ephemeral are fixed once the machine is installed: changing them is a reset and reinstall",
			WayOut: "remove the machine and approve it again with the new roles; adding a storage or userVolume role to an unused disk needs no reinstall",
		})
	}
	return out
}

// reinstallRoles returns the disk entries whose role needs a reinstall, keyed by role and disk.
func reinstallRoles(disks []ichorv1alpha1.DiskRole) []ichorv1alpha1.DiskRole {
	var out []ichorv1alpha1.DiskRole
	for _, d := range disks {
		if d.Role == ichorv1alpha1.DiskRoleSystem || d.Role == ichorv1alpha1.DiskRoleEphemeral {
			out = append(out, d)
		}
	}
	return out
}

// MachineRequirements returns the permissions a create (old nil) or update of
// a TalosMachine needs beyond `create`/`update` on talosmachines.
func MachineRequirements(old, m *ichorv1alpha1.TalosMachine) []Requirement {
	var out []Requirement
	decided := old == nil && m.Spec.Approval.State != ichorv1alpha1.ApprovalPending
	if decided || (old != nil && !reflect.DeepEqual(old.Spec.Approval, m.Spec.Approval)) {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbApprove, Resource: ResourceTalosMachines, Subresource: SubresourceApproval, Namespace: m.Namespace, Name: m.Name},
			Field:      "spec.approval",
			Action:     "approving or rejecting a machine",
		})
	}
	if r := TrustRequirement(old, m); r != nil {
		out = append(out, *r)
	}
	return out
}

// TrustRequirement returns the requirement of setting or changing the
// trust-maintenance-fingerprint annotation: it tells the controller which
// node to send the first configuration, with the CA keys, to, so it needs
// `update` on `talosmachines/trust` (ichor-admin). Removing it needs nothing:
// the controller then pins the fingerprint it recorded itself.
func TrustRequirement(old, m *ichorv1alpha1.TalosMachine) *Requirement {
	v := m.Annotations[ichorv1alpha1.TrustMaintenanceFingerprintAnnotation]
	if v == "" || (old != nil && old.Annotations[ichorv1alpha1.TrustMaintenanceFingerprintAnnotation] == v) {
		return nil
	}
	return &Requirement{
		Permission: TrustPermission(m.Namespace, m.Name),
		Field:      "metadata.annotations[" + ichorv1alpha1.TrustMaintenanceFingerprintAnnotation + "]",
		Action:     "accepting a changed maintenance certificate (the node the first configuration, with the cluster's keys, is sent to)",
	}
}

// TrustPermission is `update` on `talosmachines/trust` for one machine.
func TrustPermission(namespace, name string) Permission {
	return Permission{Verb: VerbUpdate, Resource: ResourceTalosMachines, Subresource: SubresourceTrust, Namespace: namespace, Name: name}
}

// CheckApprovalRecord makes the approval record who decided: when a create or
// an update decides a machine (approved or rejected), spec.approval.decidedBy
// must be the requesting user and decidedAt must be set.
func CheckApprovalRecord(old, m *ichorv1alpha1.TalosMachine, username string) *Refusal {
	a := m.Spec.Approval
	if a.State == ichorv1alpha1.ApprovalPending {
		return nil
	}
	if old != nil && reflect.DeepEqual(old.Spec.Approval, a) {
		return nil
	}
	if a.DecidedBy == username && a.DecidedAt != nil {
		return nil
	}
	return &Refusal{
		Field: "spec.approval.decidedBy",
		Rule: fmt.Sprintf("an approval records who decided and when: decidedBy is %q and decidedAt is %s, but the request comes from %q",
			a.DecidedBy, timeOrUnset(a.DecidedAt), username),
		WayOut: fmt.Sprintf("set spec.approval.decidedBy: %q and spec.approval.decidedAt to now (`ichor machine approve` and the UI do)", username),
	}
}

func timeOrUnset(t *metav1.Time) string {
	if t == nil {
		return "unset"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// ValidateMachineDelete checks the deletion of a TalosMachine: the allow-delete
// annotation, never the last control plane (the annotation does not change
// that), never below the declared count, and the last-worker guard.
func ValidateMachineDelete(m *ichorv1alpha1.TalosMachine, facts MachineFacts) []Refusal {
	var out []Refusal
	if r := checkAllowDelete("TalosMachine", m.Annotations); r != nil {
		out = append(out, *r)
	}
	cluster := facts.Cluster
	teardown := cluster == nil || cluster.DeletionTimestamp != nil
	switch {
	case teardown:
		// The whole cluster goes; its machines go with it.
	case IsApprovedControlPlane(m) && facts.OtherApprovedControlPlanes == 0:
		out = append(out, Refusal{
			Field:  fieldRole,
			Rule:   fmt.Sprintf("%s is the last control plane of cluster %q; removing it destroys etcd and the cluster, and the allow-delete annotation does not change that", m.Name, cluster.Name),
			WayOut: "to tear the whole cluster down, delete the TalosCluster (with its allow-delete annotation); to replace this machine, approve a new control plane first",
		})
	case IsApprovedControlPlane(m) && facts.OtherApprovedControlPlanes < int(cluster.Spec.ControlPlane.Count):
		out = append(out, Refusal{
			Field: fieldRole,
			Rule: fmt.Sprintf("removing %s would leave %d control planes, fewer than the %d cluster %q declares (etcd quorum)",
				m.Name, facts.OtherApprovedControlPlanes, cluster.Spec.ControlPlane.Count, cluster.Name),
			WayOut: "approve a replacement first (add, then remove), or lower spec.controlPlane.count on the TalosCluster",
		})
	case IsApprovedWorker(m) && facts.OtherApprovedWorkers == 0 && !boolValue(cluster.Spec.ControlPlane.Schedulable):
		out = append(out, Refusal{
			Field:       fieldRole,
			Rule:        fmt.Sprintf("%s is the last worker and the control planes of cluster %q are unschedulable: nothing could run workloads", m.Name, cluster.Name),
			WayOut:      "set spec.controlPlane.schedulable: true on the TalosCluster first, or hold the `override` verb on the cluster",
			Overridable: true,
		})
	}
	return out
}
