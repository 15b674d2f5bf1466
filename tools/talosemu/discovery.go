package talosemu

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
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
// included. The service keeps an affiliate for its TTL (defaultDiscoveryTTL, 30 min) after
// the node last refreshed it: a machine that goes down (power-off, shutdown, reboot) or whose
// config stops publishing stays a member for 30 minutes, as on Talos; a reset deletes it at
// once (DeleteLocalAffiliate in the resetting stage).
//
// Differences: no KubeSpan data, no raw affiliates in the "cluster-raw" namespace, and no
// Kubernetes registry of its own (both registries read the same world).
type discoveryState struct {
	discoMu sync.Mutex
	// published: cluster ID → node ID → affiliate
	published map[string]map[string]*publishedAffiliate
	// read: the machines whose Affiliates or Members someone has read (over
	// COSI, or the health check). Only these hold them, kept exact from then
	// on; another machine's are written whole at its first read. Keeping every
	// machine's copy of every other one made a world of N publishing machines
	// hold 2·N² resources: at 5,000 machines, gigabytes, with nobody reading.
	read map[*Machine]struct{}
}

// discoveryTTL is how long the discovery service keeps an affiliate its node no longer
// refreshes (t:internal/app/machined/pkg/controllers/cluster/discovery_service.go).
const discoveryTTL = 30 * time.Minute

type publishedAffiliate struct {
	spec cluster.AffiliateSpec
	// expires is zero while the node refreshes it
	expires time.Time
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

// discoveryChanged publishes m's affiliate (or lets it expire when the running config no
// longer publishes; withdraws it at once when the machine has no config, after a reset) and
// rewrites the Affiliates and Members of every machine of the clusters concerned.
func (w *World) discoveryChanged(m *Machine) {
	spec, publishes := m.localAffiliate()
	key := m.discoveryKey()
	reset := m.activeConfig() == nil

	w.discoMu.Lock()
	defer w.discoMu.Unlock()

	if w.published == nil {
		w.published = map[string]map[string]*publishedAffiliate{}
	}

	touched := map[string]bool{}
	nodeID := seed(m.p.Hardware.Name, "node-id")[:32]

	for k, nodes := range w.published {
		a, ok := nodes[nodeID]
		if !ok || (publishes && k == key) {
			continue
		}

		if reset {
			delete(nodes, nodeID)
		} else if a.expires.IsZero() {
			w.expireLocked(k, nodeID, a)
		}

		touched[k] = true
	}

	if publishes {
		if w.published[key] == nil {
			w.published[key] = map[string]*publishedAffiliate{}
		}

		w.published[key][nodeID] = &publishedAffiliate{spec: spec}
		touched[key] = true
	}

	w.rewriteDiscoveredLocked(m, touched, nodeID)
}

// discoveryDown stops m refreshing its affiliate: it expires after the TTL.
func (w *World) discoveryDown(m *Machine) {
	nodeID := seed(m.p.Hardware.Name, "node-id")[:32]

	w.discoMu.Lock()
	defer w.discoMu.Unlock()

	for k, nodes := range w.published {
		if a, ok := nodes[nodeID]; ok && a.expires.IsZero() {
			w.expireLocked(k, nodeID, a)
		}
	}
}

// expireLocked starts a's TTL; when it runs out (and the node did not publish again) the
// affiliate leaves the cluster's machines.
func (w *World) expireLocked(key, nodeID string, a *publishedAffiliate) {
	a.expires = time.Now().Add(discoveryTTL)

	time.AfterFunc(discoveryTTL, func() {
		w.discoMu.Lock()
		defer w.discoMu.Unlock()

		if cur, ok := w.published[key][nodeID]; !ok || cur != a {
			return
		}

		delete(w.published[key], nodeID)
		w.rewriteDiscoveredLocked(nil, map[string]bool{key: true}, nodeID)
	})
}

// rewriteDiscoveredLocked brings the Affiliates and Members of the read
// machines of the touched clusters up to date after the affiliate changed (a
// node ID) changed: m's own are rewritten whole (its cluster may be another
// one now), the others' only for that affiliate. Rewriting every machine's
// whole list at every change made a cluster of a thousand machines cost a
// billion resource writes to provision.
func (w *World) rewriteDiscoveredLocked(m *Machine, touched map[string]bool, changed string) {
	specs := map[string]map[string]cluster.AffiliateSpec{}

	for o := range w.read {
		k := o.discoveryKey()

		if o != m && !touched[k] {
			continue
		}

		s, ok := specs[k]
		if !ok {
			s = w.publishedSpecsLocked(k)
			specs[k] = s
		}

		only := changed
		if o == m {
			only = ""
		}

		if err := o.writeDiscovered(s, only); err != nil {
			w.logf("machine %s: discovery: %v", o.Name(), err)
		}
	}
}

// publishedSpecsLocked copies the affiliates published under a cluster ID.
func (w *World) publishedSpecsLocked(key string) map[string]cluster.AffiliateSpec {
	s := make(map[string]cluster.AffiliateSpec, len(w.published[key]))
	for id, a := range w.published[key] {
		s[id] = a.spec
	}

	return s
}

// discoveryRead is called before anything reads m's Affiliates or Members: at
// the first such read they are written whole, and kept exact from then on.
func (w *World) discoveryRead(m *Machine) {
	w.discoMu.Lock()
	defer w.discoMu.Unlock()

	if _, ok := w.read[m]; ok {
		return
	}

	if w.read == nil {
		w.read = map[*Machine]struct{}{}
	}

	w.read[m] = struct{}{}

	if err := m.writeDiscovered(w.publishedSpecsLocked(m.discoveryKey()), ""); err != nil {
		w.logf("machine %s: discovery: %v", m.Name(), err)
	}
}

// discoveryReads is a machine's COSI state as its API serves it: a read of
// its Affiliates or Members first makes them exact (World.discoveryRead).
type discoveryReads struct {
	state.CoreState

	m *Machine
}

func (d discoveryReads) before(ns resource.Namespace, typ resource.Type) {
	if ns == cluster.NamespaceName && (typ == cluster.AffiliateType || typ == cluster.MemberType) {
		d.m.world.discoveryRead(d.m)
	}
}

func (d discoveryReads) Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error) {
	d.before(ptr.Namespace(), ptr.Type())

	return d.CoreState.Get(ctx, ptr, opts...)
}

func (d discoveryReads) List(ctx context.Context, kind resource.Kind, opts ...state.ListOption) (resource.List, error) {
	d.before(kind.Namespace(), kind.Type())

	return d.CoreState.List(ctx, kind, opts...)
}

func (d discoveryReads) Watch(ctx context.Context, ptr resource.Pointer, ch chan<- state.Event, opts ...state.WatchOption) error {
	d.before(ptr.Namespace(), ptr.Type())

	return d.CoreState.Watch(ctx, ptr, ch, opts...)
}

func (d discoveryReads) WatchKind(ctx context.Context, kind resource.Kind, ch chan<- state.Event, opts ...state.WatchKindOption) error {
	d.before(kind.Namespace(), kind.Type())

	return d.CoreState.WatchKind(ctx, kind, ch, opts...)
}

func (d discoveryReads) WatchKindAggregated(ctx context.Context, kind resource.Kind, ch chan<- []state.Event, opts ...state.WatchKindOption) error {
	d.before(kind.Namespace(), kind.Type())

	return d.CoreState.WatchKindAggregated(ctx, kind, ch, opts...)
}

// writeDiscovered sets the machine's Affiliates and Members to the cluster's published
// affiliates (none when the machine does not publish); with only set, just that
// affiliate's (and its Member's).
func (m *Machine) writeDiscovered(affiliates map[string]cluster.AffiliateSpec, only string) error {
	ctx := context.Background()

	if m.discoveryKey() == "" {
		affiliates = nil
	}

	if only != "" {
		return m.writeAffiliate(ctx, affiliates, only)
	}

	members := map[string]cluster.MemberSpec{}

	for _, a := range affiliates {
		if a.Nodename == "" {
			continue
		}

		members[a.Nodename] = memberOf(a)
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

// writeAffiliate brings one affiliate of the machine, and its Member, to what
// affiliates says of it: written, or removed when it is not there.
func (m *Machine) writeAffiliate(ctx context.Context, affiliates map[string]cluster.AffiliateSpec, id string) error {
	a, publishes := affiliates[id]

	old, err := safe.StateGetByID[*cluster.Affiliate](ctx, m.st, id)
	if err != nil && !state.IsNotFoundError(err) {
		return err
	}

	if err == nil {
		if was := old.TypedSpec().Nodename; was != "" && (!publishes || was != a.Nodename) {
			if err := destroyIfExists(ctx, m.st, cluster.NewMember(cluster.NamespaceName, was).Metadata()); err != nil {
				return err
			}
		}
	}

	if !publishes {
		return destroyIfExists(ctx, m.st, cluster.NewAffiliate(cluster.NamespaceName, id).Metadata())
	}

	if err := put(ctx, m.st, cluster.NewAffiliate(cluster.NamespaceName, id), func(r *cluster.Affiliate) { *r.TypedSpec() = a }); err != nil {
		return err
	}

	if a.Nodename == "" {
		return nil
	}

	return put(ctx, m.st, cluster.NewMember(cluster.NamespaceName, a.Nodename), func(r *cluster.Member) { *r.TypedSpec() = memberOf(a) })
}

// memberOf is the Member an affiliate with a node name makes.
func memberOf(a cluster.AffiliateSpec) cluster.MemberSpec {
	return cluster.MemberSpec{
		NodeID: a.NodeID, Addresses: a.Addresses, Hostname: a.Hostname, MachineType: a.MachineType,
		OperatingSystem: a.OperatingSystem, ControlPlane: a.ControlPlane,
	}
}

// DiscoveredResources counts the Affiliates and Members the world's machines
// hold: only the machines whose discovery resources have been read hold any.
func (w *World) DiscoveredResources() (int, error) {
	w.discoMu.Lock()
	defer w.discoMu.Unlock()

	n := 0

	for _, m := range w.machines {
		a, err := safe.StateListAll[*cluster.Affiliate](context.Background(), m.st)
		if err != nil {
			return 0, err
		}

		mem, err := safe.StateListAll[*cluster.Member](context.Background(), m.st)
		if err != nil {
			return 0, err
		}

		n += a.Len() + mem.Len()
	}

	return n, nil
}
