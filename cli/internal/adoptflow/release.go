package adoptflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/kube"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// ReleaseOptions are the release's inputs.
type ReleaseOptions struct {
	// Cluster is the adopted TalosCluster's name.
	Cluster string
	// TalosPort is the Talos API port; zero is 50000.
	TalosPort int
	// Timeout bounds the wait for each machine once its hold is lifted.
	Timeout time.Duration
}

// Release is phase 4: every machine the adoption holds, control planes
// first, one at a time. For each, the node at its address is checked to be
// the machine (its UUID over the API, with the bundle), its live
// configuration is compared with the render (adopt.CheckLive) and any
// unsettled drift (adopt.Unsettled) stops the release there with the paths;
// else the hold is lifted and the release waits until the controller has
// applied the render and the machine is Ready before it goes on. A machine
// released earlier is not touched again, so a second run continues.
func Release(ctx context.Context, conn *kube.Conn, o ReleaseOptions, p *initflow.Progress, out io.Writer) error {
	c := &ichorv1alpha1.TalosCluster{}
	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: conn.Namespace, Name: o.Cluster}, c); err != nil {
		return conn.Explain(err, "reading TalosCluster "+o.Cluster)
	}

	if c.Annotations[ichorv1alpha1.AdoptedAnnotation] == "" {
		return fmt.Errorf("TalosCluster %s was not adopted (no %s annotation): there is no adoption hold to release", o.Cluster, ichorv1alpha1.AdoptedAnnotation)
	}

	held, err := heldMachines(ctx, conn, o.Cluster)
	if err != nil {
		return err
	}

	if len(held) == 0 {
		_, _ = fmt.Fprintf(out, "No TalosMachine of cluster %s is held by the adoption (%s=%s): nothing to release.\n",
			o.Cluster, ichorv1alpha1.HoldApplyAnnotation, adopt.HoldValue)

		return nil
	}

	b, err := readBundle(ctx, conn, c)
	if err != nil {
		return err
	}

	// The first render of a control plane drops the foreign Cilium entry:
	// not before Ichor's release runs that Cilium (architecture, "Cilium",
	// "Takeover": removed only after CNIHandover is true).
	if cilium.TakesOver(c) {
		p.Step("Cilium taken over as Ichor's Helm release (CNIHandover)")

		if err := waitHandover(ctx, conn, c, o.Timeout, p); err != nil {
			p.Fail()

			return err
		}
	}

	d := &talos.Dialer{Port: o.TalosPort, CertTTL: 30 * time.Minute}

	for i, m := range held {
		p.Step(fmt.Sprintf("Release %d/%d: %s (%s, %s)", i+1, len(held), m.Name, m.Spec.Role, m.Spec.Address))

		if err := releaseOne(ctx, conn, d, b, m, o.Timeout, p); err != nil {
			p.Fail()

			return err
		}
	}

	p.Done()

	_, _ = fmt.Fprintf(out, "\nEvery machine of cluster %s is released: the controller applied each render, and manages the cluster from now on.\n", o.Cluster)

	return nil
}

// heldMachines are the cluster's machines the adoption holds, control planes
// first, each group by name.
func heldMachines(ctx context.Context, conn *kube.Conn, cluster string) ([]*ichorv1alpha1.TalosMachine, error) {
	list := &ichorv1alpha1.TalosMachineList{}
	if err := conn.Client.List(ctx, list, client.InNamespace(conn.Namespace)); err != nil {
		return nil, conn.Explain(err, "listing TalosMachines")
	}

	var out []*ichorv1alpha1.TalosMachine

	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName == cluster && m.Annotations[ichorv1alpha1.HoldApplyAnnotation] == adopt.HoldValue {
			out = append(out, m)
		}
	}

	slices.SortFunc(out, func(a, b *ichorv1alpha1.TalosMachine) int {
		ac, bc := a.Spec.Role == ichorv1alpha1.RoleControlPlane, b.Spec.Role == ichorv1alpha1.RoleControlPlane
		if ac != bc {
			if ac {
				return -1
			}

			return 1
		}

		return strings.Compare(a.Name, b.Name)
	})

	return out, nil
}

// readBundle reads the cluster's bundle Secret.
func readBundle(ctx context.Context, conn *kube.Conn, c *ichorv1alpha1.TalosCluster) (*secrets.Bundle, error) {
	ref := c.Spec.SecretsBundleRef
	sec := &corev1.Secret{}

	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, sec); err != nil {
		return nil, conn.Explain(err, "reading the secrets bundle Secret "+ref.Name+" (the live check reads each node with it)")
	}

	b, err := bundle.Decode(sec.Data[bundle.Key(ref)], c.Spec.VersionContract)
	if err != nil {
		return nil, fmt.Errorf("the secrets bundle Secret %s does not load: %w", ref.Name, err)
	}

	return b, nil
}

func releaseOne(ctx context.Context, conn *kube.Conn, d *talos.Dialer, b *secrets.Bundle, m *ichorv1alpha1.TalosMachine, timeout time.Duration, p *initflow.Progress) error {
	in, err := render.LoadInput(ctx, conn.Client, m)
	if err != nil {
		return err
	}

	in.Bundle = b

	res, err := render.Render(in)
	if err != nil {
		return fmt.Errorf("rendering %s: %w", m.Name, err)
	}

	n, err := d.Dial(ctx, m.Spec.Address, b)
	if err != nil {
		return fmt.Errorf("%s: %s", m.Name, talos.Message(err))
	}

	v, err := n.VerifyIdentity(ctx, talos.Identity{UUID: m.Spec.Identity.UUID})
	if err != nil {
		n.Close()

		return fmt.Errorf("%s: %s; nothing was released", m.Name, talos.Message(err))
	}

	live, _, err := v.Config(ctx)
	v.Close()

	if err != nil {
		return fmt.Errorf("reading the configuration of %s: %s", m.Name, talos.Message(err))
	}

	drift, err := adopt.CheckLive(res, live)
	if err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}

	if u := adopt.Unsettled(drift); len(u) > 0 {
		lines := make([]string, 0, len(u))
		for _, x := range u {
			lines = append(lines, fmt.Sprintf("  %s  %-7s  %s: %s", x.Class, x.Op, x.Path, x.Why))
		}

		return fmt.Errorf("%s differs from its render in what the first render would change without your consent, so it stays held "+
			"(this and every later machine):\n%s\nmake the node match (talosctl patch machineconfig) or add a TalosConfigPatch, then run `ichor adopt --release --cluster %s` again",
			m.Name, strings.Join(lines, "\n"), m.Spec.ClusterName)
	}

	p.Detailf("live check: %d Ichor-owned difference(s) the first render changes, nothing else", adopt.Count(drift, adopt.ClassIchorOwned))

	if err := initflow.Retry(ctx, conn, p, func(ctx context.Context) error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := conn.Client.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}

		if cur.Annotations[ichorv1alpha1.HoldApplyAnnotation] != adopt.HoldValue {
			return nil
		}

		before := cur.DeepCopy()
		delete(cur.Annotations, ichorv1alpha1.HoldApplyAnnotation)

		return conn.Client.Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
	}); err != nil {
		return conn.Explain(err, "lifting the hold of "+m.Name)
	}

	p.Detailf("hold lifted; waiting for the controller to apply the render and for %s to be Ready", m.Name)

	return waitApplied(ctx, conn, m, timeout, p)
}

// waitHandover waits until the controller has made the running Cilium
// Ichor's Helm release (CNIHandover=True), showing its progress.
func waitHandover(ctx context.Context, conn *kube.Conn, c *ichorv1alpha1.TalosCluster, timeout time.Duration, p *initflow.Progress) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	last := "the controller has not reported on it yet"

	for {
		cur := &ichorv1alpha1.TalosCluster{}
		if err := conn.Client.Get(ctx, client.ObjectKeyFromObject(c), cur); err == nil {
			cond := apimeta.FindStatusCondition(cur.Status.Conditions, ichorv1alpha1.CNIHandoverCondition)
			if cond != nil && cond.Status == metav1.ConditionTrue {
				p.Detailf("%s", cond.Message)

				return nil
			}

			if cond != nil && cond.Message != last {
				last = cond.Message
				p.Detailf("%s: %s", cond.Reason, last)
			}
		}

		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("the running Cilium is not Ichor's Helm release within %s (last: %s); no hold was lifted. "+
					"Follow it with `ichor cluster get %s` (condition CNIHandover), then run `ichor adopt --release --cluster %s` again", timeout, last, c.Name, c.Name)
			}

			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// waitApplied waits until the controller recorded an applied render and the
// machine is Ready.
func waitApplied(ctx context.Context, conn *kube.Conn, m *ichorv1alpha1.TalosMachine, timeout time.Duration, p *initflow.Progress) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	last := "no status yet"

	for {
		cur := &ichorv1alpha1.TalosMachine{}

		err := conn.Client.Get(ctx, client.ObjectKeyFromObject(m), cur)
		if err == nil {
			ready := apimeta.FindStatusCondition(cur.Status.Conditions, ichorv1alpha1.ReadyCondition)
			if cur.Status.AppliedConfigHash != "" && ready != nil && ready.Status == "True" && ready.ObservedGeneration == cur.Generation {
				return nil
			}

			if ready != nil && ready.Message != last {
				last = ready.Message
				p.Detailf("%s: %s", ready.Reason, last)
			}
		}

		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s is released but not Ready within %s (last: %s); follow it with `ichor machine get %s`, "+
					"then run `ichor adopt --release --cluster %s` again for the machines still held", m.Name, timeout, last, m.Name, m.Spec.ClusterName)
			}

			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
