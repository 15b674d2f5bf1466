package machinestate

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = ichorv1alpha1.AddToScheme(scheme)
	var err error
	env, err = testenv.Start(testenv.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test API server: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// TestPaceStretchesWithTheFleet: a small fleet is looked at every period; a
// fleet too large for the rate is looked at once per n/rate, plus at most a
// fifth of jitter; the count is kept for a while, then read again.
func TestPaceStretchesWithTheFleet(t *testing.T) {
	ctx := context.Background()
	for i := range 20 {
		m := &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("pace-%02d", i)},
			Spec: ichorv1alpha1.TalosMachineSpec{
				ClusterName: "pace", Role: ichorv1alpha1.RoleWorker, Address: fmt.Sprintf("10.8.0.%d", i+1),
				Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
			},
		}
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	within := func(d, lo time.Duration) bool { return d >= lo && d <= lo+lo/5 }

	small := &Pace{Reader: env.Client, Rate: 10}
	if d := small.Every(ctx, 30*time.Second); !within(d, 30*time.Second) {
		t.Errorf("20 machines at 10 looks/s, period 30 s: every %s, want 30–36 s", d)
	}

	large := &Pace{Reader: env.Client, Rate: 0.5}
	if d := large.Every(ctx, 30*time.Second); !within(d, 40*time.Second) {
		t.Errorf("20 machines at 0.5 looks/s, period 30 s: every %s, want 40–48 s (20 / 0.5)", d)
	}

	none := &Pace{Rate: 0.5}
	if d := none.Every(ctx, 30*time.Second); !within(d, 30*time.Second) {
		t.Errorf("no reader: every %s, want the period", d)
	}

	// The count is kept for countEvery: machines created now do not move it.
	for i := 20; i < 30; i++ {
		m := &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("pace-%02d", i)},
			Spec: ichorv1alpha1.TalosMachineSpec{
				ClusterName: "pace", Role: ichorv1alpha1.RoleWorker, Address: fmt.Sprintf("10.8.0.%d", i+1),
				Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
			},
		}
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if d := large.Every(ctx, 30*time.Second); !within(d, 40*time.Second) {
		t.Errorf("counted again before countEvery: every %s, want 40–48 s", d)
	}
	large.mu.Lock()
	large.at = large.at.Add(-countEvery)
	large.mu.Unlock()
	if d := large.Every(ctx, 30*time.Second); !within(d, 60*time.Second) {
		t.Errorf("30 machines at 0.5 looks/s after countEvery: every %s, want 60–72 s", d)
	}
}
