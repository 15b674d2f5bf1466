package clusterstatus

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var k8s client.Client

const ns = "default"

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		mgr, err := s.NewManager()
		if err != nil {
			return nil, err
		}

		if err := (&Reconciler{}).SetupWithManager(mgr); err != nil {
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
			ichorv1alpha1.MachineCounts{}, ichorv1alpha1.MachineCounts{}, metav1.ConditionFalse, NoControlPlaneReason, "", []string{"0/0 control planes"}},
		{"all ready", []ichorv1alpha1.TalosMachine{
			machine("cp-1", "prod", cp, ok, "v1.14.1", true), machine("cp-2", "prod", cp, ok, "v1.13.4", true),
			machine("w-1", "prod", w, ok, "v1.14.1", true), machine("other", "staging", w, ok, "v1.10.0", false),
		}, ichorv1alpha1.MachineCounts{Approved: 2, Ready: 2}, ichorv1alpha1.MachineCounts{Approved: 1, Ready: 1},
			metav1.ConditionTrue, AllReadyReason, "v1.13.4", []string{"2/2 control planes and 1/1 workers Ready", "declares 3"}},
		{"a worker not ready", []ichorv1alpha1.TalosMachine{
			machine("cp-1", "prod", cp, ok, "v1.14.1", true), machine("w-2", "prod", w, ok, "", false), machine("w-1", "prod", w, ok, "v1.14.1", true),
		}, ichorv1alpha1.MachineCounts{Approved: 1, Ready: 1}, ichorv1alpha1.MachineCounts{Approved: 2, Ready: 1},
			metav1.ConditionFalse, MachinesNotReadyReason, "v1.14.1", []string{"not Ready: w-2"}},
		{"no control plane ready", []ichorv1alpha1.TalosMachine{machine("cp-1", "prod", cp, ok, "v1.14.1", false)},
			ichorv1alpha1.MachineCounts{Approved: 1}, ichorv1alpha1.MachineCounts{}, metav1.ConditionFalse, NoControlPlaneReason, "v1.14.1", []string{"0/1 control planes"}},
		{"many not ready are cut", func() []ichorv1alpha1.TalosMachine {
			out := make([]ichorv1alpha1.TalosMachine, 0, 8)
			out = append(out, machine("cp-1", "prod", cp, ok, "", true))
			for i := range 7 {
				out = append(out, machine(fmt.Sprintf("w-%d", i), "prod", w, ok, "", false))
			}
			return out
		}(), ichorv1alpha1.MachineCounts{Approved: 1, Ready: 1}, ichorv1alpha1.MachineCounts{Approved: 7}, metav1.ConditionFalse, MachinesNotReadyReason, "",
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

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
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

// TestClusterStatusFollowsTheMachines: the reconciler summarises the
// machines, follows a machine turning not Ready, keeps conditions other
// controllers set, and writes nothing when the summary did not change.
func TestClusterStatusFollowsTheMachines(t *testing.T) {
	ctx := context.Background()
	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:         ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.5.0.10"},
			SecretsBundleRef: ichorv1alpha1.SecretReference{Name: "prod-secrets"},
			ControlPlane:     ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:              ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
	if err := k8s.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	// A condition another controller owns (the reconciler writes the status
	// at the same time: retry on a conflict, as a controller would).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosCluster{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}
		apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.TopologyTransitioningCondition, Status: metav1.ConditionFalse, Reason: "Stable", Message: "m"})
		return k8s.Status().Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	create(t, machine("cp-1", "prod", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))
	create(t, machine("w-1", "prod", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved, "v1.14.1", true))

	get := func() *ichorv1alpha1.TalosCluster {
		got := &ichorv1alpha1.TalosCluster{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	ready := func(want metav1.ConditionStatus, contains string) func() error {
		return func() error {
			got := get()
			cond := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition)
			if cond == nil || cond.Status != want || !strings.Contains(cond.Message, contains) {
				return fmt.Errorf("Ready %+v, counts %+v %+v", cond, got.Status.ControlPlanes, got.Status.Workers)
			}
			if apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.TopologyTransitioningCondition) == nil {
				return fmt.Errorf("another controller's condition was dropped: %+v", got.Status.Conditions)
			}
			return nil
		}
	}
	eventually(t, "the cluster Ready", ready(metav1.ConditionTrue, "1/1 control planes and 1/1 workers Ready"))

	// A change of a machine that does not touch the summary writes nothing.
	rv := get().ResourceVersion
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-1"}, m); err != nil {
			return err
		}
		m.Labels = map[string]string{"touched": "yes"}
		return k8s.Update(ctx, m)
	}))
	time.Sleep(time.Second)
	if now := get().ResourceVersion; now != rv {
		t.Errorf("an unchanged summary was written again: resourceVersion %s → %s", rv, now)
	}

	// The worker turns not Ready: the cluster says so and names it.
	must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-1"}, m); err != nil {
			return err
		}
		apimeta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "NodeUnreachable", Message: "x"})
		return k8s.Status().Update(ctx, m)
	}))
	eventually(t, "the cluster not Ready, naming w-1", ready(metav1.ConditionFalse, "not Ready: w-1"))
}
