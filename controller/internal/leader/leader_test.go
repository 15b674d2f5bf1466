package leader

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/maeshinshin/ichor/tools/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(_ context.Context, s *testenv.Suite) (func(), error) {
		env = s.Env

		return func() {}, nil
	}))
}

// TestLeaseRenewedEveryRetryPeriod: a manager with these timings takes the
// Lease and renews it no more often than every RetryPeriod (client-go's
// default renews every 2 s: 1,800 writes an hour). The renewals are read
// from the Lease's renewTime, which the leader sets at each renewal; a busy
// machine only spaces them further.
func TestLeaseRenewedEveryRetryPeriod(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	const ns, id = "leader-timings", "leader-timings.ichor.maesh.dev"

	testenv.Must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	opts := ctrl.Options{
		Scheme:                  env.Client.Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          true,
		LeaderElectionID:        id,
		LeaderElectionNamespace: ns,
	}
	Apply(&opts)

	mgr, err := ctrl.NewManager(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	// three renewals after the one that took the Lease
	var renewals []time.Time

	testenv.Eventually(t, 4*RetryPeriod+RenewDeadline+time.Minute, "three renewals of the Lease", func() error {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: id}, &l); err != nil {
			return err
		}

		if r := l.Spec.RenewTime; r != nil && (len(renewals) == 0 || r.After(renewals[len(renewals)-1])) {
			renewals = append(renewals, r.Time)
		}

		if len(renewals) < 4 {
			return fmt.Errorf("%d renewal times seen", len(renewals))
		}

		return nil
	})

	for i := 1; i < len(renewals); i++ {
		// renewTime is a MicroTime written by the leader's clock; allow for rounding
		if gap := renewals[i].Sub(renewals[i-1]); gap < RetryPeriod-100*time.Millisecond {
			t.Errorf("renewal %d came %s after the one before it, want at least the retry period %s (all: %v)", i, gap, RetryPeriod, renewals)
		}
	}

	cancel()

	if err := <-done; err != nil {
		t.Errorf("the manager: %v", err)
	}
}
