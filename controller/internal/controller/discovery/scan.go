package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	probe "github.com/maeshinshin/ichor/controller/internal/discovery"
	"github.com/maeshinshin/ichor/controller/internal/metrics"
)

// scan is one reconcile's work on one cluster.
type scan struct {
	r       *Reconciler
	cluster *ichorv1alpha1.TalosCluster
	now     time.Time

	// machines are every TalosMachine, of every namespace and cluster: an
	// identity is unique across them all.
	machines []ichorv1alpha1.TalosMachine
	// previous are the results of the last status, by address.
	previous map[string]ichorv1alpha1.DiscoveryResult
	// results are this run's results, by address.
	results map[string]ichorv1alpha1.DiscoveryResult
	// returned are removed machines' addresses where a node answered again.
	returned []netip.Addr
	// explicit are spec.discovery.addresses.
	explicit []netip.Addr
	// created counts the pending machines this run created (not yet in the cache).
	created []string
}

// do probes, acts on what it found and patches the cluster's status.
func (s *scan) do(ctx context.Context, full bool, removed []netip.Addr) error {
	c := s.cluster

	s.previous = map[string]ichorv1alpha1.DiscoveryResult{}
	for _, e := range c.Status.Discovery.Addresses {
		s.previous[e.Address] = e
	}

	explicit, problems := parseAddresses(c.Spec.Discovery.Addresses)
	s.explicit = explicit

	var found []probe.Found

	if full {
		started := time.Now()

		prefixes, bad := s.prefixes()
		problems = append(problems, bad...)

		targets := append(slices.Clone(explicit), removed...)
		found = append(found, s.r.probeAll(ctx, dedupe(targets))...)

		scanned, err := probe.Scan(ctx, prefixes, s.r.Port, s.r.Concurrency, s.r.ProbeTimeout)
		if err != nil {
			problems = append(problems, err.Error())
		}

		for _, f := range scanned {
			if !slices.Contains(targets, f.Address) {
				found = append(found, f)
			}
		}

		// The probing only; acting on what it found is not the scan.
		metrics.ObserveDiscoveryScan(c.Namespace, c.Name, time.Since(started))
	} else {
		found = s.r.probeAll(ctx, removed)
	}

	if len(problems) > 0 && full {
		msg := strings.Join(problems, "; ")
		if msg != c.Status.Discovery.Message {
			s.eventf(corev1.EventTypeWarning, ichorv1alpha1.DiscoveryConfigInvalidReason, "%s", msg)
		}
	}

	var list ichorv1alpha1.TalosMachineList
	if err := s.r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing TalosMachines: %w", err)
	}

	s.machines = list.Items
	s.results = map[string]ichorv1alpha1.DiscoveryResult{}

	// The status is written even when a machine could not be created (the
	// skeleton writes it after a failed phase too): its address's result says why.
	err := s.handle(ctx, found, removed)
	s.setStatus(full, explicit, strings.Join(problems, "; "))

	return err
}

func (r *Reconciler) probeAll(ctx context.Context, addrs []netip.Addr) []probe.Found {
	if len(addrs) == 0 {
		return nil
	}

	return probe.ProbeAll(ctx, addrs, r.Port, r.Concurrency, r.ProbeTimeout)
}

func parseAddresses(in []string) ([]netip.Addr, []string) {
	var (
		out      []netip.Addr
		problems []string
	)

	for _, a := range in {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			problems = append(problems, fmt.Sprintf("address %q is not an IP address", a))

			continue
		}

		out = append(out, addr)
	}

	return dedupe(out), problems
}

func dedupe(in []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(in))

	for _, a := range in {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}

	return out
}

// prefixes parses spec.discovery.subnets, leaving out (and naming) those too large to scan.
func (s *scan) prefixes() ([]netip.Prefix, []string) {
	var (
		out      []netip.Prefix
		problems []string
		total    int
	)

	for _, sub := range s.cluster.Spec.Discovery.Subnets {
		p, err := netip.ParsePrefix(sub)
		if err != nil {
			problems = append(problems, fmt.Sprintf("subnet %q is not a CIDR", sub))

			continue
		}

		// The admission limits (guard.ScanSize, guard.MaxScanAddresses) also
		// hold for a cluster written before they existed.
		size, err := guard.ScanSize(sub)
		if err != nil {
			problems = append(problems, "skipped: "+err.Error())

			continue
		}

		if total+size > guard.MaxScanAddresses {
			problems = append(problems, fmt.Sprintf("subnet %s skipped: the subnets hold more than %d addresses in all", p, guard.MaxScanAddresses))

			continue
		}

		total += size
		out = append(out, p)
	}

	return out, problems
}

// candidate is one identity found in maintenance mode, at one or more addresses.
type candidate struct {
	id      ichorv1alpha1.MachineIdentity
	key     string
	name    string
	res     *probe.Result
	addrs   []netip.Addr
	machine *ichorv1alpha1.TalosMachine
}

// handle turns the probes' outcomes into results, creating and refreshing pending machines.
func (s *scan) handle(ctx context.Context, found []probe.Found, removed []netip.Addr) error {
	byAddress := map[string]*ichorv1alpha1.TalosMachine{}
	byKey := map[string]*ichorv1alpha1.TalosMachine{}

	for i := range s.machines {
		m := &s.machines[i]
		if m.Spec.Address != "" {
			byAddress[m.Spec.Address] = m
		}

		byKey[m.Spec.Identity.Key()] = m
	}

	var (
		cands []*candidate
		byCK  = map[string]*candidate{}
	)

	for _, f := range found {
		addr := f.Address.String()

		if f.Err == nil && f.Result.Kind == probe.KindMaintenance && slices.Contains(removed, f.Address) {
			s.returned = append(s.returned, f.Address)
		}

		switch {
		case f.Err != nil && errors.Is(f.Err, probe.ErrUnreachable) && !slices.Contains(s.explicit, f.Address):
			// a removed machine's address, not back yet
		case f.Err != nil:
			s.set(addr, ichorv1alpha1.DiscoveryResultUnreachable, "", unreachableMessage(f.Err))
		case f.Result.Kind == probe.KindAlreadyConfigured && slices.Contains(removed, f.Address) && !slices.Contains(s.explicit, f.Address):
			// a removed machine not reset yet: it comes back in maintenance mode
		case f.Result.Kind == probe.KindAlreadyConfigured:
			if m := byAddress[addr]; m != nil {
				s.set(addr, ichorv1alpha1.DiscoveryResultKnown, s.ref(m), "a configured node that is this TalosMachine's address")

				continue
			}

			msg := fmt.Sprintf("the node at %s runs a configured Talos (its API wants a client certificate); nothing was created: join it with a reclaim (ichor machine reclaim %s)", addr, addr)
			if s.previous[addr].Result != ichorv1alpha1.DiscoveryResultAlreadyConfigured {
				s.eventf(corev1.EventTypeWarning, ichorv1alpha1.DiscoveryResultAlreadyConfigured, "%s", msg)
			}

			s.set(addr, ichorv1alpha1.DiscoveryResultAlreadyConfigured, "", msg)
		default:
			id := f.Result.Identity
			key := id.Key()

			if cd := byCK[key]; cd != nil {
				cd.addrs = append(cd.addrs, f.Address)

				continue
			}

			cd := &candidate{id: id, key: key, name: ichorv1alpha1.MachineName(s.cluster.Name, id), res: f.Result, addrs: []netip.Addr{f.Address}, machine: byKey[key]}
			byCK[key] = cd
			cands = append(cands, cd)
		}
	}

	var errs []error

	for _, cd := range cands {
		if err := s.candidate(ctx, cd, cands); err != nil {
			errs = append(errs, err)
		}
	}

	return errors.Join(errs...)
}

// candidate acts on one identity found in maintenance mode.
func (s *scan) candidate(ctx context.Context, cd *candidate, all []*candidate) error {
	m := cd.machine
	if m == nil {
		created, err := s.create(ctx, cd, all)
		if err != nil {
			for _, a := range cd.addrs {
				s.set(a.String(), ichorv1alpha1.DiscoveryResultUnreachable, "", "creating its TalosMachine failed: "+err.Error())
			}

			if apierrors.IsInvalid(err) {
				// The node reports something the API refuses (a serial too long, too
				// many links): retrying does not help; the result says why.
				return nil
			}

			return err
		}

		m = created
	} else if s.mine(m) && m.Spec.Approval.State == ichorv1alpha1.ApprovalPending && m.DeletionTimestamp.IsZero() {
		if err := s.refresh(ctx, m, cd, all); err != nil {
			return err
		}
	}

	result, msg := ichorv1alpha1.DiscoveryResultKnown, ""

	switch {
	case !m.DeletionTimestamp.IsZero():
		msg = "this machine's TalosMachine is being removed; the address is probed again once it is gone"
	case s.mine(m) && m.Spec.Approval.State == ichorv1alpha1.ApprovalPending:
		result = ichorv1alpha1.DiscoveryResultPending
		if cond := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition); cond != nil && cond.Status == metav1.ConditionTrue {
			result, msg = ichorv1alpha1.DiscoveryResultConflict, cond.Message
		}
	case !s.mine(m):
		msg = "the machine belongs to another cluster"
	default:
		msg = "the machine is " + m.Spec.Approval.State
	}

	for _, a := range cd.addrs {
		s.set(a.String(), result, s.ref(m), msg)
	}

	return nil
}

func (s *scan) mine(m *ichorv1alpha1.TalosMachine) bool {
	return m.Namespace == s.cluster.Namespace && m.Spec.ClusterName == s.cluster.Name
}

// ref names a machine: its name in the cluster's namespace, namespace/name elsewhere.
func (s *scan) ref(m *ichorv1alpha1.TalosMachine) string {
	if m.Namespace == s.cluster.Namespace {
		return m.Name
	}

	return m.Namespace + "/" + m.Name
}

// conflict computes the IdentityConflict condition of a pending machine with identity id.
func (s *scan) conflict(self string, cd *candidate, all []*candidate, address string) metav1.Condition {
	id := cd.id
	show := fmt.Sprintf("address %s, MACs %s, serial %q, manufacturer %q",
		address, strings.Join(id.MACAddresses, " "), id.Serial, cd.res.Hardware.Manufacturer)

	if id.UUID == "" {
		return metav1.Condition{
			Type: ichorv1alpha1.IdentityConflictCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.WeakIdentityReason,
			Message: "the node reports no SMBIOS UUID, so its identity rests on the serial and MACs alone; check that it is the machine you expect before approving it (" + show + ")",
		}
	}

	var others []string

	for i := range s.machines {
		o := &s.machines[i]
		if (o.Name == self && o.Namespace == s.cluster.Namespace) || !o.DeletionTimestamp.IsZero() {
			continue
		}

		if strings.EqualFold(o.Spec.Identity.UUID, id.UUID) && o.Spec.Identity.Key() != cd.key {
			others = append(others, "TalosMachine "+s.ref(o))
		}
	}

	for _, o := range all {
		if o.key != cd.key && o.machine == nil && o.id.UUID == id.UUID {
			others = append(others, "TalosMachine "+o.name+" (discovered in the same scan)")
		}
	}

	if len(others) > 0 {
		slices.Sort(others)

		return metav1.Condition{
			Type: ichorv1alpha1.IdentityConflictCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.DuplicateIdentityReason,
			Message: fmt.Sprintf("SMBIOS UUID %s is also reported by %s, with other MACs or serial: decide whether this is the same machine returning or another one (%s)",
				id.UUID, strings.Join(slices.Compact(others), ", "), show),
		}
	}

	return metav1.Condition{
		Type: ichorv1alpha1.IdentityConflictCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.UniqueIdentityReason,
		Message: "the UUID, serial and MACs belong to no other TalosMachine",
	}
}

// create makes the pending TalosMachine of a new identity, then its status.
func (s *scan) create(ctx context.Context, cd *candidate, all []*candidate) (*ichorv1alpha1.TalosMachine, error) {
	log := ctrl.LoggerFrom(ctx)
	address := cd.addrs[0].String()

	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.cluster.Namespace,
			Name:      cd.name,
			Labels:    map[string]string{ichorv1alpha1.ClusterLabel: s.cluster.Name},
		},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: s.cluster.Name,
			Identity:    cd.id,
			Address:     address,
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
		},
	}

	if err := s.r.Client.Create(ctx, m); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating TalosMachine %s for the node at %s: %w", cd.name, address, err)
		}

		// The cache had not seen it yet: it is the same identity (the name is its hash).
		if err := s.r.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return nil, err
		}

		if m.Spec.Approval.State == ichorv1alpha1.ApprovalPending && m.DeletionTimestamp.IsZero() {
			return m, s.refresh(ctx, m, cd, all)
		}

		return m, nil
	}

	log.Info("discovered a machine", "machine", m.Name, "address", address)
	s.created = append(s.created, m.Name)

	before := m.DeepCopy()
	m.Status.MaintenanceFingerprint = cd.res.Fingerprint
	s.fillStatus(m, cd, all)

	if err := s.r.Client.Status().Patch(ctx, m, client.MergeFrom(before)); err != nil {
		return nil, fmt.Errorf("writing the status of TalosMachine %s: %w", m.Name, err)
	}

	note := fmt.Sprintf("discovered the node at %s as TalosMachine %s, pending approval", address, m.Name)
	if c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition); c != nil && c.Status == metav1.ConditionTrue {
		note += "; its identity needs a person's check (" + c.Reason + ")"
	}

	s.eventf(corev1.EventTypeNormal, ichorv1alpha1.MachineDiscoveredReason, "%s", note)

	return m, nil
}

// refresh updates a pending machine that answered again: its address when it
// moved, its hardware, stage and identity check. Its fingerprint, once
// recorded, is never replaced: it is what provisioning pins.
func (s *scan) refresh(ctx context.Context, m *ichorv1alpha1.TalosMachine, cd *candidate, all []*candidate) error {
	if !slices.ContainsFunc(cd.addrs, func(a netip.Addr) bool { return a.String() == m.Spec.Address }) {
		before := m.DeepCopy()
		m.Spec.Address = cd.addrs[0].String()

		if err := s.r.Client.Patch(ctx, m, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("updating the address of TalosMachine %s: %w", m.Name, err)
		}
	}

	before := m.DeepCopy()
	if m.Status.MaintenanceFingerprint == "" {
		m.Status.MaintenanceFingerprint = cd.res.Fingerprint
	}

	s.fillStatus(m, cd, all)

	if err := s.r.Client.Status().Patch(ctx, m, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("writing the status of TalosMachine %s: %w", m.Name, err)
	}

	return nil
}

func (s *scan) fillStatus(m *ichorv1alpha1.TalosMachine, cd *candidate, all []*candidate) {
	res := cd.res
	m.Status.Stage = ichorv1alpha1.StageMaintenance
	m.Status.TalosVersion = res.TalosVersion
	m.Status.Hardware = res.Hardware
	m.Status.SecureBoot = res.SecureBoot

	cond := s.conflict(m.Name, cd, all, m.Spec.Address)
	cond.ObservedGeneration = m.Generation
	apimeta.SetStatusCondition(&m.Status.Conditions, cond)
}

func unreachableMessage(err error) string {
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "the node did not answer in time: " + msg
	}

	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}

	return msg
}

func (s *scan) set(addr, result, machine, msg string) {
	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}

	s.results[addr] = ichorv1alpha1.DiscoveryResult{
		Address: addr, Result: result, Machine: machine, Message: msg, ProbedAt: metav1.NewTime(s.now),
	}
}

// setStatus sets status.discovery and status.pendingMachines, the fields of
// the cluster's status discovery owns; the skeleton writes them.
func (s *scan) setStatus(full bool, explicit []netip.Addr, message string) {
	c := s.cluster
	results := s.results

	if !full {
		// A recheck adds what answered to the last full scan's results.
		merged := map[string]ichorv1alpha1.DiscoveryResult{}
		for k, v := range s.previous {
			merged[k] = v
		}

		for k, v := range results {
			if v.Result != ichorv1alpha1.DiscoveryResultUnreachable || merged[k].Address != "" {
				merged[k] = v
			}
		}

		results = merged
		message = c.Status.Discovery.Message
	}

	out := make([]ichorv1alpha1.DiscoveryResult, 0, len(results))
	seen := map[string]bool{}

	for _, a := range explicit {
		if e, ok := results[a.String()]; ok {
			out = append(out, e)
			seen[a.String()] = true
		}
	}

	var rest []ichorv1alpha1.DiscoveryResult

	for k, v := range results {
		if !seen[k] {
			rest = append(rest, v)
		}
	}

	slices.SortFunc(rest, func(a, b ichorv1alpha1.DiscoveryResult) int {
		pa, erra := netip.ParseAddr(a.Address)
		pb, errb := netip.ParseAddr(b.Address)

		if erra != nil || errb != nil {
			return strings.Compare(a.Address, b.Address)
		}

		return pa.Compare(pb)
	})

	out = append(out, rest...)
	if len(out) > maxResults {
		out = out[:maxResults]
	}

	c.Status.Discovery.Addresses = out
	c.Status.Discovery.Message = message

	if full {
		t := metav1.NewTime(s.now)
		c.Status.Discovery.LastScanTime = &t
	}

	c.Status.PendingMachines = s.pending()
}

// pending counts the cluster's pending machines, those created in this run included.
func (s *scan) pending() int32 {
	names := slices.Clone(s.created)

	for i := range s.machines {
		m := &s.machines[i]
		if s.mine(m) && m.Spec.Approval.State == ichorv1alpha1.ApprovalPending && m.DeletionTimestamp.IsZero() {
			names = append(names, m.Name)
		}
	}

	slices.Sort(names)

	return int32(len(slices.Compact(names))) //nolint:gosec // bounded by the number of machines
}
