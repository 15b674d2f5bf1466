package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func TestScanCreatesOnePendingMachinePerMaintenanceNodeAndNoDuplicates(t *testing.T) {
	ctx := context.Background()
	c := testCluster("scan", ichorv1alpha1.DiscoverySpec{Subnets: []string{scanSubnet}})
	testenv.Must(t, k8s.Create(ctx, c))

	var first []ichorv1alpha1.TalosMachine

	testenv.Eventually(t, waitTimeout, "three pending machines", func() error {
		first = machinesOf(t, "scan")
		if len(first) != 3 {
			return fmt.Errorf("%d machines", len(first))
		}

		for _, m := range first {
			if m.Status.MaintenanceFingerprint == "" {
				return fmt.Errorf("%s has no status yet", m.Name)
			}
		}

		return nil
	})

	byAddress := map[string]ichorv1alpha1.TalosMachine{}
	for _, m := range first {
		byAddress[m.Spec.Address] = m
	}

	for _, name := range []string{"scan-1", "scan-2", "scan-3"} {
		em := emMachine(name)
		info := em.Info()

		m, ok := byAddress[em.IP()]
		if !ok {
			t.Fatalf("no TalosMachine for %s at %s", name, em.IP())
		}

		if m.Spec.ClusterName != "scan" || m.Spec.Approval.State != ichorv1alpha1.ApprovalPending || !strings.HasPrefix(m.Name, "scan-") {
			t.Errorf("%s: cluster %q approval %q name %q, want scan, pending, scan-<hash>", name, m.Spec.ClusterName, m.Spec.Approval.State, m.Name)
		}

		if m.Spec.Identity.UUID != info.UUID || m.Spec.Identity.Serial != info.Serial || !slices.Equal(m.Spec.Identity.MACAddresses, info.MACs) {
			t.Errorf("%s: identity %+v, want uuid %s serial %s MACs %v", name, m.Spec.Identity, info.UUID, info.Serial, info.MACs)
		}

		if m.Status.MaintenanceFingerprint != em.MaintenanceFingerprint() {
			t.Errorf("%s: fingerprint %q, want %q", name, m.Status.MaintenanceFingerprint, em.MaintenanceFingerprint())
		}

		if m.Status.Stage != ichorv1alpha1.StageMaintenance || m.Status.TalosVersion != "v1.14.1" {
			t.Errorf("%s: stage %q version %q, want maintenance v1.14.1", name, m.Status.Stage, m.Status.TalosVersion)
		}

		hw := m.Status.Hardware
		if len(hw.Disks) != 1 || hw.Disks[0].WWID == "" || hw.Disks[0].DevicePath != "/dev/nvme0n1" || hw.Disks[0].SizeBytes <= 0 ||
			len(hw.Links) != 1 || hw.Links[0].PermanentMAC != info.MACs[0] {
			t.Errorf("%s: hardware %+v, want the NVMe disk with a WWID and the link with its permanent MAC", name, hw)
		}

		if cond := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition); cond == nil || cond.Status != metav1.ConditionFalse {
			t.Errorf("%s: IdentityConflict %+v, want False", name, cond)
		}

		if r := resultFor(t, "scan", em.IP()); r.Result != ichorv1alpha1.DiscoveryResultPending || r.Machine != m.Name {
			t.Errorf("%s: result %+v, want Pending naming %s", name, r, m.Name)
		}
	}

	if m := byAddress["127.77.16.1"]; m.Status.Hardware.Manufacturer != "Acme" || m.Status.Hardware.ProductName != "Box" {
		t.Errorf("manufacturer/product %q/%q, want Acme/Box", m.Status.Hardware.Manufacturer, m.Status.Hardware.ProductName)
	}

	// The SecureBoot state the node reports decides its installer (render.SecureBootInstaller).
	for addr, want := range map[string]bool{"127.77.16.1": true, "127.77.16.2": false} {
		if sb := byAddress[addr].Status.SecureBoot; sb == nil || *sb != want {
			t.Errorf("%s: status.secureBoot %v, want %t", addr, sb, want)
		}
	}

	cl := getCluster(t, "scan")
	if cl.Status.PendingMachines != 3 || cl.Status.Discovery.LastScanTime == nil {
		t.Errorf("pendingMachines %d lastScanTime %v, want 3 and a time", cl.Status.PendingMachines, cl.Status.Discovery.LastScanTime)
	}

	firstScan := cl.Status.Discovery.LastScanTime.Time

	// A second scan: a spec change makes one at once. The timestamps have a
	// resolution of one second, so let one pass first.
	time.Sleep(1100 * time.Millisecond)

	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Discovery.Interval = &metav1.Duration{Duration: 2 * time.Hour}
	testenv.Must(t, k8s.Patch(ctx, cl, patch))

	testenv.Eventually(t, waitTimeout, "a second scan", func() error {
		if c := getCluster(t, "scan"); !c.Status.Discovery.LastScanTime.After(firstScan) {
			return errors.New("not yet")
		}

		return nil
	})

	second := machinesOf(t, "scan")
	if len(second) != 3 {
		t.Fatalf("after a second scan %d machines, want the same 3", len(second))
	}

	for _, m := range second {
		if !slices.ContainsFunc(first, func(o ichorv1alpha1.TalosMachine) bool { return o.UID == m.UID }) {
			t.Errorf("machine %s is new after the second scan", m.Name)
		}
	}
}

func TestEmptyUUIDIsPendingWithWeakIdentity(t *testing.T) {
	em := emMachine("weak")
	testenv.Must(t, k8s.Create(context.Background(), testCluster("weak", ichorv1alpha1.DiscoverySpec{Addresses: []string{em.IP()}})))

	m := onlyMachine(t, "weak")

	cond := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ichorv1alpha1.WeakIdentityReason {
		t.Fatalf("IdentityConflict %+v, want True WeakIdentity", cond)
	}

	for _, want := range []string{em.IP(), em.Info().MACs[0], "WEAK-1", "NoName"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q does not show %q", cond.Message, want)
		}
	}

	if m.Spec.Approval.State != ichorv1alpha1.ApprovalPending || m.Spec.Identity.UUID != "" {
		t.Errorf("approval %q uuid %q, want pending and no UUID", m.Spec.Approval.State, m.Spec.Identity.UUID)
	}

	if r := resultFor(t, "weak", em.IP()); r.Result != ichorv1alpha1.DiscoveryResultConflict || r.Machine != m.Name || !strings.Contains(r.Message, "no SMBIOS UUID") {
		t.Errorf("result %+v, want Conflict naming %s", r, m.Name)
	}
}

func TestUUIDOfAnotherMachineIsPendingWithDuplicateIdentity(t *testing.T) {
	ctx := context.Background()
	em := emMachine("dup")

	// A live machine already holds the UUID, with other hardware.
	now := metav1.Now()
	holder := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "uuid-holder", Labels: map[string]string{ichorv1alpha1.ClusterLabel: "elsewhere"}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "elsewhere",
			Identity:    ichorv1alpha1.MachineIdentity{UUID: em.UUID(), Serial: "OTHER", MACAddresses: []string{"0a:ff:00:00:00:01"}},
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        ichorv1alpha1.RoleWorker,
		},
	}
	testenv.Must(t, k8s.Create(ctx, holder))
	waitCached(t, holder)

	testenv.Must(t, k8s.Create(ctx, testCluster("dup", ichorv1alpha1.DiscoverySpec{Addresses: []string{em.IP()}})))

	m := onlyMachine(t, "dup")

	cond := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.IdentityConflictCondition)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ichorv1alpha1.DuplicateIdentityReason {
		t.Fatalf("IdentityConflict %+v, want True DuplicateIdentity", cond)
	}

	for _, want := range []string{"uuid-holder", em.UUID(), em.IP(), "DUP-1"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("message %q does not show %q", cond.Message, want)
		}
	}

	if m.Name == holder.Name || m.Spec.Identity.Serial != "DUP-1" {
		t.Errorf("machine %s identity %+v: want a new pending machine with the node's own identity", m.Name, m.Spec.Identity)
	}
}

func TestConfiguredNodeIsAlreadyConfiguredAndCreatesNothing(t *testing.T) {
	em := emMachine("configured")
	testenv.Must(t, k8s.Create(context.Background(), testCluster("configured", ichorv1alpha1.DiscoverySpec{Addresses: []string{em.IP()}})))

	r := resultFor(t, "configured", em.IP())
	if r.Result != ichorv1alpha1.DiscoveryResultAlreadyConfigured || r.Machine != "" || !strings.Contains(r.Message, "reclaim") {
		t.Fatalf("result %+v, want AlreadyConfigured pointing at a reclaim", r)
	}

	testenv.Eventually(t, waitTimeout, "an AlreadyConfigured Event", func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}

		for _, e := range list.Items {
			if e.Regarding.Kind == "TalosCluster" && e.Regarding.Name == "configured" && e.Reason == ichorv1alpha1.DiscoveryResultAlreadyConfigured &&
				e.Type == "Warning" && strings.Contains(e.Note, em.IP()) {
				return nil
			}
		}

		return errors.New("none")
	})

	if ms := machinesOf(t, "configured"); len(ms) != 0 {
		t.Errorf("%d machines created for a configured node", len(ms))
	}
}

func TestUnreachableAddressIsReported(t *testing.T) {
	testenv.Must(t, k8s.Create(context.Background(), testCluster("unreachable", ichorv1alpha1.DiscoverySpec{Addresses: []string{nobody}})))

	r := resultFor(t, "unreachable", nobody)
	if r.Result != ichorv1alpha1.DiscoveryResultUnreachable || r.Message == "" || r.ProbedAt.IsZero() {
		t.Fatalf("result %+v, want Unreachable with a message and a time", r)
	}

	if ms := machinesOf(t, "unreachable"); len(ms) != 0 {
		t.Errorf("%d machines created", len(ms))
	}
}

func TestAddByAddress(t *testing.T) {
	ctx := context.Background()
	em := emMachine("added")

	c := testCluster("add", ichorv1alpha1.DiscoverySpec{})
	testenv.Must(t, k8s.Create(ctx, c))

	// The first reconcile finds nothing to do; then an address is added, as
	// `ichor cluster discovery add` does.
	testenv.Eventually(t, waitTimeout, "the first reconcile", func() error {
		if getCluster(t, "add").Status.Discovery.LastScanTime == nil {
			return errors.New("not yet")
		}

		return nil
	})

	c = getCluster(t, "add")
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Discovery.Addresses = []string{em.IP()}
	testenv.Must(t, k8s.Patch(ctx, c, patch))

	r := resultFor(t, "add", em.IP())
	m := onlyMachine(t, "add")

	if r.Result != ichorv1alpha1.DiscoveryResultPending || r.Machine != m.Name {
		t.Fatalf("result %+v, want Pending naming %s", r, m.Name)
	}

	if m.Spec.Address != em.IP() || m.Spec.Identity.UUID != em.UUID() {
		t.Errorf("machine %+v, want the node's address and UUID", m.Spec)
	}
}

func TestApprovedMachineInMaintenanceIsNotDuplicated(t *testing.T) {
	ctx := context.Background()
	em := emMachine("approved")
	info := em.Info()

	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approved-one", Labels: map[string]string{ichorv1alpha1.ClusterLabel: "approved"}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "approved",
			Identity:    ichorv1alpha1.MachineIdentity{UUID: info.UUID, Serial: info.Serial, MACAddresses: info.MACs},
			Address:     em.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        ichorv1alpha1.RoleWorker,
		},
	}
	testenv.Must(t, k8s.Create(ctx, tm))
	waitCached(t, tm)

	testenv.Must(t, k8s.Create(ctx, testCluster("approved", ichorv1alpha1.DiscoverySpec{Addresses: []string{em.IP()}})))

	if r := resultFor(t, "approved", em.IP()); r.Result != ichorv1alpha1.DiscoveryResultKnown || r.Machine != "approved-one" {
		t.Fatalf("result %+v, want Known naming approved-one", r)
	}

	if ms := machinesOf(t, "approved"); len(ms) != 1 {
		t.Errorf("%d machines, want only the approved one", len(ms))
	}

	got := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(tm), got))

	if got.Status.MaintenanceFingerprint != "" || got.Status.Stage != "" {
		t.Errorf("discovery wrote the status of an approved machine: %+v", got.Status)
	}
}

func TestRemovedMachineReappearsAsPending(t *testing.T) {
	ctx := context.Background()
	em := emMachine("returner")
	testenv.Must(t, k8s.Create(ctx, testCluster("returner", ichorv1alpha1.DiscoverySpec{Addresses: []string{em.IP()}})))

	m := onlyMachine(t, "returner")
	testenv.Must(t, k8s.Delete(ctx, &m))

	// No spec change and an hour's interval: only the deletion can bring it back.
	testenv.Eventually(t, waitTimeout, "the machine back as pending", func() error {
		ms := machinesOf(t, "returner")
		if len(ms) != 1 || ms[0].UID == m.UID || ms[0].Status.MaintenanceFingerprint == "" {
			return fmt.Errorf("%d machines", len(ms))
		}

		if ms[0].Name != m.Name {
			return fmt.Errorf("name %s, want the same deterministic name %s", ms[0].Name, m.Name)
		}

		return nil
	})
}

// onlyMachine waits for exactly one machine of the cluster with its status written.
func onlyMachine(t testing.TB, cluster string) ichorv1alpha1.TalosMachine {
	t.Helper()

	var out ichorv1alpha1.TalosMachine

	testenv.Eventually(t, waitTimeout, "one machine of "+cluster, func() error {
		ms := machinesOf(t, cluster)
		if len(ms) != 1 {
			return fmt.Errorf("%d machines", len(ms))
		}

		if ms[0].Status.MaintenanceFingerprint == "" {
			return errors.New("no status yet")
		}

		out = ms[0]

		return nil
	})

	return out
}

func getCluster(t testing.TB, name string) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, c))

	return c
}
