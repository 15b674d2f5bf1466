package guard

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/quorum"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The quorum property (issue 30, item 7): every operation that removes, stops
// or reboots a control plane is decided by Ichor's shared checks exactly as a
// model written here decides it, for 1 to 7 control planes (each an etcd
// voter), every subset of them healthy and every target. The model is raft's
// rule, computed with etcd's own quorum arithmetic (go.etcd.io/raft/v3/quorum),
// plus what each operation documents on top of it: the single control plane
// that may be rebooted, the last one that may not be shut down, the declared
// count, the single node's downtime consent, the typed name of a restore. It
// never calls QuorumSize or the checks' helpers. Where a decision is taken in
// two places (admission counts the approved machines, the controller sees
// etcd), each is compared with its own model too, so that one cannot hide a
// fault of the other.
//
// Raft's rule: a member that is down or silent casts no vote, and the cluster
// commits while the voters that answer are a majority of the configuration.
// Taking one down for a while (a reboot, an upgrade, a shutdown) keeps it in
// the configuration; removing it is a configuration change the current
// voters commit, after which the others must still be a majority of
// themselves.

// raftWins reports whether the voters in config that vote yes win a vote.
func raftWins(config []int, yes func(int) bool) bool {
	c := quorum.MajorityConfig{}
	votes := map[uint64]bool{}

	for k := range config {
		c[uint64(k)] = struct{}{}
		if yes(config[k]) {
			votes[uint64(k)] = true
		}
	}

	return c.VoteResult(votes) == quorum.VoteWon
}

// quorumCase is one point of the space: cps control planes cp-1..cp-n, each
// an etcd voter; healthy says whose etcd answers (for a restore, who answers
// as itself, running and ready); target is the index of the control plane
// acted on (cps: a machine that is not among them).
type quorumCase struct {
	cps      int
	healthy  []bool
	target   int
	workers  int
	consent  bool  // the downtime consent, or a restore's typed name
	declared int32 // spec.controlPlane.count (removal)
}

func (c quorumCase) all() []int {
	out := make([]int, c.cps)
	for i := range out {
		out[i] = i
	}

	return out
}

func (c quorumCase) allHealthy() bool { return !slices.Contains(c.healthy, false) }

func (c quorumCase) singleNode() bool { return c.cps+c.workers == 1 }

func (c quorumCase) name(i int) string { return fmt.Sprintf("cp-%d", i+1) }

// model: taking the target down for a while. Raft: the others that answer
// win a vote of every member. Ichor's documented extras
// (CheckControlPlaneDown): every member answers first, as Talos's upgrade
// asks; and the only control plane may go, the cluster being down until it
// is back.
func (c quorumCase) takeDownModel() bool {
	if !c.allHealthy() {
		return false
	}

	return c.cps == 1 || raftWins(c.all(), func(i int) bool { return i != c.target && c.healthy[i] })
}

// model: the only node's downtime needs the person's consent.
func (c quorumCase) consentModel() bool { return !c.singleNode() || c.consent }

// model: a removal. Raft: the current voters that answer commit the change,
// and the others that answer win a vote of the others. Documented extras
// (CheckEtcdMemberRemoval, ValidateMachineDelete): never the last voter, never
// below the declared count.
func (c quorumCase) removalModel() bool {
	others := slices.DeleteFunc(c.all(), func(i int) bool { return i == c.target })
	yes := func(i int) bool { return c.healthy[i] }

	return len(others) > 0 && len(others) >= int(c.declared) && raftWins(c.all(), yes) && raftWins(others, yes)
}

func (c quorumCase) seen() []ControlPlaneEtcd {
	out := make([]ControlPlaneEtcd, c.cps)
	for i := range out {
		out[i] = ControlPlaneEtcd{Name: c.name(i), Healthy: c.healthy[i]}
	}

	return out
}

func (c quorumCase) members() []EtcdMember {
	out := make([]EtcdMember, c.cps)
	for i := range out {
		out[i] = EtcdMember{ID: uint64(0x100 + i), Name: c.name(i), Healthy: c.healthy[i]}
	}

	return out
}

func (c quorumCase) approved() ApprovedCounts {
	return ApprovedCounts{ControlPlanes: c.cps, Workers: c.workers}
}

func (c quorumCase) approvedControlPlane(i int) *ichorv1alpha1.TalosMachine {
	return machine(ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) {
		m.Name = c.name(i)
	})
}

// collect gathers what the checks said.
func collect(rs []Refusal, more ...*Refusal) []Refusal {
	for _, r := range more {
		if r != nil {
			rs = append(rs, *r)
		}
	}

	return rs
}

// nodeAdmission is what a node operation meets at admission: CheckOperation
// and the downtime consent, as the webhook runs them. It counts the approved
// control planes and sees no health.
func nodeAdmission(c quorumCase, action string) []Refusal {
	o := op(ichorv1alpha1.OperationNode, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: c.name(c.target), Action: action}
		if c.consent {
			o.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: annotationTrue}
		}
	})
	facts := OperationFacts{
		Cluster: cluster(), Machine: c.approvedControlPlane(c.target),
		OtherApprovedControlPlanes: c.cps - 1, OtherApprovedWorkers: c.workers, Approved: c.approved(),
	}

	return collect(CheckOperation(o, facts), CheckOperationDowntime(o, facts.Approved))
}

// nodeOperation is the whole of a node operation's checks: admission, then
// the controller's run-time check before a control plane is drained.
func nodeOperation(c quorumCase, action string) []Refusal {
	return collect(nodeAdmission(c, action),
		CheckControlPlaneDown(c.seen(), c.name(c.target), "taking "+c.name(c.target)+" down ("+action+")"))
}

// model: a shutdown or reset at admission, which counts the approved control
// planes as if every one answered. Documented (CheckNodeAction): never the
// last control plane, and the others must be a quorum of all of them.
func (c quorumCase) nodeAdmissionModel() bool {
	return c.cps > 1 && raftWins(c.all(), func(i int) bool { return i != c.target })
}

// quorumOperation is one operation of the property: its checks and its model.
type quorumOperation struct {
	name string
	// The dimensions it varies beyond control planes and health: whole
	// takes the cluster down, not one target; blind checks see no health
	// (they run once per count, every member healthy).
	whole, blind, unknownTarget, workers, consent, declared bool
	// check runs the operation's shared checks; none means allowed.
	check func(c quorumCase) []Refusal
	// model is the independent decision.
	model func(c quorumCase) bool
	// always: the operation is allowed in every case, on purpose.
	always bool
}

var quorumOperations = []quorumOperation{
	{
		// TalosMachine deletion at admission (the webhook's
		// ValidateMachineDelete, the allow-delete annotation set): it counts
		// the approved control planes and sees no health. Documented: never
		// the last control plane, never below the declared count.
		name: "removal: admission", blind: true, declared: true,
		check: func(c quorumCase) []Refusal {
			m := c.approvedControlPlane(c.target)
			m.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: annotationTrue}
			facts := MachineFacts{
				Cluster:                    cluster(func(cl *ichorv1alpha1.TalosCluster) { cl.Spec.ControlPlane.Count = c.declared }),
				OtherApprovedControlPlanes: c.cps - 1,
			}

			return ValidateMachineDelete(m, facts)
		},
		model: func(c quorumCase) bool { return c.cps > 1 && c.cps-1 >= int(c.declared) },
	},
	{
		// The finalizer's live check before the member goes (lifecycle,
		// leaveEtcd), with the declared count.
		name: "removal: live", declared: true,
		check: func(c quorumCase) []Refusal {
			return collect(nil, CheckEtcdMemberRemoval(c.members(), uint64(0x100+c.target), c.declared, false))
		},
		model: quorumCase.removalModel,
	},
	{
		// A Talos upgrade: the consent on the cluster write of a single node
		// (CheckClusterDowntime), then before each control plane the
		// controller's run-time check (talos.go, check).
		name: "talos upgrade", unknownTarget: true, workers: true, consent: true,
		check: func(c quorumCase) []Refusal {
			old := cluster()
			upgraded := cluster(func(cl *ichorv1alpha1.TalosCluster) {
				cl.Spec.TalosVersion = "v1.14.2"
				if c.consent {
					cl.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: cl.Spec.TalosVersion}
				}
			})

			return collect(nil, CheckClusterDowntime(old, upgraded, c.approved()),
				CheckControlPlaneDown(c.seen(), c.name(c.target), "upgrading "+c.name(c.target)))
		},
		model: func(c quorumCase) bool { return c.takeDownModel() && c.consentModel() },
	},
	{
		// A configuration that needs a reboot (config rollout, machinesteps.go,
		// plan): the run-time check alone.
		name: "config reboot", unknownTarget: true,
		check: func(c quorumCase) []Refusal {
			return collect(nil, CheckControlPlaneDown(c.seen(), c.name(c.target), "rebooting "+c.name(c.target)))
		},
		model: quorumCase.takeDownModel,
	},
	{
		// Admission lets every reboot of an approved control plane through
		// (the only one too), asking the single node's consent; the run time
		// decides on etcd's health.
		name: "node reboot: admission", blind: true, workers: true, consent: true,
		check: func(c quorumCase) []Refusal { return nodeAdmission(c, ichorv1alpha1.NodeActionReboot) },
		model: quorumCase.consentModel,
	},
	{
		name: "node shutdown: admission", blind: true, workers: true, consent: true,
		check: func(c quorumCase) []Refusal { return nodeAdmission(c, ichorv1alpha1.NodeActionShutdown) },
		model: quorumCase.nodeAdmissionModel,
	},
	{
		name: "node reset: admission", blind: true, workers: true, consent: true,
		check: func(c quorumCase) []Refusal { return nodeAdmission(c, ichorv1alpha1.NodeActionReset) },
		model: quorumCase.nodeAdmissionModel,
	},
	{
		name: "node reboot", workers: true, consent: true,
		check: func(c quorumCase) []Refusal { return nodeOperation(c, ichorv1alpha1.NodeActionReboot) },
		model: func(c quorumCase) bool { return c.takeDownModel() && c.consentModel() },
	},
	{
		// Documented extra (CheckNodeAction): never the last control plane.
		name: "node shutdown", workers: true, consent: true,
		check: func(c quorumCase) []Refusal { return nodeOperation(c, ichorv1alpha1.NodeActionShutdown) },
		model: func(c quorumCase) bool { return c.cps > 1 && c.takeDownModel() && c.consentModel() },
	},
	{
		// A graceful reset leaves etcd and wipes the node, which then joins
		// again; it is checked as a shutdown is (CheckNodeAction), the stricter
		// of the two rules.
		name: "node reset", workers: true, consent: true,
		check: func(c quorumCase) []Refusal { return nodeOperation(c, ichorv1alpha1.NodeActionReset) },
		model: func(c quorumCase) bool { return c.cps > 1 && c.takeDownModel() },
	},
	{
		// The cluster shutdown stops every control plane on purpose, after the
		// workers: its consent is the `shutdown` verb (checked below) and the
		// typed name the CLI and the console ask for. No health is checked.
		name: "cluster shutdown", blind: true, whole: true, workers: true, always: true,
		check: func(c quorumCase) []Refusal {
			o := op(ichorv1alpha1.OperationShutdown)
			facts := OperationFacts{Cluster: cluster(), Approved: c.approved()}

			return collect(CheckOperation(o, facts), CheckOperationDowntime(o, facts.Approved))
		},
		model: func(quorumCase) bool { return true },
	},
	{
		// An etcd restore stops every control plane on purpose: admission
		// wants the cluster's name typed (CheckEtcdRestore), and the
		// controller wants every control plane answering, running and ready,
		// before the resets (CheckRestoreControlPlanes); healthy here is who
		// answers so (the others are unreachable, booting, or running but not
		// ready, by turns). etcd's own health is not asked.
		name: "etcd restore", whole: true, consent: true,
		check: func(c quorumCase) []Refusal {
			o := restoreOp(func(o *ichorv1alpha1.TalosOperation) {
				if !c.consent {
					o.Spec.EtcdRestore.ConfirmClusterName = ""
				}
			})
			cps := make([]RestoreControlPlane, c.cps)
			for i := range cps {
				cps[i] = RestoreControlPlane{Name: c.name(i)}
				switch {
				case c.healthy[i]:
					cps[i].Stage, cps[i].Ready = ichorv1alpha1.StageRunning, true
				case i%3 == 0:
					cps[i].Unreachable = "connection refused"
				case i%3 == 1:
					cps[i].Stage, cps[i].Ready = "booting", true
				default:
					cps[i].Stage = ichorv1alpha1.StageRunning
				}
			}

			return collect(CheckOperation(o, OperationFacts{Cluster: cluster(), Backup: backup()}), CheckRestoreControlPlanes(cps))
		},
		model: func(c quorumCase) bool { return c.consent && c.allHealthy() },
	},
}

// TestQuorumPropertyAllOperations compares each operation's checks with its
// model over every case; a refusal always says its field, rule and way out,
// and none of them is overridable (the override verb does not buy a quorum).
func TestQuorumPropertyAllOperations(t *testing.T) {
	total := 0

	for _, o := range quorumOperations {
		t.Run(o.name, func(t *testing.T) {
			cases, refused := 0, 0

			for cps := 1; cps <= 7; cps++ {
				for mask := 0; mask < 1<<cps; mask++ {
					if o.blind && mask != 1<<cps-1 {
						continue
					}

					healthy := make([]bool, cps)
					for i := range healthy {
						healthy[i] = mask&(1<<i) != 0
					}

					for _, c := range o.cases(cps, healthy) {
						cases++

						got := o.check(c)
						if want := o.model(c); want != (len(got) == 0) {
							t.Fatalf("%d control planes, healthy %v, target %d, %d workers, consent %v, declared %d: the model says allowed=%v, the checks say %v",
								c.cps, c.healthy, c.target, c.workers, c.consent, c.declared, want, got)
						}

						if len(got) > 0 {
							refused++
						}

						for _, r := range got {
							if r.Field == "" || r.Rule == "" || r.WayOut == "" || r.Overridable {
								t.Fatalf("%+v: a refusal without a field, rule or way out, or overridable: %+v", c, r)
							}
						}
					}
				}
			}

			if !o.always && (refused == 0 || refused == cases) {
				t.Fatalf("%d of %d cases refused: the comparison is vacuous", refused, cases)
			}

			total += cases
			t.Logf("%d cases, %d refused", cases, refused)
		})
	}

	// The destructive whole-cluster operations need their own verbs.
	for typ, verb := range map[string]string{ichorv1alpha1.OperationShutdown: VerbShutdown, ichorv1alpha1.OperationEtcdRestore: VerbRestoreEtcd} {
		o := op(typ)
		if typ == ichorv1alpha1.OperationEtcdRestore {
			o = restoreOp()
		}

		if !slices.ContainsFunc(OperationRequirements(o), func(r Requirement) bool { return r.Permission.Verb == verb }) {
			t.Errorf("%s does not need the verb %s", typ, verb)
		}
	}

	t.Logf("%d cases in all", total)
}

// cases expands one control-plane count and health subset over the
// dimensions the operation varies.
func (o quorumOperation) cases(cps int, healthy []bool) []quorumCase {
	targets, workers, consents, declared := cps, []int{0}, []bool{true}, []int32{0}
	if o.unknownTarget {
		targets++
	}

	if o.whole {
		targets = 1
	}

	if o.workers {
		workers = []int{0, 1}
	}

	if o.consent {
		consents = []bool{false, true}
	}

	if o.declared {
		declared = []int32{0, 1, 2, 3, 4, 5, 6, 7, 8}[:cps+2]
	}

	out := make([]quorumCase, 0, targets*len(workers)*len(consents)*len(declared))

	for target := range targets {
		for _, w := range workers {
			for _, consent := range consents {
				for _, d := range declared {
					out = append(out, quorumCase{cps: cps, healthy: healthy, target: target, workers: w, consent: consent, declared: d})
				}
			}
		}
	}

	return out
}
