package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
)

// The API-server tests run against a real kube-apiserver and etcd (envtest,
// binaries from KUBEBUILDER_ASSETS, built by `go tool task assets`). contracts
// may not import tools/testenv (depguard), so the few lines are here.
var (
	envOnce   sync.Once
	env       *envtest.Environment
	envClient client.Client
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()

	if env != nil {
		if err := env.Stop(); err != nil {
			code = 1
		}
	}

	os.Exit(code)
}

func apiServer(t *testing.T) client.Client {
	t.Helper()

	envOnce.Do(func() {
		dir := os.Getenv("KUBEBUILDER_ASSETS")
		if dir == "" {
			envErr = errors.New("KUBEBUILDER_ASSETS is not set: build the binaries with `go tool task assets` and export KUBEBUILDER_ASSETS=$(go tool task assets:dir)")

			return
		}

		env = &envtest.Environment{
			BinaryAssetsDirectory: dir,
			// Ichor's CRDs, read from the repository (kustomize is their source of truth).
			CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "kustomize", "base", "crd")},
			ErrorIfCRDPathMissing: true,
		}

		cfg, err := env.Start()
		if err != nil {
			envErr = err
			env = nil

			return
		}

		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			envErr = err

			return
		}

		if err := ichorv1alpha1.AddToScheme(scheme); err != nil {
			envErr = err

			return
		}

		envClient, envErr = client.New(cfg, client.Options{Scheme: scheme})
	})

	if envErr != nil {
		t.Fatal(envErr)
	}

	return envClient
}

// namespace creates a namespace of its own for a test's Leases.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lock-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}

	return ns.Name
}

var prod = types.NamespacedName{Namespace: "team-a", Name: "prod"}

func TestContendersAgainstAPIServer(t *testing.T) {
	t.Parallel()

	c := apiServer(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(t0)
	l := &lock.Locker{Client: c, Namespace: namespace(t, c), Duration: time.Minute, Clock: clk}

	upgrade := lock.OperationIdentity("team-a", "upgrade")
	reboot := lock.OperationIdentity("team-a", "reboot")

	r, err := l.Acquire(ctx, prod, upgrade)
	if err != nil || !r.Acquired || r.Holder != upgrade {
		t.Fatalf("first contender: %+v %v", r, err)
	}

	// The loser waits with the holder named.
	r, err = l.Acquire(ctx, prod, reboot)
	if err != nil || r.Acquired || r.Holder != upgrade {
		t.Fatalf("second contender: %+v %v", r, err)
	}

	if h, err := l.Holder(ctx, prod); err != nil || h != upgrade {
		t.Fatalf("Holder = %q %v", h, err)
	}

	// Another cluster has its own lock.
	other := types.NamespacedName{Namespace: "team-a", Name: "staging"}
	if r, err := l.Acquire(ctx, other, reboot); err != nil || !r.Acquired {
		t.Fatalf("other cluster: %+v %v", r, err)
	}

	// The holder renews; after most of a duration the lease is still its own.
	clk.SetTime(t0.Add(50 * time.Second))

	if r, err := l.Acquire(ctx, prod, upgrade); err != nil || !r.Acquired {
		t.Fatalf("renew: %+v %v", r, err)
	}

	clk.SetTime(t0.Add(100 * time.Second))

	if r, err := l.Acquire(ctx, prod, reboot); err != nil || r.Acquired || r.Holder != upgrade {
		t.Fatalf("after renewal the lock must still be held: %+v %v", r, err)
	}

	// A release by someone else changes nothing; the holder's release frees it.
	if ok, err := l.Release(ctx, prod, reboot); err != nil || ok {
		t.Fatalf("release by a non-holder: %v %v", ok, err)
	}

	if ok, err := l.Release(ctx, prod, upgrade); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}

	if h, _ := l.Holder(ctx, prod); h != "" {
		t.Fatalf("holder after release: %q", h)
	}

	r, err = l.Acquire(ctx, prod, reboot)
	if err != nil || !r.Acquired || r.TakenOverFrom != "" {
		t.Fatalf("after release: %+v %v", r, err)
	}

	var got coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: lock.LeaseName(prod)}, &got); err != nil {
		t.Fatal(err)
	}

	if got.Labels[lock.LabelCluster] != "prod" || got.Labels[lock.LabelClusterNamespace] != "team-a" ||
		*got.Spec.LeaseDurationSeconds != 60 || !got.Spec.AcquireTime.Time.Equal(t0.Add(100*time.Second)) {
		t.Fatalf("stored Lease: %+v %+v", got.Labels, got.Spec)
	}
}

func TestExpiryAndTakeover(t *testing.T) {
	t.Parallel()

	c := apiServer(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(t0)
	l := &lock.Locker{Client: c, Namespace: namespace(t, c), Duration: time.Minute, Clock: clk}

	gone := lock.OperationIdentity("team-a", "gone")
	next := lock.OperationIdentity("team-a", "next")

	if _, err := l.Acquire(ctx, prod, gone); err != nil {
		t.Fatal(err)
	}

	clk.SetTime(t0.Add(59 * time.Second))

	if r, _ := l.Acquire(ctx, prod, next); r.Acquired {
		t.Fatal("taken before expiry")
	}

	clk.SetTime(t0.Add(61 * time.Second))

	r, err := l.Acquire(ctx, prod, next)
	if err != nil || !r.Acquired || r.TakenOverFrom != gone {
		t.Fatalf("expired lease: %+v %v", r, err)
	}

	var got coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: lock.LeaseName(prod)}, &got); err != nil {
		t.Fatal(err)
	}

	if got.Spec.LeaseTransitions == nil || *got.Spec.LeaseTransitions != 1 || *got.Spec.HolderIdentity != next {
		t.Fatalf("after takeover: %+v", got.Spec)
	}
}

func TestCheckerDecides(t *testing.T) {
	t.Parallel()

	c := apiServer(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(t0)

	paused := lock.OperationIdentity("team-a", "paused-on-failure")
	running := lock.OperationIdentity("team-a", "running")
	waiter := lock.MachineIdentity("team-a", "cp-4")

	state := map[string]lock.Liveness{paused: lock.Inactive, running: lock.Active}
	checked := map[string]int{}
	check := func(_ context.Context, id string) (lock.Liveness, error) {
		checked[id]++
		if id == "broken" {
			return lock.Unknown, errors.New("cannot read the operation")
		}

		return state[id], nil
	}

	ns := namespace(t, c)
	l := &lock.Locker{Client: c, Namespace: ns, Duration: time.Minute, Clock: clk, Check: check}

	// A holder paused on a failed step is taken over at once, lease fresh or not.
	if _, err := l.Acquire(ctx, prod, paused); err != nil {
		t.Fatal(err)
	}

	r, err := l.Acquire(ctx, prod, waiter)
	if err != nil || !r.Acquired || r.TakenOverFrom != paused {
		t.Fatalf("inactive holder: %+v %v", r, err)
	}

	// An active holder keeps the lock after its lease expired (the controller was down).
	cluster2 := types.NamespacedName{Namespace: "team-a", Name: "c2"}
	if _, err := l.Acquire(ctx, cluster2, running); err != nil {
		t.Fatal(err)
	}

	clk.SetTime(t0.Add(time.Hour))

	r, err = l.Acquire(ctx, cluster2, waiter)
	if err != nil || r.Acquired || r.Holder != running {
		t.Fatalf("active holder: %+v %v", r, err)
	}

	// A checker that fails takes nothing over and says so, naming the holder.
	cluster3 := types.NamespacedName{Namespace: "team-a", Name: "c3"}
	if _, err := l.Acquire(ctx, cluster3, "broken"); err != nil {
		t.Fatal(err)
	}

	clk.SetTime(t0.Add(2 * time.Hour))

	r, err = l.Acquire(ctx, cluster3, waiter)
	if err == nil || r.Acquired || r.Holder != "broken" {
		t.Fatalf("checker error: %+v %v", r, err)
	}

	// The holder itself is never checked.
	if checked[waiter] != 0 {
		t.Fatal("the caller's own identity was checked")
	}
}

// TestRace: contenders racing through the API server, one wins.
func TestRace(t *testing.T) {
	t.Parallel()

	c := apiServer(t)
	ctx := context.Background()
	l := &lock.Locker{Client: c, Namespace: namespace(t, c), Duration: time.Minute}

	const n = 8

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []string
		holders = map[string]bool{}
	)

	for i := range n {
		wg.Add(1)

		go func() {
			defer wg.Done()

			id := lock.OperationIdentity("team-a", fmt.Sprintf("op-%d", i))

			for {
				r, err := l.Acquire(ctx, prod, id)
				if errors.Is(err, lock.ErrConflict) {
					continue
				}

				mu.Lock()

				switch {
				case err != nil:
					t.Error(err)
				case r.Acquired:
					winners = append(winners, id)
				default:
					holders[r.Holder] = true
				}

				mu.Unlock()

				return
			}
		}()
	}

	wg.Wait()

	if len(winners) != 1 {
		t.Fatalf("%d winners: %v", len(winners), winners)
	}

	for h := range holders {
		if h != winners[0] {
			t.Fatalf("a loser was told %q holds the lock, the winner is %q", h, winners[0])
		}
	}
}

// TestClientChecker: the lock follows the holder's TalosOperation as stored
// in the API server.
func TestClientChecker(t *testing.T) {
	t.Parallel()

	c := apiServer(t)
	ctx := context.Background()
	ns := namespace(t, c)
	clk := clocktesting.NewFakePassiveClock(t0)
	l := &lock.Locker{Client: c, Namespace: ns, Duration: time.Minute, Clock: clk, Check: lock.ClientChecker(c)}
	cluster := types.NamespacedName{Namespace: ns, Name: "prod"}

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rollout"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationConfig},
	}
	if err := c.Create(ctx, op); err != nil {
		t.Fatal(err)
	}

	holder := lock.OperationIdentity(ns, "rollout")
	waiter := lock.OperationIdentity(ns, "upgrade")

	if r, err := l.Acquire(ctx, cluster, holder); err != nil || !r.Acquired {
		t.Fatalf("%+v %v", r, err)
	}

	setPhase := func(phase, failure string) {
		t.Helper()

		op.Status.Phase = phase
		op.Status.FailureReason = failure

		if err := c.Status().Update(ctx, op); err != nil {
			t.Fatal(err)
		}
	}

	// Running, and still running after the lease expired: the waiter waits.
	setPhase(ichorv1alpha1.OperationRunning, "")
	clk.SetTime(t0.Add(time.Hour))

	if r, err := l.Acquire(ctx, cluster, waiter); err != nil || r.Acquired || r.Holder != holder {
		t.Fatalf("running holder: %+v %v", r, err)
	}

	// Paused by a person: still held.
	setPhase(ichorv1alpha1.OperationPaused, "")

	if r, err := l.Acquire(ctx, cluster, waiter); err != nil || r.Acquired {
		t.Fatalf("paused holder: %+v %v", r, err)
	}

	// A shutdown paused on a failed step keeps the lock of its cluster; the
	// rollout's below does not.
	down := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shutdown"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: "staging", Type: ichorv1alpha1.OperationShutdown},
	}
	if err := c.Create(ctx, down); err != nil {
		t.Fatal(err)
	}

	down.Status.Phase, down.Status.FailureReason = ichorv1alpha1.OperationPaused, "w-1 still answers after its shutdown request"
	if err := c.Status().Update(ctx, down); err != nil {
		t.Fatal(err)
	}

	staging := types.NamespacedName{Namespace: ns, Name: "staging"}
	if r, err := l.Acquire(ctx, staging, lock.OperationIdentity(ns, "shutdown")); err != nil || !r.Acquired {
		t.Fatalf("the shutdown takes the staging lock: %+v %v", r, err)
	}

	if r, err := l.Acquire(ctx, staging, waiter); err != nil || r.Acquired {
		t.Fatalf("a shutdown paused on a failed step lost its lock: %+v %v", r, err)
	}

	// Paused on a failed step: taken over.
	setPhase(ichorv1alpha1.OperationPaused, "node cp-2 did not come back; resume after checking it")

	r, err := l.Acquire(ctx, cluster, waiter)
	if err != nil || !r.Acquired || r.TakenOverFrom != holder {
		t.Fatalf("holder paused on failure: %+v %v", r, err)
	}

	// The new holder names an operation that does not exist (gone): a
	// machine's join takes the lock over although the lease is fresh.
	third := lock.MachineIdentity(ns, "cp-4")

	r, err = l.Acquire(ctx, cluster, third)
	if err != nil || !r.Acquired || r.TakenOverFrom != waiter {
		t.Fatalf("gone holder: %+v %v", r, err)
	}

	// A machine holder whose TalosMachine exists is left to the lease's expiry.
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-4"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod",
			Identity:    ichorv1alpha1.MachineIdentity{UUID: "0b3c6f2e-5d0c-4a6e-9a57-1b2c3d4e5f60"},
			Approval:    ichorv1alpha1.MachineApproval{State: "pending"},
		},
	}
	if err := c.Create(ctx, m); err != nil {
		t.Fatal(err)
	}

	if r, err := l.Acquire(ctx, cluster, waiter); err != nil || r.Acquired || r.Holder != third {
		t.Fatalf("machine holder within its lease: %+v %v", r, err)
	}

	clk.SetTime(t0.Add(time.Hour + time.Minute))

	if r, err := l.Acquire(ctx, cluster, waiter); err != nil || !r.Acquired || r.TakenOverFrom != third {
		t.Fatalf("machine holder after expiry: %+v %v", r, err)
	}
}

func TestOperationLiveness(t *testing.T) {
	t.Parallel()

	config, shutdown := ichorv1alpha1.OperationConfig, ichorv1alpha1.OperationShutdown

	for _, tc := range []struct {
		typ, phase, failure string
		deleting            bool
		want                lock.Liveness
	}{
		{config, "", "", false, lock.Active},
		{config, ichorv1alpha1.OperationPending, "", false, lock.Active},
		{config, ichorv1alpha1.OperationRunning, "", false, lock.Active},
		{config, ichorv1alpha1.OperationAwaitingCredentials, "", false, lock.Active},
		{config, ichorv1alpha1.OperationPaused, "", false, lock.Active},
		{config, ichorv1alpha1.OperationPaused, "etcd unhealthy", false, lock.Inactive},
		{config, ichorv1alpha1.OperationSucceeded, "", false, lock.Inactive},
		{config, ichorv1alpha1.OperationFailed, "", false, lock.Inactive},
		{config, ichorv1alpha1.OperationRunning, "", true, lock.Inactive},
		// A shutdown keeps the lock until it has completed, paused on a failure too.
		{shutdown, ichorv1alpha1.OperationPaused, "w-1 still answers", false, lock.Active},
		{shutdown, ichorv1alpha1.OperationRunning, "", false, lock.Active},
		{shutdown, ichorv1alpha1.OperationSucceeded, "", false, lock.Inactive},
		{shutdown, ichorv1alpha1.OperationFailed, "", false, lock.Inactive},
		{shutdown, ichorv1alpha1.OperationPaused, "w-1 still answers", true, lock.Inactive},
	} {
		op := &ichorv1alpha1.TalosOperation{}
		op.Spec.Type, op.Status.Phase, op.Status.FailureReason = tc.typ, tc.phase, tc.failure

		if tc.deleting {
			op.DeletionTimestamp = &metav1.Time{}
		}

		if got := lock.OperationLiveness(op); got != tc.want {
			t.Errorf("%s %q %q deleting=%v: %v, want %v", tc.typ, tc.phase, tc.failure, tc.deleting, got, tc.want)
		}
	}

	if lock.OperationLiveness(nil) != lock.Inactive {
		t.Error("a gone operation is active")
	}
}
