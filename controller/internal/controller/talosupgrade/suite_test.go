package talosupgrade_test

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosupgrade"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server, one emulated world of three
// control planes (a real etcd each, one Kubernetes control plane on cp-1)
// and two workers, a manager running the machine, lifecycle and upgrade
// starter reconcilers, and a second manager running the operation
// reconciler, which the chaos test stops.
var (
	env    *testenv.Env
	scheme *runtime.Scheme
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
	stopOp context.CancelFunc
	opDone chan struct{}
)

const (
	ns          = "default"
	clusterName = "upg"
	waitTimeout = 240 * time.Second
)

var machineNames = []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}

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

func newManager() (ctrl.Manager, error) {
	return ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: new(true)},
	})
}

func setup(ctx context.Context, s *testenv.Suite) error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{Subnet: "127.0.86.0/24"}
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

	world, err = talosemu.Start(ctx, spec, s.Dir, talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true})
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

	mgr, err := newManager()
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

	if err := (&talosupgrade.Reconciler{ReleaseSource: world.ReleaseSource(), RefreshInterval: time.Minute}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return err
	}

	if err := startOperations(ctx, ""); err != nil {
		return err
	}

	return provisionAll(ctx)
}

// newOperations is the operation reconciler with the tests' timings.
func newOperations() *operation.Reconciler {
	return &operation.Reconciler{
		PollInterval: 300 * time.Millisecond, LockWait: 300 * time.Millisecond, DrainTimeout: 60 * time.Second,
		RebootTimeout: 2 * time.Minute, APIServerSettle: 30 * time.Second, APIServerTimeout: 2 * time.Minute,
		HeldWait: 2 * time.Second,
	}
}

// startOperations runs the operation reconciler in its own manager, with the
// Longhorn storage hook as cmd/main.go registers it (it lets a node go at
// once while no longhorn TalosStorage selects it) and own as the node the
// controller runs on, until stopOperations.
func startOperations(ctx context.Context, own string) error {
	mgr, err := newManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	r := newOperations()
	r.OwnNode = own
	r.Storage = &hook.Longhorn{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}

	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}

	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})

	go func() {
		defer close(done)

		_ = mgr.Start(mctx)
	}()

	if !mgr.GetCache().WaitForCacheSync(mctx) {
		cancel()

		return errors.New("the operation manager's cache did not sync")
	}

	stopOp, opDone = cancel, done

	return nil
}

// stopOperations stops the operation reconciler's manager and waits until
// it has stopped; a no-op when it does not run.
func stopOperations() {
	if stopOp == nil {
		return
	}

	stopOp()
	<-opDone

	stopOp, opDone = nil, nil
}

// restartOperations runs the operation reconciler's manager anew, with own
// as the controller's node.
func restartOperations(t testing.TB, own string) {
	t.Helper()
	stopOperations()
	testenv.Must(t, startOperations(context.Background(), own))
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
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 3, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

// provisionAll provisions the machines of the test cluster (testworld.Cluster.Provision).
func provisionAll(ctx context.Context) error {
	c := testworld.Cluster{
		Client: k8s, World: world, Bundle: theBun, Namespace: ns, Name: clusterName, Machines: machineNames,
		Labels: nil,
	}

	return c.Provision(ctx, time.Now().Add(3*waitTimeout))
}

func emu(t testing.TB, name string) *talosemu.Machine {
	t.Helper()

	em, err := world.Machine(name)
	if err != nil {
		t.Fatal(err)
	}

	return em
}

// rpcs counts the calls of a Talos method a machine got, e.g. "/machine.LifecycleService/Upgrade".
func rpcs(t testing.TB, name, method string) int {
	t.Helper()

	return emu(t, name).RPCCounts()[method]
}

const (
	upgradeRPC = "/machine.LifecycleService/Upgrade"
	rebootRPC  = "/machine.MachineService/Reboot"
	legacyRPC  = "/machine.MachineService/Upgrade"
)

// counts are the Upgrade and Reboot calls of every machine.
func counts(t testing.TB) map[string][3]int {
	out := map[string][3]int{}
	for _, n := range machineNames {
		out[n] = [3]int{rpcs(t, n, upgradeRPC), rpcs(t, n, rebootRPC), rpcs(t, n, legacyRPC)}
	}

	return out
}

func getCluster(t testing.TB) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}, c))

	return c
}

// setTalosVersion is what `ichor upgrade talos VERSION` writes.
func setTalosVersion(t testing.TB, v string) {
	t.Helper()

	c := getCluster(t)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.TalosVersion = v
	testenv.Must(t, k8s.Patch(context.Background(), c, patch))
}

// talosOp waits for the talos operation to version v the starter creates.
func talosOp(t testing.TB, v string) string {
	t.Helper()

	var name string

	testenv.Eventually(t, waitTimeout, "a talos operation to "+v, func() error {
		var ops ichorv1alpha1.TalosOperationList
		if err := k8s.List(context.Background(), &ops, client.InNamespace(ns)); err != nil {
			return err
		}

		for _, op := range ops.Items {
			if op.Spec.Type == ichorv1alpha1.OperationTalos && op.Spec.Talos != nil && op.Spec.Talos.Version == v {
				name = op.Name

				return nil
			}
		}

		return fmt.Errorf("none among %d operations", len(ops.Items))
	})

	return name
}

func getOp(t testing.TB, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	op := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op))

	return op
}

func waitPhase(t testing.TB, name, phase string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, waitTimeout, name+" "+phase, func() error {
		op = getOp(t, name)
		if op.Status.Phase != phase {
			return fmt.Errorf("phase %q, step %q, failure %q, machines %+v", op.Status.Phase, op.Status.Step, op.Status.FailureReason, op.Status.Machines)
		}

		return nil
	})

	return op
}

// etcdHealthy is "" when the etcd member of every control plane answers.
func etcdHealthy(ctx context.Context) string {
	var bad []string

	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		em, err := world.Machine(n)
		if err != nil {
			return err.Error()
		}

		node, err := (&talos.Dialer{}).Dial(ctx, em.IP(), theBun)
		if err != nil {
			bad = append(bad, n)

			continue
		}

		if !node.EtcdHealthy(ctx) {
			bad = append(bad, n)
		}

		node.Close()
	}

	return strings.Join(bad, ", ")
}

// reconcileOnceInFreshController starts a manager (a controller process),
// runs one reconcile of the operation with a new reconciler (changed by
// mutate, when given), and stops it.
func reconcileOnceInFreshController(t *testing.T, name string, mutate ...func(*operation.Reconciler)) ctrl.Result {
	t.Helper()

	return testworld.ReconcileOperationOnce(t, newManager, newOperations(), client.ObjectKey{Namespace: ns, Name: name}, mutate...)
}

// workloadConfig is the emulated cluster's own Kubernetes API, through cp-1's
// admin kubeconfig.
func workloadConfig(t testing.TB) *rest.Config {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), emu(t, "cp-1").IP(), theBun)
	testenv.Must(t, err)

	defer n.Close()

	kc, err := n.Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	return cfg
}

func getMachine(t testing.TB, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m))

	return m
}

// updateMachine changes a TalosMachine's metadata, retrying on conflicts
// with the reconcilers' writes.
func updateMachine(t testing.TB, name string, f func(*ichorv1alpha1.TalosMachine)) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, name)
		f(m)

		return k8s.Update(context.Background(), m)
	}))
}

// waitHealthy waits until every machine runs, etcd answers on every control
// plane and every Node is Ready and schedulable: the world as the next test
// expects it.
func waitHealthy(t testing.TB) {
	t.Helper()

	testenv.Eventually(t, 2*waitTimeout, "every machine running, etcd healthy, every Node Ready", func() error {
		for _, n := range machineNames {
			if info := emu(t, n).Info(); !info.Powered || info.Stage != "running" {
				return fmt.Errorf("%s: powered %t, stage %s", n, info.Powered, info.Stage)
			}
		}

		if bad := etcdHealthy(context.Background()); bad != "" {
			return fmt.Errorf("etcd does not answer on %s", bad)
		}

		k, err := kubernetes.NewForConfig(workloadConfig(t))
		if err != nil {
			return err
		}

		nodes, err := k.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}

		ready := 0

		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && !n.Spec.Unschedulable {
					ready++
				}
			}
		}

		if ready != len(machineNames) {
			return fmt.Errorf("%d of %d Nodes Ready and schedulable", ready, len(nodes.Items))
		}

		return nil
	})
}
