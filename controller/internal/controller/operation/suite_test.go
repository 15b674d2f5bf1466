package operation_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server, one emulated world (a
// control plane running a real etcd and the real Kubernetes control plane,
// and two workers whose Nodes register with it), and one manager running the
// lifecycle (which provisions the machines in TestMain), configuration and
// operation reconcilers as cmd/main.go does, with short timings.
var (
	env    *testenv.Env
	scheme *runtime.Scheme
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
)

const (
	ns          = "default"
	clusterName = "ops"
	waitTimeout = 150 * time.Second
	// apiServerSettle is the operation's settle time for a kube-apiserver
	// restart; the emulator's restart (after its 2 s config poll) shows sooner.
	apiServerSettle = 30 * time.Second
)

var machineNames = []string{"cp-1", "w-1", "w-2"}

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, scheme, k8s = s.Env, s.Scheme, s.Env.Client

		err := setup(ctx, s)
		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

func setup(ctx context.Context, s *testenv.Suite) error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{Subnet: "127.0.83.0/24"}
	for _, n := range machineNames {
		role := talosemu.RoleHintWorker
		if strings.HasPrefix(n, "cp-") {
			role = talosemu.RoleHintControlPlane
		}

		spec.Machines = append(spec.Machines, talosemu.MachineSpec{Name: n, Role: role})
	}

	spec.Durations = talosemu.Durations{
		Install: talosemu.Duration(200 * time.Millisecond),
		Reboot:  talosemu.Duration(300 * time.Millisecond),
		Boot:    talosemu.Duration(100 * time.Millisecond),
	}

	world, err = talosemu.Start(ctx, spec, s.Dir, talosemu.Options{
		Kubernetes: true, KubeAssets: assets, SingleAPIServer: true, APIServerRestartDelay: 2 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	cp1, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	c := testCluster(cp1.IP())

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	for _, o := range []client.Object{sec, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}, c} {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	if err := (&talosmachine.Reconciler{DriftInterval: 2 * time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&lifecycle.Reconciler{PollInterval: 300 * time.Millisecond, MonitorInterval: time.Second, DrainTimeout: 30 * time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&operation.Reconciler{
		PollInterval: 300 * time.Millisecond, LockWait: 300 * time.Millisecond, DrainTimeout: 60 * time.Second,
		RebootTimeout: 2 * time.Minute, RebootGrace: 20 * time.Second, APIServerSettle: apiServerSettle, APIServerTimeout: 2 * time.Minute,
	}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return err
	}

	return provisionAll(ctx)
}

func testCluster(endpoint string) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: endpoint},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

// provisionAll provisions the machines of the test cluster (testworld.Cluster.Provision).
func provisionAll(ctx context.Context) error {
	c := testworld.Cluster{
		Client: k8s, World: world, Bundle: theBun, Namespace: ns, Name: clusterName, Machines: machineNames,
		Labels: func(n string) map[string]string { return map[string]string{"pool": n} },
	}

	return c.Provision(ctx, time.Now().Add(4*waitTimeout))
}

func emu(t testing.TB, name string) *talosemu.Machine {
	t.Helper()

	em, err := world.Machine(name)
	if err != nil {
		t.Fatal(err)
	}

	return em
}

// adminNode connects to an emulated machine as Ichor does.
func adminNode(t testing.TB, name string) *talos.Node {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, name).IP(), theBun)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(n.Close)

	return n
}

// reboots counts the Reboot calls a machine got.
func reboots(t testing.TB, name string) int {
	t.Helper()

	return emu(t, name).RPCCounts()["/machine.MachineService/Reboot"]
}

func getMachine(t testing.TB, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m))

	return m
}

func getOp(t testing.TB, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	op := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op))

	return op
}

// configOp is a config operation of the test cluster.
func configOp(name string, mutate ...func(*ichorv1alpha1.TalosOperation)) *ichorv1alpha1.TalosOperation {
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: clusterName, Type: ichorv1alpha1.OperationConfig},
	}

	for _, f := range mutate {
		f(op)
	}

	return op
}

// updateOp changes an operation's metadata or spec, retrying on conflicts
// with the reconciler's status writes.
func updateOp(t testing.TB, name string, f func(*ichorv1alpha1.TalosOperation)) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		op := getOp(t, name)
		f(op)

		return k8s.Update(context.Background(), op)
	}))
}

// waitPhase waits for an operation's phase and returns it.
func waitPhase(t testing.TB, name, phase string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, waitTimeout, name+" "+phase, func() error {
		op = getOp(t, name)
		if op.Status.Phase != phase {
			return fmt.Errorf("phase %q, step %q, machines %+v, conditions %+v", op.Status.Phase, op.Status.Step, op.Status.Machines, op.Status.Conditions)
		}

		return nil
	})

	return op
}

func progress(op *ichorv1alpha1.TalosOperation, machine string) ichorv1alpha1.MachineProgress {
	for _, p := range op.Status.Machines {
		if p.Name == machine {
			return p
		}
	}

	return ichorv1alpha1.MachineProgress{}
}

// lockHolder is the identity holding the test cluster's lock ("" when none).
func lockHolder(t testing.TB) string {
	t.Helper()

	h, err := (&lock.Locker{Client: k8s}).Holder(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName})
	testenv.Must(t, err)

	return h
}

// opEvents lists the Events about an operation as "reason: note".
func opEvents(t testing.TB, name string) []string {
	t.Helper()

	var list eventsv1.EventList

	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))

	var out []string

	for _, e := range list.Items {
		if e.Regarding.Kind == "TalosOperation" && e.Regarding.Name == name {
			out = append(out, e.Reason+": "+e.Note)
		}
	}

	return out
}

func hasEvent(t testing.TB, op, reason, substr string) error {
	t.Helper()

	evs := opEvents(t, op)
	for _, e := range evs {
		if strings.HasPrefix(e, reason+": ") && strings.Contains(e, substr) {
			return nil
		}
	}

	return errors.New("no " + reason + " Event naming " + substr + " among " + strings.Join(evs, " | "))
}
