package initflow

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/kube"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// suite is the package's API server (real kube-apiserver and etcd, Ichor's CRDs).
var suite *testenv.Suite

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(_ context.Context, s *testenv.Suite) (func(), error) {
		suite = s

		return nil, nil
	}))
}

// syncBuffer is a bytes.Buffer the step's progress and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.b.String()
}

// TestNetworkPoliciesStep: init's last step follows NetworkPoliciesApplied
// only when the API server serves Cilium's CRD; otherwise it says so, names
// how to follow it and ends at once. Served, it waits for True, and a
// condition that stays False is reported with its reason when the wait
// runs out, never failing init.
func TestNetworkPoliciesStep(t *testing.T) {
	ctx := t.Context()
	c := suite.Env.Client

	ns := "initflow-netpol"
	testenv.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	cluster := testenv.TalosCluster(ns, "home")
	testenv.Must(t, c.Create(ctx, cluster))

	conn := &kube.Conn{Config: suite.Env.Config, Namespace: ns}

	wc, err := client.NewWithWatch(suite.Env.Config, client.Options{Scheme: suite.Scheme})
	testenv.Must(t, err)

	conn.Client = wc

	// run runs the step, printing into out; step runs it and returns what it printed.
	run := func(out *syncBuffer, timeout time.Duration) error {
		k := &kubeSteps{conn: conn, s: &state{o: Options{Namespace: ns, Cluster: cluster.Name, Timeout: timeout}, p: NewProgress(out, false)}}

		return k.networkPolicies(ctx)
	}

	step := func(timeout time.Duration) (string, time.Duration) {
		out := &syncBuffer{}
		start := time.Now()

		if err := run(out, timeout); err != nil {
			t.Fatalf("the step failed init: %v", err)
		}

		return out.String(), time.Since(start)
	}

	t.Run("CRDNotServed", func(t *testing.T) {
		out, took := step(time.Minute)
		for _, want := range []string{"does not serve ciliumnetworkpolicies.cilium.io yet", "kubectl describe taloscluster home -n " + ns} {
			if !strings.Contains(out, want) {
				t.Fatalf("the step's output lacks %q:\n%s", want, out)
			}
		}

		// it did not wait for a condition nobody can set yet
		if took >= time.Minute {
			t.Fatalf("the step waited %s without the CRD", took)
		}
	})

	scheme := runtime.NewScheme()
	testenv.Must(t, apiextensionsv1.AddToScheme(scheme))

	admin, err := client.New(suite.Env.Config, client.Options{Scheme: scheme})
	testenv.Must(t, err)

	crd := testenv.CiliumNetworkPolicyCRD(t, "v1.19.3")
	testenv.Must(t, admin.Create(ctx, crd))
	testenv.Eventually(t, time.Minute, "Cilium's CRD served", func() error {
		served, err := servesCNP(suite.Env.Config)
		if err != nil {
			return err
		}

		if !served {
			return errors.New("not served")
		}

		return nil
	})

	setCondition := func(status metav1.ConditionStatus, reason, msg string) {
		testenv.UpdateStatus(t, c, cluster, func(cur *ichorv1alpha1.TalosCluster) {
			apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
				Type: ichorv1alpha1.NetworkPoliciesAppliedCondition, Status: status, Reason: reason, Message: msg,
			})
		})
	}

	t.Run("StaysFalse", func(t *testing.T) {
		setCondition(metav1.ConditionFalse, ichorv1alpha1.NetworkPoliciesFailedReason, "applying ichor-controller: boom")

		out, _ := step(3 * time.Second)
		if !strings.Contains(out, "are not in place yet (NetworkPoliciesApplied False, "+ichorv1alpha1.NetworkPoliciesFailedReason+": applying ichor-controller: boom)") {
			t.Fatalf("the step did not report the condition that stayed False:\n%s", out)
		}
	})

	t.Run("TurnsTrue", func(t *testing.T) {
		setCondition(metav1.ConditionFalse, ichorv1alpha1.CiliumCRDMissingReason, "not yet")

		buf := &syncBuffer{}
		done := make(chan error, 1)

		go func() { done <- run(buf, time.Minute) }()

		// the step follows the condition while it is False…
		testenv.EventuallyOK(t, 30*time.Second, "the step reporting the False condition", func() (bool, string) {
			o := buf.String()

			return strings.Contains(o, "NetworkPoliciesApplied False, "+ichorv1alpha1.CiliumCRDMissingReason), o
		})

		// …and ends once it turns True
		setCondition(metav1.ConditionTrue, ichorv1alpha1.NetworkPoliciesInPlaceReason, "applied ichor-controller-egress")
		testenv.Must(t, <-done)

		out := buf.String()
		if strings.Contains(out, "not in place") || !strings.Contains(out, "NetworkPoliciesApplied True, "+ichorv1alpha1.NetworkPoliciesInPlaceReason) {
			t.Fatalf("the step did not follow the condition to True:\n%s", out)
		}
	})
}
