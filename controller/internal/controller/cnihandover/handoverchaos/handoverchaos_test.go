package handoverchaos_test

import (
	"context"
	"errors"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/controller/internal/cnijob"
	"github.com/maeshinshin/ichor/controller/internal/controller/cnihandover"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var (
	k8s    client.Client
	suite  *testenv.Suite
	world  *talosemu.World
	theBun *secrets.Bundle
)

const (
	ns          = "default"
	clusterName = "cni-chaos"
	waitTimeout = 3 * time.Minute
	// firstBackoff is the wait after a first failed Job: short, but long
	// enough for a few controllers to live and die in it.
	firstBackoff = 6 * time.Second
	// staleRequest is a request ConfigMap a dead controller left without
	// its Job (stopped between creating the two, for a request since
	// changed).
	staleRequest = "ichor-cni-0123456789-1"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s, suite = s.Env.Client, s

		var err error

		// No hand-over controller runs in the manager: the test runs each
		// of its reconciles in a controller of its own.
		world, theBun, err = testworld.OneControlPlane{
			Subnet: "127.0.173.0/24", Namespace: ns, Name: clusterName, Within: 2 * waitTimeout,
			Cluster: func(c *ichorv1alpha1.TalosCluster) {
				c.Annotations = map[string]string{ichorv1alpha1.CNIBootstrapAnnotation: ichorv1alpha1.CNIBootstrapInline}
				c.Spec.CNI.Tunnel, c.Spec.CNI.KubeProxy = "vxlan", ichorv1alpha1.KubeProxyReplaced
			},
		}.Start(ctx, s)

		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

// errDied is what a controller that dies before writing its status "gets".
var errDied = errors.New("the controller died before it wrote the cluster's status")

// TestHandoverChaos hands a cluster's bootstrap Cilium over to Ichor's Helm
// release with the controller killed between every step: each reconcile
// runs in a new controller process that then dies, and every other one dies
// after doing its work in the cluster but before writing the TalosCluster's
// status. It starts from what a controller killed mid-step leaves: the
// cluster lock held by the hand-over, and a request ConfigMap without its
// Job. At every step it checks the hand-over's invariants: never two Jobs,
// never a Job not under the lock, never a second Job before the back-off,
// the render keeps the bootstrap Cilium until CNIHandover is True, and Helm
// runs once.
func TestHandoverChaos(t *testing.T) {
	ctx := t.Context()
	cfg, k := testworld.AdminConfig(t, world, theBun, "cp-1")
	key := types.NamespacedName{Namespace: ns, Name: clusterName}

	// What a controller killed mid-step leaves behind.
	locker := &lock.Locker{Client: k8s, Check: lock.ClientChecker(k8s)}
	if res, err := locker.Acquire(ctx, key, lock.CNIHelmIdentity); err != nil || !res.Acquired {
		t.Fatalf("taking the lock as the dead controller had it: %+v, %v", res, err)
	}

	stale, err := cilium.RequestConfigMap(staleRequest, cilium.Request{Version: "v0.0.0"})
	testenv.Must(t, err)

	_, err = k.CoreV1().ConfigMaps(cilium.Namespace).Create(ctx, stale, metav1.CreateOptions{})
	testenv.Must(t, err)

	h := &handover{t: t, k: k, key: key}

	// 1. The first Job, whatever the controller's deaths.
	first := h.until("the first ichor-cni Job", func(jobs []batchv1.Job) bool { return len(jobs) == 1 })
	if !strings.HasSuffix(first.Name, "-1") {
		t.Fatalf("the first Job is %s, want attempt 1", first.Name)
	}

	if _, err := k.CoreV1().ConfigMaps(cilium.Namespace).Get(ctx, staleRequest, metav1.GetOptions{}); err == nil {
		t.Fatalf("the request %s the dead controller left without a Job is still there", staleRequest)
	}

	// 2. kwok "completes" the Job without a release: the Job's word is not
	// taken, the lock is given back, and one second attempt follows after
	// the back-off, counted from the Job's end, not from a controller's
	// memory.
	h.until("Job "+first.Name+" ended", func(jobs []batchv1.Job) bool {
		st, _ := cnijob.State(&jobs[0])

		return st != cnijob.Running
	})

	second := h.until("the second attempt", func(jobs []batchv1.Job) bool {
		return len(jobs) > 0 && jobs[len(jobs)-1].Name != first.Name
	})
	if !strings.HasSuffix(second.Name, "-2") || second.Annotations["ichor.maesh.dev/cni-request"] != first.Annotations["ichor.maesh.dev/cni-request"] {
		t.Fatalf("the second attempt is %s (%v), want attempt 2 of the same request", second.Name, second.Annotations)
	}

	ended := cnijob.Ended(&h.jobs()[0])
	if gap := second.CreationTimestamp.Sub(ended); gap < firstBackoff-time.Second {
		t.Fatalf("the second attempt started %s after the first ended, before the back-off of %s", gap, firstBackoff)
	}

	if !h.sawFailed {
		t.Fatal("no controller reported HandoverFailed for the Job that ended without a release")
	}

	// 3. The release, applied as the Job would: the controllers that follow
	// finish the hand-over without a second Helm run.
	applied := testworld.ApplyAsTheCNIJob(t, cfg, k, second)
	if applied.Action != cilium.ActionAdopted {
		t.Fatalf("the first Helm run: %+v, want the bootstrap objects adopted", applied)
	}

	h.until("CNIHandover=True", func([]batchv1.Job) bool {
		return apimeta.IsStatusConditionTrue(h.cluster().Status.Conditions, ichorv1alpha1.CNIHandoverCondition)
	})

	// A few more controllers: nothing moves.
	for range 3 {
		h.step()
	}

	c := h.cluster()
	if c.Status.CNI.ValuesHash != applied.ValuesSHA256 {
		t.Fatalf("status.cni.valuesHash %q, want the applied values' %q", c.Status.CNI.ValuesHash, applied.ValuesSHA256)
	}

	if jobs, cms := h.jobs(), h.requests(); len(jobs) != 0 || len(cms) != 0 {
		t.Fatalf("after the hand-over: Jobs %v, requests %v", jobNames(jobs), cms)
	}

	if holder := h.holder(); holder != "" {
		t.Fatalf("after the hand-over the lock is held by %q", holder)
	}

	if in := h.input(); len(in.InlineManifests) != 0 {
		t.Fatalf("the render after the hand-over keeps inline manifests: %d", len(in.InlineManifests))
	}

	if d, err := cilium.Deployed(ctx, cfg); err != nil || d == nil || d.Status != "deployed" || d.Revision != 1 {
		t.Fatalf("Helm's record after the hand-over: %+v, %v (want revision 1: one Helm run)", d, err)
	}

	t.Logf("%d controllers, %d of them dead before their status write", h.steps, h.deaths)
}

// handover runs the hand-over's reconciles, each in a new controller, and
// checks its invariants after each.
type handover struct {
	t   *testing.T
	k   kubernetes.Interface
	key types.NamespacedName

	steps, deaths int
	sawFailed     bool
}

// until steps until done holds of the hand-over's Jobs, and returns the
// last of them then (nil when none).
func (h *handover) until(what string, done func([]batchv1.Job) bool) *batchv1.Job {
	h.t.Helper()

	deadline := time.Now().Add(waitTimeout)

	for {
		res := h.step()

		if jobs := h.jobs(); done(jobs) {
			if len(jobs) == 0 {
				return nil
			}

			return &jobs[len(jobs)-1]
		}

		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not there after %d controllers; Jobs %v, condition %+v", what, h.steps, jobNames(h.jobs()),
				apimeta.FindStatusCondition(h.cluster().Status.Conditions, ichorv1alpha1.CNIHandoverCondition))
		}

		// A controller waits as long as it asked to, but a short while at
		// most: the world moves on its own (kwok ends Jobs).
		time.Sleep(min(max(res.RequeueAfter, 100*time.Millisecond), time.Second))
	}
}

// step is one controller process: it reconciles the cluster once and dies,
// every other time before its status write, then the invariants are checked.
func (h *handover) step() ctrl.Result {
	h.t.Helper()

	dies := h.steps%2 == 1
	h.steps++

	if dies {
		h.deaths++
	}

	res := testworld.ReconcileOnce(h.t, suite.NewManager, func(ctx context.Context, mgr ctrl.Manager) ctrlreconcile.Reconciler {
		testenv.Must(h.t, machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()))

		c := mgr.GetClient()
		if dies {
			direct, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
			testenv.Must(h.t, err)

			c = interceptor.NewClient(direct, interceptor.Funcs{
				SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
					return errDied
				},
			})
		}

		return &cnihandover.Reconciler{
			Client: c, APIReader: mgr.GetAPIReader(), FirstBackoff: firstBackoff, Image: "ghcr.io/maeshinshin/ichor-installer:test",
		}
	}, h.key)

	h.check()

	return res
}

// check asserts the hand-over's invariants on the world as it is.
func (h *handover) check() {
	h.t.Helper()

	c := h.cluster()
	cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition)

	if cond != nil && cond.Reason == ichorv1alpha1.CNIHandoverFailedReason {
		h.sawFailed = true

		if !strings.Contains(cond.Message, "Helm's release record says there is no release") {
			h.t.Fatalf("step %d: HandoverFailed without Helm's word: %s", h.steps, cond.Message)
		}
	}

	jobs, running := h.jobs(), 0

	for i := range jobs {
		if st, _ := cnijob.State(&jobs[i]); st == cnijob.Running {
			running++
		}
	}

	if running > 1 {
		h.t.Fatalf("step %d: two hand-over Jobs run at once: %v", h.steps, jobNames(jobs))
	}

	for i := range jobs {
		if strings.HasSuffix(jobs[i].Name, "-3") {
			h.t.Fatalf("step %d: a third attempt %s, though the second has not ended", h.steps, jobs[i].Name)
		}

		if st, _ := cnijob.State(&jobs[i]); st == cnijob.Running && h.holder() != lock.CNIHelmIdentity {
			h.t.Fatalf("step %d: Job %s runs while the cluster lock is held by %q", h.steps, jobs[i].Name, h.holder())
		}
	}

	if handedOver := cond != nil && cond.Status == metav1.ConditionTrue; !handedOver {
		if in := h.input(); len(in.InlineManifests) != 1 || in.InlineManifests[0].Name != cilium.InlineManifestName {
			h.t.Fatalf("step %d: the render dropped the bootstrap Cilium before the hand-over was recorded (%d inline manifests)", h.steps, len(in.InlineManifests))
		}
	}
}

func (h *handover) cluster() *ichorv1alpha1.TalosCluster {
	h.t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(h.t, k8s.Get(context.Background(), h.key, c))

	return c
}

func (h *handover) jobs() []batchv1.Job {
	h.t.Helper()

	jobs, err := h.k.BatchV1().Jobs(cilium.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: cnijob.HandoverSelector})
	testenv.Must(h.t, err)

	var out []batchv1.Job

	for _, j := range jobs.Items {
		if j.DeletionTimestamp == nil {
			out = append(out, j)
		}
	}

	// In attempt order (the attempt is the name's last digit here).
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })

	return out
}

func (h *handover) requests() []string {
	h.t.Helper()

	cms, err := h.k.CoreV1().ConfigMaps(cilium.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: cnijob.HandoverSelector})
	testenv.Must(h.t, err)

	return names(cms.Items)
}

func (h *handover) holder() string {
	h.t.Helper()

	holder, err := lock.Holder(context.Background(), k8s, h.key)
	testenv.Must(h.t, err)

	return holder
}

// input is cp-1's render input, which carries the bootstrap Cilium until
// the hand-over.
func (h *handover) input() render.Input {
	h.t.Helper()

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(h.t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "cp-1"}, m))

	in, err := render.LoadInput(context.Background(), k8s, m)
	testenv.Must(h.t, err)

	return in
}

func jobNames(jobs []batchv1.Job) []string {
	out := make([]string, 0, len(jobs))
	for i := range jobs {
		out = append(out, jobs[i].Name)
	}

	return out
}

func names(cms []corev1.ConfigMap) []string {
	out := make([]string, 0, len(cms))
	for i := range cms {
		out = append(out, cms[i].Name)
	}

	sort.Strings(out)

	return out
}
