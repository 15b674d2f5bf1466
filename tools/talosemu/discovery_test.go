package talosemu_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	cfgiface "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	clusterres "github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// members lists the Members a node reports as "<address>=<machine type>".
func members(ctx context.Context, cl *client.Client) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	list, err := safe.StateListAll[*clusterres.Member](ctx, cl.COSI)
	if err != nil {
		return nil, err
	}

	var out []string

	for m := range list.All() {
		s := m.TypedSpec()
		if len(s.Addresses) != 1 {
			return nil, fmt.Errorf("member %s: addresses %v", m.Metadata().ID(), s.Addresses)
		}

		out = append(out, s.Addresses[0].String()+"="+s.MachineType.String())
	}

	slices.Sort(out)

	return out, nil
}

func waitMembers(t *testing.T, c *cluster, m *talosemu.Machine, want []string) {
	t.Helper()

	slices.Sort(want)

	testenv.EventuallyOK(t, 20*time.Second, "members seen by "+m.Name(), func() (bool, string) {
		got, err := members(t.Context(), c.admin(t, m.IP()))
		if err != nil {
			return false, err.Error()
		}

		return slices.Equal(got, want), fmt.Sprint(got)
	})
}

// TestDiscoveryMembers: every configured machine of a cluster with discovery enabled is a
// Member (id = nodename) and an Affiliate (id = node ID) on every other one; a powered-off
// machine stays a member (the discovery service keeps it for its TTL); a machine whose config
// disables cluster.discovery publishes nothing and sees no members. A machine holds its
// Affiliates and Members only once they are read.
func TestDiscoveryMembers(t *testing.T) {
	c := getCluster(t)
	w := startWorld(t, testSpec(3), "")
	cp, w1, w2 := w.Machines()[0], w.Machines()[1], w.Machines()[2]

	provision(t, c, cp, c.controlPlane)
	provision(t, c, w1, c.worker)
	provision(t, c, w2, c.worker)

	// nobody has read a machine's discovery resources yet: no machine holds any (each holding
	// every other one's made a world of N machines hold 2·N² resources)
	discovered := func(want int) {
		t.Helper()

		if n, err := w.DiscoveredResources(); err != nil || n != want {
			t.Fatalf("the machines hold %d Affiliates and Members (%v), want %d", n, err, want)
		}
	}

	discovered(0)

	all := []string{cp.IP() + "=controlplane", w1.IP() + "=worker", w2.IP() + "=worker"}
	for _, m := range w.Machines() {
		waitMembers(t, c, m, all)
	}

	// read once, each holds the three affiliates and the three members, and keeps them exact
	discovered(3 * (3 + 3))

	// ids as Talos names them: members by nodename, affiliates by node ID
	a := c.admin(t, cp.IP())

	nodename, err := safe.StateGetByID[*k8s.Nodename](t.Context(), a.COSI, k8s.NodenameID)
	if err != nil {
		t.Fatal(err)
	}

	mem, err := safe.StateGetByID[*clusterres.Member](t.Context(), a.COSI, nodename.TypedSpec().Nodename)
	if err != nil {
		t.Fatalf("member %s: %v", nodename.TypedSpec().Nodename, err)
	}

	id, err := safe.StateGetByID[*clusterres.Identity](t.Context(), a.COSI, clusterres.LocalIdentity)
	if err != nil {
		t.Fatal(err)
	}

	if mem.TypedSpec().NodeID != id.TypedSpec().NodeID || mem.TypedSpec().ControlPlane == nil || mem.TypedSpec().ControlPlane.APIServerPort != 6443 {
		t.Fatalf("member of the control plane: %+v (node ID %s)", mem.TypedSpec(), id.TypedSpec().NodeID)
	}

	if _, err := safe.StateGetByID[*clusterres.Affiliate](t.Context(), a.COSI, id.TypedSpec().NodeID); err != nil {
		t.Fatalf("affiliate %s: %v", id.TypedSpec().NodeID, err)
	}

	// powered off: still a member (TTL), as talosctl health expects
	if err := w2.PowerOff(); err != nil {
		t.Fatal(err)
	}

	waitMembers(t, c, cp, all)

	// discovery disabled in w1's config (what `talosctl gen config --with-cluster-discovery=false`
	// writes for v1.14: no DiscoveryServiceConfig document): w1 sees no members; the others
	// keep it until the TTL
	in, err := generate.NewInput("emu", "https://127.0.0.1:6443", "1.37.0",
		generate.WithSecretsBundle(c.bundle), generate.WithInstallDisk("/dev/nvme0n1"), generate.WithClusterDiscovery(false))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(machine.TypeWorker)
	if err != nil {
		t.Fatal(err)
	}

	apply := func(b []byte) {
		t.Helper()

		if _, err := c.admin(t, w1.IP()).ApplyConfiguration(t.Context(), applyRequest(b)); err != nil {
			t.Fatal(err)
		}
	}

	off, err := cfg.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	apply(off)
	waitMembers(t, c, w1, nil)
	waitMembers(t, c, cp, all)

	// the legacy block cluster.discovery.enabled: true (service registry, with the legacy
	// .cluster.id/.cluster.secret instead of the DiscoveryIdentityConfig document) turns it on
	// again
	cfg, err = container.New(slices.DeleteFunc(cfg.Clone().Documents(), func(d cfgiface.Document) bool {
		return d.Kind() == "DiscoveryIdentityConfig"
	})...)
	if err != nil {
		t.Fatal(err)
	}

	cfg.RawV1Alpha1().ClusterConfig.ClusterDiscoveryConfig = &v1alpha1.ClusterDiscoveryConfig{DiscoveryEnabled: new(true)}                  //nolint:staticcheck // the legacy block is what we test
	cfg.RawV1Alpha1().ClusterConfig.ClusterID, cfg.RawV1Alpha1().ClusterConfig.ClusterSecret = c.bundle.Cluster.ID, c.bundle.Cluster.Secret //nolint:staticcheck // see above

	on, err := cfg.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	apply(on)
	waitMembers(t, c, w1, all)

	// and cluster.discovery.enabled: false turns it off
	cfg.RawV1Alpha1().ClusterConfig.ClusterDiscoveryConfig = &v1alpha1.ClusterDiscoveryConfig{DiscoveryEnabled: new(false)} //nolint:staticcheck // see above

	off, err = cfg.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	apply(off)
	waitMembers(t, c, w1, nil)
}
