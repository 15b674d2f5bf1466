package adoptflow

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/kube"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// AddOptions are the inputs of `ichor adopt --add-machine`.
type AddOptions struct {
	// Cluster is the TalosCluster the machines join.
	Cluster string
	// Addresses are the machines' addresses.
	Addresses []string
	// TalosPort is the Talos API port; zero is 50000.
	TalosPort int
}

// Additions are the planned machines of an --add-machine run.
type Additions struct {
	Cluster   *ichorv1alpha1.TalosCluster
	Additions []*adopt.Addition
}

// Blocked are the addresses of the additions blocked by class C drift.
func (a *Additions) Blocked() []string {
	var out []string

	for _, x := range a.Additions {
		if x.Blocked {
			out = append(out, x.Address)
		}
	}

	return out
}

// PlanAdditions reads each address with the cluster's bundle, read-only: the
// node must answer to the cluster's credentials, be no TalosMachine's
// already (by address or UUID), and its configuration must name the
// cluster's ID and Talos API CA; then adopt.PlanAddition compares it with
// its render.
func PlanAdditions(ctx context.Context, conn *kube.Conn, o AddOptions) (*Additions, error) {
	c := &ichorv1alpha1.TalosCluster{}
	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: o.Cluster}, c); err != nil {
		return nil, conn.Explain(err, "reading TalosCluster "+o.Cluster)
	}

	list := &ichorv1alpha1.TalosMachineList{}
	if err := conn.Client.List(ctx, list, client.InNamespace(conn.Namespace)); err != nil {
		return nil, conn.Explain(err, "listing TalosMachines")
	}

	b, err := readBundle(ctx, conn, c)
	if err != nil {
		return nil, err
	}

	d := &talos.Dialer{Port: o.TalosPort, CertTTL: 30 * time.Minute}
	out := &Additions{Cluster: c}

	for _, addr := range o.Addresses {
		for _, m := range list.Items {
			if m.Spec.Address == addr {
				return nil, fmt.Errorf("%s is TalosMachine %s/%s already: --add-machine registers a machine no TalosMachine stands for", addr, m.Namespace, m.Name)
			}
		}

		n, err := d.Dial(ctx, addr, b)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", addr, talos.Message(err))
		}

		m, err := adopt.Read(ctx, n, addr)
		n.Close()

		if err != nil {
			return nil, fmt.Errorf("reading %s with cluster %s's credentials: %s; is it a configured machine of this cluster?", addr, o.Cluster, talos.Message(err))
		}

		for _, tm := range list.Items {
			if tm.Spec.Identity.UUID != "" && tm.Spec.Identity.UUID == m.UUID {
				return nil, fmt.Errorf("the machine at %s (UUID %s) is TalosMachine %s/%s, recorded at %s: it is known already; check its address",
					addr, m.UUID, tm.Namespace, tm.Name, tm.Spec.Address)
			}
		}

		a, err := adopt.PlanAddition(c, b, m, func(tm *ichorv1alpha1.TalosMachine) (render.Input, error) {
			return render.LoadInput(ctx, conn.Client, tm)
		})
		if err != nil {
			return nil, err
		}

		out.Additions = append(out.Additions, a)
	}

	return out, nil
}

// WriteAdditions writes each addition's patch and held TalosMachine, with a
// running machine's status, as the write phase does; nothing is sent to a
// node. A blocked addition is not written.
func WriteAdditions(ctx context.Context, conn *kube.Conn, a *Additions, p *initflow.Progress) error {
	s := &state{p: p, conn: conn}

	versions := map[string]string{}

	for _, x := range a.Additions {
		if x.Blocked {
			return fmt.Errorf("%s is blocked by class C drift: nothing was written", x.Address)
		}

		versions[x.Address] = x.TalosVersion
	}

	p.Step(fmt.Sprintf("%d TalosMachine(s) of cluster %s, held (%s=%s)", len(a.Additions), a.Cluster.Name, ichorv1alpha1.HoldApplyAnnotation, adopt.HoldValue))

	for _, x := range a.Additions {
		if err := s.writeMachines(ctx, x.Objects.Patches, x.Objects.Machines, func(m *ichorv1alpha1.TalosMachine) string {
			return versions[m.Spec.Address]
		}); err != nil {
			p.Fail()

			return err
		}
	}

	p.Done()

	return nil
}
