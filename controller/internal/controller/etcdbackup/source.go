package etcdbackup

import (
	"context"
	"sort"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
)

// candidate is a control plane and what its etcd member said.
type candidate struct {
	name   string
	node   *talos.Node
	status *talos.EtcdStatus
	why    string // why it cannot be used, "" when healthy
}

// source picks the control plane a snapshot is read from: a healthy
// non-leader (etcd's leader serves the cluster's writes; a snapshot is a
// long read of the whole database), or the leader when no other member is
// healthy. A member that does not answer, reports errors or alarms, or is
// a learner is passed over.
func (r *Reconciler) source(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup, bundle *secrets.Bundle) (*source, *failure) {
	machines, err := machinestate.Machines(ctx, r.Client, b.Namespace, b.Spec.ClusterName, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Address != "" && m.DeletionTimestamp.IsZero()
	})
	if err != nil {
		return nil, fail(ichorv1alpha1.NoHealthyControlPlaneReason, "listing the control planes of TalosCluster %q: %v", b.Spec.ClusterName, apiReason(err))
	}

	if len(machines) == 0 {
		return nil, fail(ichorv1alpha1.NoHealthyControlPlaneReason, "TalosCluster %q has no control plane TalosMachine with an address", b.Spec.ClusterName)
	}

	sort.Slice(machines, func(i, j int) bool { return machines[i].Name < machines[j].Name })

	cands := make([]*candidate, 0, len(machines))

	for i := range machines {
		m := &machines[i]
		c := &candidate{name: m.Name}
		cands = append(cands, c)

		n, err := r.Nodes.Dial(ctx, m.Spec.Address, bundle)
		if err != nil {
			c.why = talos.Message(err)

			continue
		}

		c.node = n

		st, err := n.EtcdMemberStatus(ctx)

		switch {
		case err != nil:
			c.why = talos.Message(err)
		case len(st.Errors) > 0:
			c.why = "etcd reports " + strings.Join(st.Errors, "; ")
		case st.Learner:
			c.why = "a learner"
		}

		c.status = st
	}

	pick := choose(cands)

	for _, c := range cands {
		if c != pick && c.node != nil {
			c.node.Close()
		}
	}

	if pick == nil {
		why := make([]string, 0, len(cands))
		for _, c := range cands {
			why = append(why, c.name+": "+c.why)
		}

		return nil, fail(ichorv1alpha1.NoHealthyControlPlaneReason, "no control plane's etcd is healthy (%s)", strings.Join(why, "; "))
	}

	return &source{name: pick.name, node: pick.node}, nil
}

// choose is the first healthy non-leader, else the first healthy member.
func choose(cands []*candidate) *candidate {
	var leader *candidate

	for _, c := range cands {
		if c.why != "" {
			continue
		}

		if !c.status.IsLeader() {
			return c
		}

		if leader == nil {
			leader = c
		}
	}

	return leader
}
