package kubernetesupgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/credentialrequest"
	"github.com/maeshinshin/ichor/controller/internal/controller/kubernetesupgrade"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server, a manager running the
// machine, lifecycle and Kubernetes upgrade starter reconcilers, and a
// second manager running the operation reconciler (which the chaos test
// stops). Each test makes its own emulated world and cluster, in its own
// namespace, at the previous Kubernetes minor (v1.36.3: the v1.37.2 source
// linked with that version stamped, tools/assets/build.sh).
var (
	env    *testenv.Env
	scheme *runtime.Scheme
	k8s    client.Client
	suite  *testenv.Suite
	stopOp context.CancelFunc
	opDone chan struct{}
	assets string
)

const (
	from        = "1.36.3"
	to          = "1.37.2"
	waitTimeout = 6 * time.Minute
	// opTimeout bounds a whole upgrade: three kube-apiserver restarts, a
	// DaemonSet rollout and every kubelet, on a busy 2-core machine.
	opTimeout = 20 * time.Minute
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, scheme, k8s, suite = s.Env, s.Scheme, s.Env.Client, s

		return nil, setup(ctx)
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

func setup(ctx context.Context) error {
	var err error
	if assets, err = testenv.AssetsDir(); err != nil {
		return err
	}

	prev := filepath.Join(filepath.Dir(assets), "v"+from)
	if _, err := os.Stat(filepath.Join(prev, "kube-apiserver")); err != nil {
		return fmt.Errorf("the previous Kubernetes minor's binaries are missing from %s: build them with `go tool task assets`", prev)
	}

	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}); err != nil {
		return err
	}

	mgr, err := newManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	// A long drift interval: the machine reconciler looks at a machine when it
	// changes or when an operation asks, never in the middle of a stage, so the
	// nodes' ApplyConfiguration counts are the operation's own.
	if err := (&talosmachine.Reconciler{DriftInterval: time.Hour}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&lifecycle.Reconciler{PollInterval: 300 * time.Millisecond, MonitorInterval: time.Second, DrainTimeout: 30 * time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	// The release source is the current test's world's registry, reached
	// through one address for the suite.
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := currentRegistry.Load()
		if base == nil {
			http.Error(w, "no world yet", http.StatusServiceUnavailable)

			return
		}

		resp, err := http.Get(*base + r.URL.RequestURI()) //nolint:noctx,gosec // the world's loopback control API
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)

			return
		}
		defer resp.Body.Close() //nolint:errcheck // a read-only body

		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))

	go func() { <-ctx.Done(); src.Close() }()

	starter := &kubernetesupgrade.Reconciler{RefreshInterval: time.Minute, ReleaseSource: src.URL}
	if err := starter.SetupWithManager(mgr); err != nil {
		return err
	}

	// signs a CA rotation's credentials (TestCARotation)
	if err := (&credentialrequest.Reconciler{}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return err
	}

	return startOperations(ctx)
}

// currentRegistry is the base URL of the current test's world's registry.
var currentRegistry atomic.Pointer[string]

// newOperations is the operation reconciler with the tests' timings.
func newOperations() *operation.Reconciler {
	return &operation.Reconciler{
		PollInterval: 300 * time.Millisecond, LockWait: 300 * time.Millisecond, DrainTimeout: 60 * time.Second,
		RebootTimeout: 3 * time.Minute, APIServerSettle: 30 * time.Second, APIServerTimeout: 3 * time.Minute,
		RootCASettle: 3 * time.Second, TokenSettle: 3 * time.Second,
	}
}

// startOperations runs the operation reconciler in its own manager, until
// stopOperations; adjust changes the reconciler first (a test's own fields).
func startOperations(ctx context.Context, adjust ...func(*operation.Reconciler)) error {
	mgr, err := newManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	r := newOperations()
	for _, f := range adjust {
		f(r)
	}

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

// stopOperations stops the operation reconciler's manager and waits until it has stopped.
func stopOperations() {
	stopOp()
	<-opDone
}

// emuCluster is one test's emulated world and its TalosCluster.
type emuCluster struct {
	ns, name string
	world    *talosemu.World
	bundle   *secrets.Bundle
	machines []string
}

// newCluster starts a world of the named machines (those starting with cp-
// are control planes, one kube-apiserver each) on subnet, creates its
// TalosCluster at Kubernetes `from` with kube-proxy, plus patches, and
// provisions every machine; everything goes when the test ends.
func newCluster(t *testing.T, subnet string, machines []string, patches ...ichorv1alpha1.TalosConfigPatch) *emuCluster {
	t.Helper()

	ctx := context.Background()
	ec := &emuCluster{ns: strings.ToLower(strings.ReplaceAll(t.Name(), "Test", "k8s-")), name: "up", machines: machines}

	spec := &talosemu.Spec{Subnet: subnet}
	cps := 0

	for _, n := range machines {
		role := talosemu.RoleHintWorker
		if strings.HasPrefix(n, "cp-") {
			role = talosemu.RoleHintControlPlane
			cps++
		}

		spec.Machines = append(spec.Machines, talosemu.MachineSpec{Name: n, Role: role})
	}

	spec.Durations = talosemu.Durations{
		Install: talosemu.Duration(200 * time.Millisecond),
		Reboot:  talosemu.Duration(300 * time.Millisecond),
		Boot:    talosemu.Duration(100 * time.Millisecond),
	}

	w, err := talosemu.Start(ctx, spec, t.TempDir(), talosemu.Options{Kubernetes: true, KubeAssets: assets})
	testenv.Must(t, err)
	t.Cleanup(w.Close)

	ec.world = w
	base := w.KubernetesReleaseSource()
	currentRegistry.Store(&base)

	ec.bundle, err = bundle.Generate(secrets.NewClock(), "v1.14")
	testenv.Must(t, err)

	cp1, err := w.Machine("cp-1")
	testenv.Must(t, err)

	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: ec.name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: from,
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: cp1.IP()},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: ec.name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: int32(cps), Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyEnabled},
		},
	}

	sec, err := bundle.Secret(ec.ns, c.Spec.SecretsBundleRef, ec.bundle)
	testenv.Must(t, err)

	objs := make([]client.Object, 0, 3+len(patches))
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ec.ns}}, sec)
	for i := range patches {
		p := patches[i].DeepCopy()
		p.Namespace, p.Spec.ClusterName = ec.ns, ec.name
		objs = append(objs, p)
	}

	for _, o := range append(objs, c) {
		testenv.Must(t, k8s.Create(ctx, o))
	}

	tw := testworld.Cluster{Client: k8s, World: w, Bundle: ec.bundle, Namespace: ec.ns, Name: ec.name, Machines: machines}
	testenv.Must(t, tw.Provision(ctx, time.Now().Add(3*waitTimeout)))

	// The cluster runs `from` everywhere before the test starts.
	testenv.Eventually(t, waitTimeout, "every Node Ready at "+from, func() error {
		nodes, err := ec.kube(t).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}

		if len(nodes.Items) != len(machines) {
			return fmt.Errorf("%d Nodes", len(nodes.Items))
		}

		for _, n := range nodes.Items {
			if n.Status.NodeInfo.KubeletVersion != "v"+from || !nodeReady(&n) {
				return fmt.Errorf("Node %s: kubelet %q, ready %t", n.Name, n.Status.NodeInfo.KubeletVersion, nodeReady(&n))
			}
		}

		return nil
	})

	testenv.Eventually(t, waitTimeout, "the running version recorded", func() error {
		if v := ec.cluster(t).Status.KubernetesUpgrade.Version; v != from {
			return fmt.Errorf("status.kubernetesUpgrade.version %q", v)
		}

		return nil
	})

	return ec
}

func (ec *emuCluster) emu(t testing.TB, name string) *talosemu.Machine {
	t.Helper()

	m, err := ec.world.Machine(name)
	testenv.Must(t, err)

	return m
}

// restConfig is the cluster's admin access through cp-1's Talos API (the
// kubeconfig Talos generates, server = the cluster endpoint).
func (ec *emuCluster) restConfig(t testing.TB) *rest.Config {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), ec.emu(t, "cp-1").IP(), ec.bundle)
	testenv.Must(t, err)

	defer n.Close()

	kc, err := n.Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	cfg.Timeout = 10 * time.Second

	return cfg
}

func (ec *emuCluster) kube(t testing.TB) kubernetes.Interface {
	t.Helper()

	k, err := kubernetes.NewForConfig(ec.restConfig(t))
	testenv.Must(t, err)

	return k
}

// apiServerOf is a client of one control plane's own kube-apiserver.
func apiServerOf(cfg *rest.Config, ip string) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + net.JoinHostPort(ip, strconv.Itoa(6443))
	c.Timeout = 3 * time.Second

	return kubernetes.NewForConfig(c)
}

func (ec *emuCluster) cluster(t testing.TB) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ec.ns, Name: ec.name}, c))

	return c
}

// setKubernetesVersion is what `ichor upgrade kubernetes VERSION` writes.
func (ec *emuCluster) setKubernetesVersion(t testing.TB, v string) {
	t.Helper()

	c := ec.cluster(t)
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.KubernetesVersion = v
	testenv.Must(t, k8s.Patch(context.Background(), c, patch))
}

// operation waits for the kubernetes operation to v the starter creates.
func (ec *emuCluster) operation(t testing.TB, v string) string {
	t.Helper()

	var name string

	testenv.Eventually(t, waitTimeout, "a kubernetes operation to "+v, func() error {
		var ops ichorv1alpha1.TalosOperationList
		if err := k8s.List(context.Background(), &ops, client.InNamespace(ec.ns)); err != nil {
			return err
		}

		for _, op := range ops.Items {
			if op.Spec.Type == ichorv1alpha1.OperationKubernetes && op.Spec.Kubernetes != nil && op.Spec.Kubernetes.Version == v {
				name = op.Name

				return nil
			}
		}

		return fmt.Errorf("none among %d operations", len(ops.Items))
	})

	return name
}

func (ec *emuCluster) getOp(t testing.TB, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	op := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ec.ns, Name: name}, op))

	return op
}

func (ec *emuCluster) waitPhase(t testing.TB, name, phase string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, opTimeout, name+" "+phase, func() error {
		op = ec.getOp(t, name)
		if op.Status.Phase != phase {
			return fmt.Errorf("phase %q, step %q, failure %q, stages %+v, machines %+v", op.Status.Phase, op.Status.Step, op.Status.FailureReason,
				op.Status.Stages, op.Status.Machines)
		}

		return nil
	})

	return op
}

// annotateOp sets annotations on an operation, as `ichor operation resume` does.
func (ec *emuCluster) annotateOp(t testing.TB, name string, kv map[string]string) {
	t.Helper()

	var err error

	for range 10 {
		op := ec.getOp(t, name)
		if op.Annotations == nil {
			op.Annotations = map[string]string{}
		}

		for k, v := range kv {
			op.Annotations[k] = v
		}

		if err = k8s.Update(context.Background(), op); err == nil {
			return
		}
	}

	testenv.Must(t, err)
}

// rpcs counts the calls of a Talos method a machine got, e.g. "/machine.MachineService/ApplyConfiguration".
func (ec *emuCluster) rpcs(t testing.TB, name, method string) int {
	t.Helper()

	return ec.emu(t, name).RPCCounts()[method]
}

const (
	applyRPC = "/machine.MachineService/ApplyConfiguration"
	pullRPC  = "/machine.ImageService/Pull"
)

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// runtimeConfigPatch serves networking.k8s.io/v1beta1 (ServiceCIDR and
// IPAddress: deprecated in 1.34, removed in 1.37) on the kube-apiservers.
func runtimeConfigPatch() ichorv1alpha1.TalosConfigPatch {
	return ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Name: "serve-networking-v1beta1"},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			Layer: ichorv1alpha1.LayerRole, Target: ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane},
			Documents: []mirror.PatchDocument{{KubeAPIServerConfig: &mirror.KubeAPIServerConfig{
				ExtraArgs: map[string]mirror.ArgValue{"runtime-config": {Value: "networking.k8s.io/v1beta1=true"}},
			}}},
		},
	}
}

// reconcileOnceInFreshController starts a manager (a controller process),
// runs one reconcile of the operation with a new reconciler, and stops it.
func reconcileOnceInFreshController(t *testing.T, ns, name string) ctrl.Result {
	t.Helper()

	return testworld.ReconcileOperationOnce(t, newManager, newOperations(), client.ObjectKey{Namespace: ns, Name: name})
}
