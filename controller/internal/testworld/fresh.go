package testworld

import (
	"context"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// ReconcileOperationOnce is a controller process that starts, reconciles
// the TalosOperation key once and dies: a new manager (newManager), its
// cache synced, and r, an operation reconciler wired to it (its client, API
// reader, an Event recorder, a Talos dialer, no storage hook and a cluster
// lock on the manager's client; the chaos tests set their timings on r),
// then changed by mutate (a client that fails on purpose, say). An error of
// the reconcile is logged, as a controller would, not fatal.
func ReconcileOperationOnce(t testing.TB, newManager func() (ctrl.Manager, error), r *operation.Reconciler, key client.ObjectKey,
	mutate ...func(*operation.Reconciler),
) ctrl.Result {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	mgr, err := newManager()
	testenv.Must(t, err)
	testenv.Must(t, machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()))

	r.Client, r.APIReader, r.Recorder = mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder("chaos")
	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	if r.Storage == nil {
		r.Storage = hook.None{}
	}

	r.Locker = &lock.Locker{Client: r.Client, Check: lock.ClientChecker(r.APIReader)}

	for _, f := range mutate {
		f(r)
	}

	done := make(chan struct{})

	go func() {
		defer close(done)

		_ = mgr.Start(ctx)
	}()

	defer func() { cancel(); <-done }()

	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	if err != nil {
		t.Logf("reconcile: %v", err)
	}

	return res
}
