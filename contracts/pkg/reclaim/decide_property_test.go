package reclaim

import (
	"fmt"
	"testing"

	"go.etcd.io/raft/v3/quorum"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// TestDecideQuorumProperty is the reclaim's part of the quorum property
// (issue 30, item 7; the other operations are in guard's
// TestQuorumPropertyAllOperations): resetting a foreign control plane takes
// its member out of etcd (Talos's graceful reset leaves etcd), so for 1 to 7
// voters, with and without a learner, every subset of healthy members and
// every local member, Decide refuses exactly what raft's rule refuses, written
// here with etcd's quorum arithmetic: the current voters that answer must
// commit the removal, and the others that answer must win a vote of the
// others; never the last voter; a learner does not vote. There is no declared
// count (a foreign cluster declares none to Ichor), and force overrides all
// of it, by design.
func TestDecideQuorumProperty(t *testing.T) {
	cases, refused := 0, 0

	for voters := 1; voters <= 7; voters++ {
		for learners := 0; learners <= 1; learners++ {
			n := voters + learners
			for mask := 0; mask < 1<<n; mask++ {
				members := make([]guard.EtcdMember, n)
				before, after := quorum.MajorityConfig{}, quorum.MajorityConfig{}
				votes := map[uint64]bool{}

				for i := range members {
					id := uint64(0x200 + i)
					members[i] = guard.EtcdMember{ID: id, Name: fmt.Sprintf("cp-%d", i+1), Learner: i >= voters, Healthy: mask&(1<<i) != 0}

					if members[i].Healthy {
						votes[id] = true
					}
				}

				for local := range n {
					clear(before)
					clear(after)

					for _, m := range members {
						if m.Learner {
							continue
						}

						before[m.ID] = struct{}{}
						if m.ID != members[local].ID {
							after[m.ID] = struct{}{}
						}
					}

					allowed := members[local].Learner ||
						(len(after) > 0 && before.VoteResult(votes) == quorum.VoteWon && after.VoteResult(votes) == quorum.VoteWon)

					for _, force := range []bool{false, true} {
						cases++

						in := &Inspection{UUID: "u", ControlPlane: true, EtcdMembers: members, LocalMemberID: members[local].ID}
						got := Decide(in, Facts{Force: force})

						if want := force || allowed; want != (len(got) == 0) {
							t.Fatalf("members %+v, local %d, force %v: raft says allowed=%v, Decide says %v", members, local, force, want, got)
						}

						if len(got) > 0 {
							refused++
						}
					}
				}
			}
		}
	}

	if refused == 0 || refused == cases {
		t.Fatalf("%d of %d cases refused: the comparison is vacuous", refused, cases)
	}

	t.Logf("%d cases, %d refused", cases, refused)
}
