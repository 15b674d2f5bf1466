package ichorupgrade_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage/imagetest"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server, holding Ichor's namespace, one
// TalosCluster (whose lock every operation takes) and the IchorInstallation.
// Each test brings its own registry and test Sigstore (imagetest.World) and
// runs the operation reconciler as a controller process would: a manager's
// client, uncached reader and Event recorder, with Reconcile called until
// the operation reaches what the test waits for. A "restart" is a new
// process: a new manager and a new Reconciler, nothing kept in memory.
var (
	suite *testenv.Suite
	k8s   client.Client
)

const (
	ns          = "default"
	clusterName = "home"
	waitTimeout = 150 * time.Second
	installed   = "v0.1.0"
	target      = "v0.2.0"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		suite, k8s = s, s.Env.Client

		return nil, setup(ctx)
	}))
}

func setup(ctx context.Context) error {
	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: "127.0.0.1"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium},
		},
	}

	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: installed},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: ichorv1alpha1.ManagerIchor},
		},
	}

	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace}}, c, ii} {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}

	if lock.DefaultNamespace != install.Namespace {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}); err != nil {
			return err
		}
	}

	ii.Status.InstalledVersion = installed

	return k8s.Status().Update(ctx, ii)
}

// installerAt points the IchorInstallation's installer repository at the
// test's registry, as installed, with status.installedVersion v.
func installerAt(t *testing.T, w *imagetest.World, v string) {
	t.Helper()

	ctx := context.Background()
	ii := &ichorv1alpha1.IchorInstallation{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii))
	ii.Spec.Version.InstallerRepository = w.Repo.Name()
	testenv.Must(t, k8s.Update(ctx, ii))
	ii.Status.InstalledVersion = v
	testenv.Must(t, k8s.Status().Update(ctx, ii))
}

// process is one run of the controller: a manager (its client, uncached
// reader and Event recorder) and an operation Reconciler on them.
type process struct {
	r      *operation.Reconciler
	cancel context.CancelFunc
	done   chan struct{}
}

// start starts a controller process whose reconciler trusts w's Sigstore and
// reads w's registry; registry, when given, replaces the registry settings.
func start(t *testing.T, w *imagetest.World, registry ...installerimage.Registry) *process {
	t.Helper()

	mgr, err := suite.NewManager()
	testenv.Must(t, err)

	cs, err := kubernetes.NewForConfig(suite.Env.Config)
	testenv.Must(t, err)

	r := &operation.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(operation.ControllerName),
		Clientset: cs, Namespace: install.Namespace, Registry: w.Registry(), TrustedRoot: w.Trust,
		PollInterval: 200 * time.Millisecond, LockWait: 200 * time.Millisecond,
	}
	r.Locker = &lock.Locker{Client: r.Client, Check: lock.ClientChecker(r.APIReader)}

	if len(registry) > 0 {
		r.Registry = registry[0]
	}

	ctx, cancel := context.WithCancel(context.Background())
	p := &process{r: r, cancel: cancel, done: make(chan struct{})}

	go func() {
		defer close(p.done)

		if err := mgr.Start(ctx); err != nil {
			t.Logf("manager: %v", err)
		}
	}()

	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}

	t.Cleanup(p.stop)

	return p
}

// stop ends the process and waits until its manager returned.
func (p *process) stop() {
	p.cancel()
	<-p.done
}

// reconcile runs one reconcile of the operation.
func (p *process) reconcile(t *testing.T, name string) {
	t.Helper()

	if _, err := p.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
		t.Logf("reconcile %s: %v", name, err)
	}
}

// stopAfter runs one reconcile of the operation, then ends the process.
func (p *process) stopAfter(t *testing.T, name string) {
	t.Helper()
	p.reconcile(t, name)
	p.stop()
}

// until reconciles the operation until cond holds.
func (p *process) until(t *testing.T, name, what string, cond func(*ichorv1alpha1.TalosOperation) error) *ichorv1alpha1.TalosOperation {
	t.Helper()

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, waitTimeout, name+": "+what, func() error {
		p.reconcile(t, name)
		op = getOp(t, name)

		err := cond(op)
		if err != nil && (op.Status.Phase == ichorv1alpha1.OperationFailed || op.Status.Phase == ichorv1alpha1.OperationSucceeded) {
			t.Fatalf("%s: %s ended (%s: %s) before %s: %v", name, op.Status.Phase, op.Status.Step, readyMessage(op), what, err)
		}

		return err
	})

	return op
}

// ichorOp creates an ichor operation to target.
func ichorOp(t *testing.T, name string, mutate ...func(*ichorv1alpha1.IchorUpgrade)) {
	t.Helper()

	up := &ichorv1alpha1.IchorUpgrade{Version: target}
	for _, f := range mutate {
		f(up)
	}

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: clusterName, Type: ichorv1alpha1.OperationIchor, Ichor: up},
	}
	testenv.Must(t, k8s.Create(context.Background(), op))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), op) })
}

// updateOp changes an operation, retrying on conflicts with the status writes.
func updateOp(t *testing.T, name string, f func(*ichorv1alpha1.TalosOperation)) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		op := getOp(t, name)
		f(op)

		return k8s.Update(context.Background(), op)
	}))
}

func getOp(t *testing.T, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()

	op := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op))

	return op
}

// jobs lists the installer Jobs of an operation in Ichor's namespace.
func jobs(t *testing.T, op string) []batchv1.Job {
	t.Helper()

	var list batchv1.JobList
	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(install.Namespace), client.MatchingLabels{"ichor.maesh.dev/operation": op}))

	return list.Items
}

// phase is the condition that the operation is in phase want.
func phase(want string) func(*ichorv1alpha1.TalosOperation) error {
	return func(op *ichorv1alpha1.TalosOperation) error {
		if op.Status.Phase != want {
			return fmt.Errorf("phase %q, step %q, failure %q", op.Status.Phase, op.Status.Step, op.Status.FailureReason)
		}

		return nil
	}
}

// events lists the Events about an operation as "type reason: note".
func events(t *testing.T, name string) []string {
	t.Helper()

	var list eventsv1.EventList
	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))

	var out []string

	for _, e := range list.Items {
		if e.Regarding.Kind == "TalosOperation" && e.Regarding.Name == name {
			out = append(out, e.Type+" "+e.Reason+": "+e.Note)
		}
	}

	return out
}

// finishJob sets the Job's status as kube-controller-manager's Job
// controller would when its pod ends: the test API server runs no
// controller manager, so no Job ever finishes by itself here.
func finishJob(t *testing.T, name string, succeeded bool) {
	t.Helper()

	ctx := context.Background()
	job := &batchv1.Job{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: name}, job))

	now := metav1.Now()
	job.Status.StartTime = &now

	cond := func(typ batchv1.JobConditionType, reason, msg string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastProbeTime: now, LastTransitionTime: now}
	}

	if succeeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{
			cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached", "Reached expected number of succeeded pods"),
			cond(batchv1.JobComplete, "CompletionsReached", "Reached expected number of succeeded pods"),
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			cond(batchv1.JobFailureTarget, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
			cond(batchv1.JobFailed, "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
		}
	}

	testenv.Must(t, k8s.Status().Update(ctx, job))
}

func contains(t *testing.T, what, s string, words ...string) {
	t.Helper()

	for _, w := range words {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not say %q: %s", what, w, s)
		}
	}
}
