package guard

import (
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/quorum"
)

// etcdAllows is the removal decision written with etcd's own quorum
// arithmetic (go.etcd.io/raft/v3/quorum): a healthy member votes yes, an
// unhealthy one never answers. The removal is allowed when the current voters
// can commit it and the remaining voters still win a vote, and the declared
// floor and "never the last voter" hold unless forced.
func etcdAllows(members []EtcdMember, target uint64, declared int32, force bool) bool {
	var self *EtcdMember

	before, after := quorum.MajorityConfig{}, quorum.MajorityConfig{}
	votes := map[uint64]bool{}

	for i := range members {
		m := members[i]
		if m.ID == target {
			self = &members[i]
		}

		if m.Learner {
			continue
		}

		before[m.ID] = struct{}{}
		if m.ID != target {
			after[m.ID] = struct{}{}
		}

		if m.Healthy {
			votes[m.ID] = true
		}
	}

	if self == nil || self.Learner {
		return true
	}

	if !force && (len(after) == 0 || len(after) < int(declared)) {
		return false
	}

	// An empty configuration wins every vote in raft; the last-voter rule
	// above is what stands between it and a removal.
	return before.VoteResult(votes) == quorum.VoteWon && after.VoteResult(votes) == quorum.VoteWon
}

// TestEtcdMemberRemovalMatchesRaft compares CheckEtcdMemberRemoval with raft's
// quorum arithmetic for 1 to 7 voters (with and without a learner), every
// subset of healthy members, every target (and an unknown one), declared counts
// from 0 to n+1 and both values of force.
func TestEtcdMemberRemovalMatchesRaft(t *testing.T) {
	cases, refused := 0, 0

	for voters := 1; voters <= 7; voters++ {
		for learners := 0; learners <= 1; learners++ {
			n := voters + learners
			for healthMask := 0; healthMask < 1<<n; healthMask++ {
				members := make([]EtcdMember, n)
				for i := range members {
					members[i] = EtcdMember{
						ID:      uint64(0x1000 + i),
						Name:    fmt.Sprintf("cp-%d", i),
						Learner: i >= voters,
						Healthy: healthMask&(1<<i) != 0,
					}
				}

				targets := []uint64{0xdead}
				for _, m := range members {
					targets = append(targets, m.ID)
				}

				for _, target := range targets {
					for declared := int32(0); declared <= int32(voters+1); declared++ {
						for _, force := range []bool{false, true} {
							cases++

							want := etcdAllows(members, target, declared, force)
							got := CheckEtcdMemberRemoval(members, target, declared, force)

							if want != (got == nil) {
								t.Fatalf("members %+v, target %x, declared %d, force %v: raft says allowed=%v, guard says %v",
									members, target, declared, force, want, got)
							}

							if got != nil {
								refused++

								if got.Field == "" || got.Rule == "" || got.WayOut == "" {
									t.Fatalf("refusal lacks a field, rule or way out: %+v", got)
								}
							}
						}
					}
				}
			}
		}
	}

	// Both answers occur, so the comparison is not vacuous.
	if refused == 0 || refused == cases {
		t.Fatalf("%d of %d cases refused: the comparison is vacuous", refused, cases)
	}

	t.Logf("%d cases, %d refused", cases, refused)
}

func voters(healthy ...bool) []EtcdMember {
	out := make([]EtcdMember, len(healthy))
	for i, h := range healthy {
		out[i] = EtcdMember{ID: uint64(i + 1), Name: fmt.Sprintf("cp-%d", i+1), Healthy: h}
	}

	return out
}

// TestEtcdMemberRemovalRules names each rule and its message, so that removing
// one rule fails here as well as in the property test.
func TestEtcdMemberRemovalRules(t *testing.T) {
	learner := append(voters(true, true, true), EtcdMember{ID: 9, Name: "new", Learner: true, Healthy: false})

	for _, tc := range []struct {
		name     string
		members  []EtcdMember
		target   uint64
		declared int32
		force    bool
		want     []string // words of the refusal; nil = allowed
	}{
		{name: "last member", members: voters(true), target: 1, want: []string{"last voting etcd member", "add another control plane first"}},
		{name: "last member forced", members: voters(true), target: 1, force: true},
		{name: "last unhealthy member forced", members: voters(false), target: 1, force: true, want: []string{"0 healthy of 1"}},
		{name: "last voter beside a learner", members: []EtcdMember{{ID: 1, Healthy: true}, {ID: 2, Learner: true, Healthy: true}}, target: 1, want: []string{"last voting"}},
		{name: "3 to 2 below declared 3", members: voters(true, true, true), target: 1, declared: 3, want: []string{"leave 2 voting etcd members, fewer than the 3", "3→4→3"}},
		{name: "3 to 2 below declared 3 forced", members: voters(true, true, true), target: 1, declared: 3, force: true},
		{name: "4 to 3 with declared 3", members: voters(true, true, true, true), target: 4, declared: 3},
		{name: "3 healthy to 2", members: voters(true, true, true), target: 3},
		{name: "healthy member of 3 with one down", members: voters(true, true, false), target: 1, want: []string{"1 healthy of 2", "fewer than the 2 a quorum needs"}},
		{name: "down member of 3 with one down", members: voters(true, true, false), target: 3},
		{name: "no quorum now", members: voters(true, false, false), target: 2, force: true, want: []string{"1 healthy of 3", "needs 2 to commit", "talosctl bootstrap --recover-from"}},
		{name: "2 members, one down", members: voters(true, false), target: 2, want: []string{"needs 2 to commit"}},
		{name: "5 with two down, remove a healthy one", members: voters(true, true, true, false, false), target: 1, want: []string{"2 healthy of 4"}},
		{name: "5 with two down, remove a down one", members: voters(true, true, true, false, false), target: 5},
		{name: "learner", members: learner, target: 9, declared: 3},
		{name: "unknown member", members: voters(true), target: 42},
		{name: "no members", target: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckEtcdMemberRemoval(tc.members, tc.target, tc.declared, tc.force)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("want allowed, got %v", got)
				}

				return
			}

			if got == nil {
				t.Fatalf("want a refusal saying %q, got allowed", tc.want)
			}

			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("refusal %q does not say %q", got.Error(), w)
				}
			}
		})
	}
}

func TestQuorumSize(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := QuorumSize(n); got != want {
			t.Errorf("QuorumSize(%d) = %d, want %d", n, got, want)
		}
	}
}

func seen(healthy ...bool) []ControlPlaneEtcd {
	out := make([]ControlPlaneEtcd, len(healthy))
	for i, h := range healthy {
		out[i] = ControlPlaneEtcd{Name: fmt.Sprintf("cp-%d", i+1), Healthy: h}
	}

	return out
}

// TestControlPlaneDownRules names each rule of taking a control plane down
// for a while and its message.
func TestControlPlaneDownRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cps    []ControlPlaneEtcd
		target string
		want   []string // words of the refusal; nil = allowed
	}{
		{name: "single healthy control plane", cps: seen(true)},
		{name: "single silent control plane", cps: seen(false), want: []string{"could lose quorum", "no answer from the etcd member of cp-1", "power them on"}},
		{name: "three healthy", cps: seen(true, true, true)},
		{name: "three, one silent", cps: seen(true, false, true), want: []string{"rebooting cp-1 could lose quorum", "of cp-2;"}},
		{name: "five, two silent", cps: seen(false, true, true, true, false), want: []string{"of cp-1, cp-5"}},
		{name: "two healthy", cps: seen(true, true), want: []string{"rebooting cp-1 would leave 1 of 2 etcd members, fewer than the 2", "approve the third"}},
		{name: "two healthy, another machine", cps: seen(true, true), target: "w-1"},
		{name: "four healthy", cps: seen(true, true, true, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == "" {
				target = "cp-1"
			}

			got := CheckControlPlaneDown(tc.cps, target, "rebooting "+target)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("want allowed, got %v", got)
				}

				return
			}

			if got == nil {
				t.Fatalf("want a refusal saying %q, got allowed", tc.want)
			}

			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("refusal %q does not say %q", got.Error(), w)
				}
			}
		})
	}
}
