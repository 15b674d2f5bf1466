package clusterstatus

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var k8s client.Client

// testClock is the reconciler's clock: tests move it to bring a CA near its expiry.
var testClock = clocktesting.NewFakePassiveClock(time.Now())

const ns = "default"

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		mgr, err := s.NewManager()
		if err != nil {
			return nil, err
		}

		if err := (&Reconciler{Clock: testClock}).SetupWithManager(mgr); err != nil {
			return nil, err
		}

		return nil, testenv.StartManager(ctx, mgr)
	}))
}

func machine(name, cluster, role, state, talos string, ready bool) ichorv1alpha1.TalosMachine {
	m := ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: cluster, Role: role, Identity: ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Approval: ichorv1alpha1.MachineApproval{State: state},
		},
	}
	if state != ichorv1alpha1.ApprovalPending {
		m.Spec.Approval.DecidedBy = "admin"
		m.Spec.Approval.DecidedAt = &metav1.Time{Time: time.Now().Truncate(time.Second)}
	}
	m.Status.TalosVersion = talos
	st := metav1.ConditionFalse
	if ready {
		st = metav1.ConditionTrue
	}
	m.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ReadyCondition, Status: st, Reason: "Test", LastTransitionTime: metav1.Now()}}
	return m
}

func TestSummarise(t *testing.T) {
	c := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Generation: 3}}
	c.Spec.ControlPlane.Count = 3
	cp, w := ichorv1alpha1.RoleControlPlane, ichorv1alpha1.RoleWorker
	ok := ichorv1alpha1.ApprovalApproved
	for _, tc := range []struct {
		name     string
		machines []ichorv1alpha1.TalosMachine
		cps, ws  ichorv1alpha1.MachineCounts
		status   metav1.ConditionStatus
		reason   string
		talos    string
		contains []string
	}{
		{"nothing approved", []ichorv1alpha1.TalosMachine{machine("p", "prod", "", ichorv1alpha1.ApprovalPending, "", false)},
			ichorv1alpha1.MachineCounts{}, ichorv1alpha1.MachineCounts{}, metav1.ConditionFalse, ichorv1alpha1.NoControlPlaneReadyReason, "", []string{"0/0 control planes"}},
		{"all ready", []ichorv1alpha1.TalosMachine{
			machine("cp-1", "prod", cp, ok, "v1.14.1", true), machine("cp-2", "prod", cp, ok, "v1.13.4", true),
			machine("w-1", "prod", w, ok, "v1.14.1", true), machine("other", "staging", w, ok, "v1.10.0", false),
		}, ichorv1alpha1.MachineCounts{Approved: 2, Ready: 2}, ichorv1alpha1.MachineCounts{Approved: 1, Ready: 1},
			metav1.ConditionTrue, ichorv1alpha1.AllMachinesReadyReason, "v1.13.4", []string{"2/2 control planes and 1/1 workers Ready", "declares 3"}},
		{"a worker not ready", []ichorv1alpha1.TalosMachine{
			machine("cp-1", "prod", cp, ok, "v1.14.1", true), machine("w-2", "prod", w, ok, "", false), machine("w-1", "prod", w, ok, "v1.14.1", true),
		}, ichorv1alpha1.MachineCounts{Approved: 1, Ready: 1}, ichorv1alpha1.MachineCounts{Approved: 2, Ready: 1},
			metav1.ConditionFalse, ichorv1alpha1.MachinesNotReadyReason, "v1.14.1", []string{"not Ready: w-2"}},
		{"no control plane ready", []ichorv1alpha1.TalosMachine{machine("cp-1", "prod", cp, ok, "v1.14.1", false)},
			ichorv1alpha1.MachineCounts{Approved: 1}, ichorv1alpha1.MachineCounts{}, metav1.ConditionFalse, ichorv1alpha1.NoControlPlaneReadyReason, "v1.14.1", []string{"0/1 control planes"}},
		{"many not ready are cut", func() []ichorv1alpha1.TalosMachine {
			out := make([]ichorv1alpha1.TalosMachine, 0, 8)
			out = append(out, machine("cp-1", "prod", cp, ok, "", true))
			for i := range 7 {
				out = append(out, machine(fmt.Sprintf("w-%d", i), "prod", w, ok, "", false))
			}
			return out
		}(), ichorv1alpha1.MachineCounts{Approved: 1, Ready: 1}, ichorv1alpha1.MachineCounts{Approved: 7}, metav1.ConditionFalse, ichorv1alpha1.MachinesNotReadyReason, "",
			[]string{"w-0, w-1, w-2, w-3, w-4, and 2 more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.DeepCopy()
			Summarise(got, tc.machines)
			if got.Status.ControlPlanes != tc.cps || got.Status.Workers != tc.ws || got.Status.TalosVersion != tc.talos {
				t.Errorf("counts %+v %+v, version %q", got.Status.ControlPlanes, got.Status.Workers, got.Status.TalosVersion)
			}
			cond := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition)
			if cond == nil || cond.Status != tc.status || cond.Reason != tc.reason || cond.ObservedGeneration != 3 {
				t.Fatalf("Ready: %+v", cond)
			}
			for _, want := range tc.contains {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("message %q lacks %q", cond.Message, want)
				}
			}
		})
	}
}

func create(t *testing.T, m ichorv1alpha1.TalosMachine) {
	t.Helper()
	status := m.Status
	if err := k8s.Create(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	m.Status = status
	if err := k8s.Status().Update(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
}

func newCluster(t *testing.T, name string, paused bool) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := testenv.TalosCluster(ns, name)
	c.Spec.Endpoint.Host = "10.5.0.10"
	c.Spec.Paused = paused
	testenv.Must(t, k8s.Create(context.Background(), c))

	return c
}

func getCluster(t *testing.T, name string) *ichorv1alpha1.TalosCluster {
	t.Helper()

	got := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, got))

	return got
}

// readyIs waits for the Ready condition of cluster to have status want and a
// message containing contains.
func readyIs(t *testing.T, cluster string, want metav1.ConditionStatus, contains string) {
	t.Helper()

	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s Ready %s (%q)", cluster, want, contains), func() error {
		got := getCluster(t, cluster)
		cond := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition)
		if cond == nil || cond.Status != want || !strings.Contains(cond.Message, contains) {
			return fmt.Errorf("Ready %+v, counts %+v %+v", cond, got.Status.ControlPlanes, got.Status.Workers)
		}

		return nil
	})
}

func updateMachine(t *testing.T, name string, change func(m *ichorv1alpha1.TalosMachine), status bool) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m); err != nil {
			return err
		}

		change(m)

		if status {
			return k8s.Status().Update(context.Background(), m)
		}

		return k8s.Update(context.Background(), m)
	}))
}

func setReady(ready metav1.ConditionStatus) func(m *ichorv1alpha1.TalosMachine) {
	return func(m *ichorv1alpha1.TalosMachine) {
		apimeta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.ReadyCondition, Status: ready, Reason: "Test", Message: "x"})
	}
}

// TestClusterStatusFollowsTheMachines: the reconciler summarises the
// machines, follows a machine turning not Ready, keeps conditions other
// controllers set, and writes nothing when the summary did not change.
func TestClusterStatusFollowsTheMachines(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, "prod", false)
	sibling := newCluster(t, "prod-sibling", false)

	// A condition another controller owns (the reconciler writes the status
	// at the same time: retry on a conflict, as a controller would).
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, c.Name)
		apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.TopologyTransitioningCondition, Status: metav1.ConditionFalse, Reason: "Stable", Message: "m"})

		return k8s.Status().Update(ctx, cur)
	}))
	create(t, machine("cp-1", "prod", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))
	create(t, machine("w-1", "prod", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))
	create(t, machine("sib-cp-1", sibling.Name, ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))

	readyIs(t, c.Name, metav1.ConditionTrue, "1/1 control planes and 1/1 workers Ready")
	readyIs(t, sibling.Name, metav1.ConditionTrue, "1/1 control planes")

	if apimeta.FindStatusCondition(getCluster(t, c.Name).Status.Conditions, ichorv1alpha1.TopologyTransitioningCondition) == nil {
		t.Fatal("another controller's condition was dropped")
	}

	// A change of a machine that does not touch the summary writes nothing.
	// The marker that its reconcile ran: a later change of the sibling
	// cluster's machine shows in the sibling (one worker, first in first out).
	rv := getCluster(t, c.Name).ResourceVersion

	updateMachine(t, "w-1", func(m *ichorv1alpha1.TalosMachine) { m.Labels = map[string]string{"touched": "yes"} }, false)
	updateMachine(t, "sib-cp-1", setReady(metav1.ConditionFalse), true)
	readyIs(t, sibling.Name, metav1.ConditionFalse, "0/1 control planes")

	if now := getCluster(t, c.Name).ResourceVersion; now != rv {
		t.Errorf("an unchanged summary was written again: resourceVersion %s → %s", rv, now)
	}

	// The worker turns not Ready: the cluster says so and names it.
	updateMachine(t, "w-1", setReady(metav1.ConditionFalse), true)
	readyIs(t, c.Name, metav1.ConditionFalse, "not Ready: w-1")
}

// TestPausedStops_ClusterStatus: while a cluster's spec.paused is true the
// summary is not written (the Paused condition says why), and unpausing
// brings the summary up to date.
func TestPausedStops_ClusterStatus(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, "paused", true)
	sibling := newCluster(t, "paused-sibling", false)

	testenv.Eventually(t, 30*time.Second, "the Paused condition", func() error {
		if p := apimeta.FindStatusCondition(getCluster(t, c.Name).Status.Conditions, ichorv1alpha1.PausedCondition); p == nil || p.Status != metav1.ConditionTrue {
			return fmt.Errorf("Paused %+v", p)
		}

		return nil
	})

	create(t, machine("p-cp-1", c.Name, ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))
	// The marker: a machine of the sibling created after it is summarised.
	create(t, machine("ps-cp-1", sibling.Name, ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))
	readyIs(t, sibling.Name, metav1.ConditionTrue, "1/1 control planes")

	if got := getCluster(t, c.Name); got.Status.ControlPlanes.Approved != 0 || apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition) != nil {
		t.Fatalf("a paused cluster was summarised: %+v", got.Status)
	}

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, c.Name)
		cur.Spec.Paused = false

		return k8s.Update(ctx, cur)
	}))

	readyIs(t, c.Name, metav1.ConditionTrue, "1/1 control planes")

	if p := apimeta.FindStatusCondition(getCluster(t, c.Name).Status.Conditions, ichorv1alpha1.PausedCondition); p != nil {
		t.Errorf("Paused is still there after unpausing: %+v", p)
	}
}

// status.certificates carries the expiry of the bundle's CAs once the
// bundle Secret exists, and nothing of the bundle but those times.
func TestCertificatesFromTheBundle(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, "certs", false)
	readyIs(t, "certs", metav1.ConditionFalse, "0/0 control planes")
	if got := getCluster(t, "certs"); got.Status.Certificates.TalosCAExpiry != nil ||
		apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.CertificatesExpiringCondition) != nil {
		t.Fatalf("no bundle yet, but status.certificates %+v and conditions %+v", got.Status.Certificates, got.Status.Conditions)
	}

	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	b, err := bundle.Generate(secrets.NewFixedClock(now), c.Spec.VersionContract)
	testenv.Must(t, err)
	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	testenv.Must(t, err)
	testenv.Must(t, k8s.Create(ctx, sec))
	// A machine's change wakes the summary; the bundle Secret is not watched.
	create(t, machine("certs-cp", "certs", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))

	want := now.Add(secrets.CAValidityTime)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := getCluster(t, "certs").Status.Certificates
		if got.TalosCAExpiry != nil && got.KubernetesCAExpiry != nil && got.EtcdCAExpiry != nil && got.AggregatorCAExpiry != nil {
			for name, ts := range map[string]*metav1.Time{
				"talos": got.TalosCAExpiry, "kubernetes": got.KubernetesCAExpiry, "etcd": got.EtcdCAExpiry, "aggregator": got.AggregatorCAExpiry,
			} {
				if !ts.Time.Equal(want) {
					t.Errorf("%s CA expiry %v, want %v", name, ts.Time, want)
				}
			}
			if got.ClientCertificateExpiry != nil {
				t.Errorf("clientCertificateExpiry is set: %v", got.ClientCertificateExpiry)
			}
			// Ten years ahead: valid, and said so.
			expiringIs(t, "certs", metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason, "valid for more than 30 days")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.certificates never filled: %+v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expiringIs waits for the CertificatesExpiring condition of cluster to have
// status want, reason and a message containing each of contains.
func expiringIs(t *testing.T, cluster string, want metav1.ConditionStatus, reason string, contains ...string) *metav1.Condition {
	t.Helper()

	var cond *metav1.Condition

	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%s CertificatesExpiring %s %s", cluster, want, reason), func() error {
		got := getCluster(t, cluster)
		cond = apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.CertificatesExpiringCondition)
		if cond == nil || cond.Status != want || cond.Reason != reason || cond.ObservedGeneration != got.Generation {
			return fmt.Errorf("CertificatesExpiring %+v", cond)
		}

		for _, c := range contains {
			if !strings.Contains(cond.Message, c) {
				return fmt.Errorf("the message %q lacks %q", cond.Message, c)
			}
		}

		return nil
	})

	return cond
}

// poke changes the cluster's labels so the reconciler looks at it again.
func poke(t *testing.T, cluster, value string) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := getCluster(t, cluster)
		cur.Labels = map[string]string{"poked": value}

		return k8s.Update(context.Background(), cur)
	}))
}

// TestCertificatesExpiring: the CertificatesExpiring condition follows the
// reconciler's clock against the bundle's CAs. Forty days before they expire
// it is False; ten days before it is True and names each CA with its
// not-after and the way out (rotate-ca for the Talos API and Kubernetes CAs;
// the aggregator CA cannot be rotated by this release) but not the etcd CA,
// which expires a year later; once they have expired the reason says so.
// No key of the bundle reaches the message.
func TestCertificatesExpiring(t *testing.T) {
	ctx := context.Background()
	t.Cleanup(func() { testClock.SetTime(time.Now()) })

	c := newCluster(t, "expiring", false)

	// The bundle's CAs expire 100 days from now (machinery issues them for
	// secrets.CAValidityTime from its clock), its etcd CA a year after.
	issued := time.Now().Add(100*24*time.Hour - secrets.CAValidityTime).Truncate(time.Second).UTC()
	b, err := bundle.Generate(secrets.NewFixedClock(issued), c.Spec.VersionContract)
	testenv.Must(t, err)
	later, err := bundle.Generate(secrets.NewFixedClock(issued.Add(365*24*time.Hour)), c.Spec.VersionContract)
	testenv.Must(t, err)
	b.Certs.Etcd = later.Certs.Etcd
	notAfter := issued.Add(secrets.CAValidityTime)
	date := notAfter.Format(time.RFC3339)

	testClock.SetTime(notAfter.Add(-40 * 24 * time.Hour))
	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	testenv.Must(t, err)
	testenv.Must(t, k8s.Create(ctx, sec))
	poke(t, c.Name, "1")
	expiringIs(t, c.Name, metav1.ConditionFalse, ichorv1alpha1.CertificatesValidReason)

	if got := getCluster(t, c.Name).Status.Certificates; got.AggregatorCAExpiry == nil || !got.AggregatorCAExpiry.Time.Equal(notAfter) ||
		got.EtcdCAExpiry == nil || !got.EtcdCAExpiry.Time.Equal(notAfter.Add(365*24*time.Hour)) {
		t.Fatalf("status.certificates %+v, want the aggregator CA at %v and the etcd CA a year later", got, notAfter)
	}

	testClock.SetTime(notAfter.Add(-10 * 24 * time.Hour))
	poke(t, c.Name, "2")
	rotate := ": rotate it with `ichor cluster rotate-ca expiring`"
	cond := expiringIs(t, c.Name, metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiringReason,
		"the Talos API CA expires at "+date+rotate,
		"the Kubernetes CA expires at "+date+rotate,
		"the Kubernetes aggregator CA expires at "+date+": rotate it with `ichor cluster rotate-ca expiring --aggregator-only`")

	for _, not := range []string{"etcd", "BEGIN", "PRIVATE", string(b.Certs.OS.Key)} {
		if strings.Contains(cond.Message, not) {
			t.Errorf("the message %q holds %q", cond.Message, not)
		}
	}

	testClock.SetTime(notAfter.Add(time.Hour))
	poke(t, c.Name, "3")
	expiringIs(t, c.Name, metav1.ConditionTrue, ichorv1alpha1.CertificatesExpiredReason, "the Talos API CA expired at "+date+rotate)
}
