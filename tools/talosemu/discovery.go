package talosemu

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
)

// Cluster discovery. On Talos each node publishes its affiliate (t:internal/app/machined/pkg/
// controllers/cluster/local_affiliate.go) to the discovery service
// (t:…/cluster/discovery_service.go), which hands every node of the same cluster ID the
// others' affiliates; t:…/cluster/affiliate_merge.go merges them into the Affiliates of the
// "cluster" namespace (id = node ID) and t:…/cluster/member.go turns each affiliate with a
// nodename into a Member (id = nodename). The world plays the discovery service: a machine
// publishes while its running config enables a registry (cluster.discovery.enabled with the
// service registry, i.e. DiscoveryServiceConfigs, or the Kubernetes registry), and every
// publishing machine of the same cluster ID sees every published affiliate, its own
// included. A machine that goes down stays published — the service keeps an affiliate until
// its TTL (30 min) expires — so a powered-off machine is still a member, as on Talos; one that
// stops publishing (config without discovery, reset into maintenance) is withdrawn.
//
// Differences: no KubeSpan data, no raw affiliates in the "cluster-raw" namespace, and no
// Kubernetes registry of its own (both registries read the same world).
type discoveryState struct {
	discoMu sync.Mutex
	// published: cluster ID → node ID → affiliate
	published map[string]map[string]cluster.AffiliateSpec
}

// discoveryKey is the cluster ID a machine publishes under, "" when it does not publish.
func (m *Machine) discoveryKey() string {
	cfg := m.activeConfig()
	if !discoveryPublishes(cfg) {
		return ""
	}

	if id := cfg.DiscoveryIdentityConfig(); id != nil && id.ClusterID() != "" {
		return "cluster-id:" + id.ClusterID()
	}

	// no cluster identity (a hand-written config): the cluster's Kubernetes CA
	return "kube-ca:" + string(kubeCACert(cfg))
}

// localAffiliate is what LocalAffiliateController publishes for m.
func (m *Machine) localAffiliate() (cluster.AffiliateSpec, bool) {
	cfg := m.activeConfig()
	if !discoveryPublishes(cfg) {
		return cluster.AffiliateSpec{}, false
	}

	m.mu.Lock()
	hostname := m.hostnameLocked()
	version, _ := m.runningVersionLocked()
	m.mu.Unlock()

	spec := cluster.AffiliateSpec{
		NodeID:          seed(m.p.Hardware.Name, "node-id")[:32],
		Hostname:        hostname,
		Nodename:        strings.ToLower(hostname),
		MachineType:     cfg.Machine().Type(),
		OperatingSystem: fmt.Sprintf("Talos (%s)", version),
	}

	if ip, err := netip.ParseAddr(m.IP()); err == nil {
		spec.Addresses = []netip.Addr{ip}
	}

	if spec.MachineType.IsControlPlane() && cfg.K8sAPIServerConfig() != nil {
		spec.ControlPlane = &cluster.ControlPlane{APIServerPort: cfg.K8sAPIServerConfig().APIPort()}
	}

	return spec, true
}

// discoveryChanged publishes or withdraws m's affiliate and rewrites the Affiliates and
// Members of every machine of the clusters concerned.
func (w *World) discoveryChanged(m *Machine) {
	w.discoMu.Lock()
	defer w.discoMu.Unlock()

	if w.published == nil {
		w.published = map[string]map[string]cluster.AffiliateSpec{}
	}

	touched := map[string]bool{}

	spec, publishes := m.localAffiliate()
	key := m.discoveryKey()

	// withdraw it from any other cluster it was in
	for k, nodes := range w.published {
		if _, ok := nodes[spec.NodeID]; ok && (k != key || !publishes) {
			delete(nodes, spec.NodeID)

			touched[k] = true
		}
	}

	if publishes {
		if w.published[key] == nil {
			w.published[key] = map[string]cluster.AffiliateSpec{}
		}

		w.published[key][spec.NodeID] = spec
		touched[key] = true
	}

	for _, o := range w.machines {
		k := o.discoveryKey()

		if o == m || touched[k] {
			if err := o.writeDiscovered(w.published[k]); err != nil {
				w.logf("machine %s: discovery: %v", o.Name(), err)
			}
		}
	}
}

// writeDiscovered sets the machine's Affiliates and Members to the cluster's published
// affiliates (none when the machine does not publish).
func (m *Machine) writeDiscovered(affiliates map[string]cluster.AffiliateSpec) error {
	ctx := context.Background()

	if m.discoveryKey() == "" {
		affiliates = nil
	}

	members := map[string]cluster.MemberSpec{}

	for _, a := range affiliates {
		if a.Nodename == "" {
			continue
		}

		members[a.Nodename] = cluster.MemberSpec{
			NodeID: a.NodeID, Addresses: a.Addresses, Hostname: a.Hostname, MachineType: a.MachineType,
			OperatingSystem: a.OperatingSystem, ControlPlane: a.ControlPlane,
		}
	}

	oldA, err := safe.StateListAll[*cluster.Affiliate](ctx, m.st)
	if err != nil {
		return err
	}

	for r := range oldA.All() {
		if _, ok := affiliates[r.Metadata().ID()]; !ok {
			if err := destroyIfExists(ctx, m.st, r.Metadata()); err != nil {
				return err
			}
		}
	}

	oldM, err := safe.StateListAll[*cluster.Member](ctx, m.st)
	if err != nil {
		return err
	}

	for r := range oldM.All() {
		if _, ok := members[r.Metadata().ID()]; !ok {
			if err := destroyIfExists(ctx, m.st, r.Metadata()); err != nil {
				return err
			}
		}
	}

	for id, a := range affiliates {
		if err := put(ctx, m.st, cluster.NewAffiliate(cluster.NamespaceName, id), func(r *cluster.Affiliate) { *r.TypedSpec() = a }); err != nil {
			return err
		}
	}

	for id, mem := range members {
		if err := put(ctx, m.st, cluster.NewMember(cluster.NamespaceName, id), func(r *cluster.Member) { *r.TypedSpec() = mem }); err != nil {
			return err
		}
	}

	return nil
}
