package reclaim

import (
	"fmt"
	"strings"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// ManagedCluster is what the Ichor check needs to know of one cluster Ichor manages.
type ManagedCluster struct {
	// Namespace and Name name its TalosCluster.
	Namespace, Name string
	// ClusterID is the bundle's cluster ID.
	ClusterID string
	// OSCACert is the bundle's Talos API (OS) CA certificate, PEM; never the key.
	OSCACert []byte
}

// Facts is what Decide knows beyond the inspection.
type Facts struct {
	// Managed are the clusters Ichor manages.
	Managed []ManagedCluster
	// Force overrides the quorum and last-control-plane refusals (`--force`,
	// spec.force; a second confirmation in the UI). It never overrides the
	// refusal of an Ichor machine.
	Force bool
}

// Fields the reclaim refusals name.
const (
	fieldAddress = "spec.address"
	fieldForce   = "spec.force"
	fieldConfirm = "spec.confirmUUID"
)

// Decide returns the refusals for resetting the inspected machine; none means
// the reset may go ahead once the UUID is confirmed.
//
//   - A machine that already carries an Ichor cluster's own Talos API CA or
//     cluster ID is an Ichor machine: it needs no reset, and no flag
//     overrides the refusal.
//   - A control plane whose removal from etcd would break its cluster's
//     quorum, or that is the last voting member, is refused by
//     guard.CheckEtcdMemberRemoval with no declared count (a foreign cluster
//     declares none to Ichor). Force overrides both, by design: the cluster is
//     not Ichor's, and the person has confirmed twice. A control plane whose
//     etcd could not be read is refused the same way.
func Decide(in *Inspection, facts Facts) []guard.Refusal {
	var out []guard.Refusal

	for _, mc := range facts.Managed {
		sameCA := in.OSCAFingerprint != "" && in.OSCAFingerprint == Fingerprint(mc.OSCACert)
		sameID := in.ClusterID != "" && in.ClusterID == mc.ClusterID

		if !sameCA && !sameID {
			continue
		}

		what := "Talos API CA"
		if !sameCA {
			what = "cluster ID"
		} else if sameID {
			what = "Talos API CA and cluster ID"
		}

		out = append(out, guard.Refusal{
			Field: fieldAddress,
			Rule: fmt.Sprintf("the machine %s already belongs to Ichor cluster %s/%s (same %s): a reclaim would wipe a machine of a managed cluster",
				machineName(in), mc.Namespace, mc.Name, what),
			WayOut: fmt.Sprintf("nothing to reclaim: it is a machine of cluster %s. If no TalosMachine of that cluster stands for it, register it "+
				"with `ichor adopt --cluster %s -n %s --add-machine ADDRESS`; to take it out of that cluster, remove its TalosMachine there "+
				"(`ichor node remove NAME -n %s`), which resets it", mc.Name, mc.Name, mc.Namespace, mc.Namespace),
		})
	}

	if !in.ControlPlane || facts.Force {
		return out
	}

	if in.EtcdError != "" {
		return append(out, guard.Refusal{
			Field:  fieldForce,
			Rule:   fmt.Sprintf("%s is a control plane and its etcd could not be read (%s), so Ichor cannot tell whether removing it breaks its cluster", machineName(in), in.EtcdError),
			WayOut: "bring the foreign cluster's etcd back, or set spec.force (`--force`) if that cluster is dead or meant to go (add spec.forceUngraceful when it cannot run its own shutdown)",
		})
	}

	if r := guard.CheckEtcdMemberRemoval(in.EtcdMembers, in.LocalMemberID, 0, false); r != nil {
		r.Field = fieldForce
		r.WayOut += "; or set spec.force (`--force`) to reset it anyway, which ends or breaks that cluster"
		out = append(out, *r)
	}

	return out
}

// CheckConfirmation checks the typed consent: the node's SMBIOS UUID,
// compared without regard to case and surrounding spaces.
func CheckConfirmation(in *Inspection, typedUUID string) *guard.Refusal {
	typed := strings.ToLower(strings.TrimSpace(typedUUID))

	switch {
	case in.UUID == "":
		return &guard.Refusal{
			Field:  fieldConfirm,
			Rule:   fmt.Sprintf("the machine %s reports no SMBIOS UUID, so there is nothing to type as consent", machineName(in)),
			WayOut: "reset it with the foreign cluster's own tooling (`talosctl reset --system-labels-to-wipe STATE --system-labels-to-wipe EPHEMERAL`) and add it by address",
		}
	case typed == "":
		return &guard.Refusal{
			Field:  fieldConfirm,
			Rule:   "the reset waits for the machine's UUID, typed as consent",
			WayOut: fmt.Sprintf("type %s into spec.confirmUUID (`ichor machine reclaim` asks for it)", in.UUID),
		}
	case typed != in.UUID:
		return &guard.Refusal{
			Field:  fieldConfirm,
			Rule:   fmt.Sprintf("the typed UUID %q is not the machine's UUID", typedUUID),
			WayOut: fmt.Sprintf("check that this is the machine you mean to wipe, then type %s", in.UUID),
		}
	}

	return nil
}

func machineName(in *Inspection) string {
	if in.Hostname != "" {
		return fmt.Sprintf("%q (UUID %s)", in.Hostname, in.UUID)
	}

	return "with UUID " + in.UUID
}

// Graceful reports whether the reset should run Talos's graceful sequence
// (cordon, drain, leave etcd). It does not when the person asked for an
// ungraceful reset (a dead foreign cluster), nor for the last voting etcd
// member, which a forced reclaim may reset: Talos's graceful reset leaves
// etcd by removing its own member (LeaveEtcd in
// t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go and
// Client.LeaveCluster in t:internal/pkg/etcd/etcd.go, release-1.14), and etcd
// does not remove the only started voting member, so the reset would fail.
func Graceful(in *Inspection, forceUngraceful bool) bool {
	if forceUngraceful {
		return false
	}

	if !in.ControlPlane {
		return true
	}

	voters := 0
	for _, m := range in.EtcdMembers {
		if !m.Learner {
			voters++
		}
	}

	return voters > 1
}
