package guard

import (
	"fmt"
	"strings"
)

// EtcdMember is one etcd member as the guard sees it.
type EtcdMember struct {
	// ID is the etcd member ID.
	ID uint64
	// Name is the member's name (the node's hostname on Talos).
	Name string
	// Learner is true for a learner, which does not vote.
	Learner bool
	// Healthy is true when the member answers and follows a leader.
	Healthy bool
}

// QuorumSize is the number of voting members that must agree: n/2+1.
func QuorumSize(voters int) int {
	return voters/2 + 1
}

// fieldEtcdMember is the field the etcd refusals name: the role that makes the
// machine an etcd member.
const fieldEtcdMember = "spec.role"

// wayOutReplace is how a person keeps quorum while replacing a control plane.
const wayOutReplace = "add a replacement control plane first and remove this one once it has joined " +
	"(3→4→3, never 3→2: four members tolerate one failure, two tolerate none)"

// CheckEtcdMemberRemoval decides whether the member with id target may be
// removed from members.
//
// declaredCount is TalosCluster.spec.controlPlane.count (0 = no declared floor,
// as for the reclaim of a foreign cluster). Learners do not vote: removing one
// never breaks quorum and is never "the last"; an unknown target is a no-op
// (Talos reports an already-removed member as not found, which counts as
// success), so both return nil.
//
// The refusals, in order:
//   - the last voting member: the cluster's data goes with it;
//   - fewer voters than declaredCount after the removal;
//   - a quorum break: the removal is a configuration change that the current
//     voters' healthy majority must commit, and afterwards the remaining
//     voters' healthy members must still be a majority of the remaining voters.
//
// force overrides the first two (the person has said they mean to shrink or
// end the cluster: `ichor machine reclaim --force`, a cluster teardown) but
// never the quorum refusal: a change no majority can commit hangs etcd, and a
// remaining cluster without a healthy majority is down, whatever the intent.
// A caller that must override a quorum break too (the reclaim of a foreign
// cluster, where `force` overrides it by design) does not ask this check.
//
// Talos's own member removal does none of this: it needs only a leader now
// (EtcdRemoveMemberByID in
// t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// release-1.14: clientv3.WithRequireLeader, then RemoveMemberByMemberID).
func CheckEtcdMemberRemoval(members []EtcdMember, target uint64, declaredCount int32, force bool) *Refusal {
	var (
		self            *EtcdMember
		voters, healthy int
	)

	for i := range members {
		m := &members[i]
		if m.ID == target {
			self = m
		}

		if m.Learner {
			continue
		}

		voters++

		if m.Healthy {
			healthy++
		}
	}

	if self == nil || self.Learner {
		return nil
	}

	name := memberName(self)
	remaining := voters - 1
	remainingHealthy := healthy
	if self.Healthy {
		remainingHealthy--
	}

	if !force && remaining == 0 {
		return &Refusal{
			Field: fieldEtcdMember,
			Rule: fmt.Sprintf("%s is the last voting etcd member; removing it destroys etcd and the cluster's state "+
				"(Kubernetes objects, Talos's cluster membership)", name),
			WayOut: "add another control plane first and remove this one once it has joined; to end the cluster on purpose, force the removal",
		}
	}

	if !force && declaredCount > 0 && remaining < int(declaredCount) {
		return &Refusal{
			Field: fieldEtcdMember,
			Rule: fmt.Sprintf("removing %s would leave %d voting etcd members, fewer than the %d control planes the cluster declares",
				name, remaining, declaredCount),
			WayOut: wayOutReplace + ", or lower spec.controlPlane.count on the TalosCluster (1, 3 or 5)",
		}
	}

	if healthy < QuorumSize(voters) {
		return &Refusal{
			Field: fieldEtcdMember,
			Rule: fmt.Sprintf("etcd has %d healthy of %d voting members and needs %d to commit the removal of %s: "+
				"the change would hang and the cluster is already without quorum", healthy, voters, QuorumSize(voters), name),
			WayOut: "bring the unhealthy members back first (power them on, check their network), or recover the cluster from an etcd snapshot " +
				"(`talosctl bootstrap --recover-from` with the os:admin talosconfig that `ichor secrets export` writes)",
		}
	}

	if remaining > 0 && remainingHealthy < QuorumSize(remaining) {
		return &Refusal{
			Field: fieldEtcdMember,
			Rule: fmt.Sprintf("removing %s would leave %d healthy of %d voting etcd members, fewer than the %d a quorum needs: the cluster would stop",
				name, remainingHealthy, remaining, QuorumSize(remaining)),
			WayOut: "bring the unhealthy members back first, or " + wayOutReplace,
		}
	}

	return nil
}

// ControlPlaneEtcd is one control plane as an operation sees it just before
// it takes one down: whether its etcd member answers now.
type ControlPlaneEtcd struct {
	// Name is the TalosMachine's name.
	Name string
	// Healthy is true when its etcd member answers a status call.
	Healthy bool
}

// CheckControlPlaneDown decides, at run time, whether the control plane named
// target may be taken down for a while: rebooted for a configuration that
// needs it or by a node reboot, upgraded by Talos (which reboots it), or shut
// down or reset by a node operation (CheckNodeAction counted the control
// planes at admission; this sees them). cps are the cluster's configured
// control planes as seen now, target among them; every one counts as an etcd
// voter (a learner counting too only makes the check stricter). what is what
// is done to target, for the message ("rebooting cp-1").
//
// Its member stays in etcd while it is down, so the others must still make a
// quorum of all the members:
//   - it is refused when any control plane's etcd does not answer, target's
//     own included: Talos's upgrade asks the same of every member before it
//     starts, and a member that is already silent leaves less slack than the
//     count shows;
//   - it is refused when the others, all answering, are still too few for a
//     quorum: with two control planes (a step between one and three), the one
//     left is not a majority of two, and etcd stops until the other is back.
//     Talos's upgrade refuses exactly two members for the same reason.
//
// A single control plane is let go: the cluster is down until it is back,
// which is what rebooting or upgrading the only one means (its shutdown and
// reset are refused at admission, CheckNodeAction, and the only node of a
// cluster needs the downtime consent, CheckOperationDowntime and
// CheckClusterDowntime). A target that is not among cps takes no member down.
func CheckControlPlaneDown(cps []ControlPlaneEtcd, target, what string) *Refusal {
	var (
		bad []string
		in  bool
	)

	for _, cp := range cps {
		if cp.Name == target {
			in = true
		}

		if !cp.Healthy {
			bad = append(bad, cp.Name)
		}
	}

	if len(bad) > 0 {
		return &Refusal{
			Field: fieldEtcdMember,
			Rule: fmt.Sprintf("etcd is not healthy on every control plane, so %s could lose quorum: no answer from the etcd member of %s",
				what, strings.Join(bad, ", ")),
			WayOut: "bring those control planes' etcd back first (power them on, check their network)",
		}
	}

	if n := len(cps); in && n > 1 && n-1 < QuorumSize(n) {
		return &Refusal{
			Field: fieldEtcdMember,
			Rule: fmt.Sprintf("%s would leave %d of %d etcd members, fewer than the %d a quorum needs: the cluster would stop until it is back",
				what, n-1, n, QuorumSize(n)),
			WayOut: "finish the change of control planes first (two is a step between one and three: approve the third, or remove one)",
		}
	}

	return nil
}

func memberName(m *EtcdMember) string {
	if m.Name != "" {
		return fmt.Sprintf("etcd member %q (%x)", m.Name, m.ID)
	}

	return fmt.Sprintf("etcd member %x", m.ID)
}
