package testworld

import (
	"context"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
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

	return ReconcileOnce(t, newManager, func(ctx context.Context, mgr ctrl.Manager) ctrlreconcile.Reconciler {
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

		return r
	}, key)
}

// ReconcileOnce is a controller process that starts, reconciles key once
// and dies: a new manager (newManager), the reconciler build wires to it,
// the manager's cache synced, one Reconcile. An error of the reconcile is
// logged, as a controller would, not fatal.
func ReconcileOnce(t testing.TB, newManager func() (ctrl.Manager, error),
	build func(context.Context, ctrl.Manager) ctrlreconcile.Reconciler, key client.ObjectKey,
) ctrl.Result {
	t.Helper()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	mgr, err := newManager()
	testenv.Must(t, err)

	r := build(ctx, mgr)

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

// AdminConfig is the cluster's admin kubeconfig as the machine named
// machine hands it out (Talos's Kubeconfig RPC), as the controller gets it,
// and a client of it.
func AdminConfig(t testing.TB, world *talosemu.World, bun *secrets.Bundle, machine string) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()

	em, err := world.Machine(machine)
	testenv.Must(t, err)

	n, err := (&talos.Dialer{}).Dial(context.Background(), em.IP(), bun)
	testenv.Must(t, err)

	defer n.Close()

	kc, err := n.Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	k, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	return cfg, k
}
