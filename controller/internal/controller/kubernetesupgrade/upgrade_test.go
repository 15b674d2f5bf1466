package kubernetesupgrade_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// sample is what the cluster reported at one moment: each answering
// kube-apiserver's version (by control plane) and each Node's kubelet version.
type sample struct {
	apiServers map[string]string
	kubelets   map[string]string
}

// sampler polls the versions until stop, which returns the samples.
func (ec *emuCluster) sampler(t *testing.T) (stop func() []sample) {
	t.Helper()

	cfg := ec.restConfig(t)

	var (
		mu      sync.Mutex
		samples []sample
		wg      sync.WaitGroup
	)

	ctx, cancel := context.WithCancel(context.Background())

	wg.Add(1)

	go func() {
		defer wg.Done()

		for ctx.Err() == nil {
			s := sample{apiServers: map[string]string{}, kubelets: map[string]string{}}

			for _, n := range ec.machines {
				if !strings.HasPrefix(n, "cp-") {
					continue
				}

				m, err := ec.world.Machine(n)
				if err != nil {
					continue
				}

				k, err := apiServerOf(cfg, m.IP())
				if err != nil {
					continue
				}

				if v, err := k.Discovery().ServerVersion(); err == nil {
					s.apiServers[n] = v.GitVersion
				}

				if len(s.kubelets) == 0 {
					if nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
						for _, node := range nodes.Items {
							s.kubelets[node.Name] = node.Status.NodeInfo.KubeletVersion
						}
					}
				}
			}

			if len(s.apiServers) > 0 && len(s.kubelets) > 0 {
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}

			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()

	return func() []sample {
		cancel()
		wg.Wait()

		mu.Lock()
		defer mu.Unlock()

		return samples
	}
}

// Rule (issue 22): a change of spec.kubernetesVersion one minor up starts a
// kubernetes operation that upgrades the control planes node by node, then
// kube-proxy and the bootstrap manifests, then every kubelet (control planes
// first); at no moment does a kubelet report a newer version than any API
// server (sampled from the Node objects and each API server's /version
// throughout); the images are pre-pulled through Talos's image API first;
// the bootstrap manifests are server-side applied again (a deleted object
// comes back, kube-proxy's DaemonSet moves to the new image); every Node ends
// on the new version and the cluster records it.
func TestKubernetesUpgrade(t *testing.T) {
	machines := []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}
	ec := newCluster(t, "127.0.112.0/24", machines)
	ctx := context.Background()
	k := ec.kube(t)

	// The candidates of 1.36.3 from the world's registry.
	testenv.Eventually(t, waitTimeout, "candidates in status", func() error {
		u := ec.cluster(t).Status.KubernetesUpgrade
		if len(u.Candidates) != 1 || u.Candidates[0].Version != "v"+to || u.Candidates[0].Group != ichorv1alpha1.CandidateRecommended {
			return fmt.Errorf("status.kubernetesUpgrade %+v", u)
		}

		return nil
	})

	// Talos created the bootstrap manifests' objects once; one deleted now is
	// not restored by Talos (create-only), only by the upgrade's sync.
	testenv.Eventually(t, waitTimeout, "kube-proxy at "+from, func() error {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if img := ds.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/kube-proxy:v"+from {
			return fmt.Errorf("kube-proxy image %s", img)
		}

		return nil
	})
	testenv.Must(t, k.CoreV1().ConfigMaps("kube-system").Delete(ctx, "kubeconfig-in-cluster", metav1.DeleteOptions{}))

	before := map[string][2]int{}
	for _, n := range machines {
		before[n] = [2]int{ec.rpcs(t, n, applyRPC), ec.rpcs(t, n, pullRPC)}
	}

	stop := ec.sampler(t)
	started := time.Now()

	ec.setKubernetesVersion(t, to)
	name := ec.operation(t, to)
	op := ec.waitPhase(t, name, ichorv1alpha1.OperationSucceeded)
	samples := stop()

	// No kubelet ever newer than any API server, and the samples saw the
	// stages: API servers at the target while kubelets were not yet.
	sawSkew := false

	for i, s := range samples {
		for node, kv := range s.kubelets {
			for cp, av := range s.apiServers {
				if kubeupgrade.Compare(kv, av) > 0 {
					t.Errorf("sample %d: kubelet %s of %s is newer than the kube-apiserver %s of %s", i, kv, node, av, cp)
				}
			}
		}

		if slices.Contains(mapValues(s.apiServers), "v"+to) && slices.Contains(mapValues(s.kubelets), "v"+from) {
			sawSkew = true
		}
	}

	if len(samples) < 10 || !sawSkew {
		t.Errorf("%d samples, API servers ahead of the kubelets seen: %t", len(samples), sawSkew)
	}

	// Every Node, API server and static pod on the target.
	cfg := ec.restConfig(t)

	for _, n := range machines {
		m := ec.emu(t, n)

		if strings.HasPrefix(n, "cp-") {
			a, err := apiServerOf(cfg, m.IP())
			testenv.Must(t, err)

			v, err := a.Discovery().ServerVersion()
			if err != nil || v.GitVersion != "v"+to {
				t.Errorf("%s's kube-apiserver: %v, %v", n, v, err)
			}

			node, err := (&talos.Dialer{}).Dial(ctx, m.IP(), ec.bundle)
			testenv.Must(t, err)

			pods, err := node.StaticPods(ctx)
			node.Close()
			testenv.Must(t, err)

			for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				if pods[c].Image != "registry.k8s.io/"+c+":v"+to || !pods[c].Ready {
					t.Errorf("%s's static pod %s: %+v", n, c, pods[c])
				}
			}
		}

		// Pre-pulled through the image API before anything was applied.
		var pulled []string

		for _, p := range m.PulledImages() {
			if p.At.After(started) {
				pulled = append(pulled, p.Namespace+":"+p.Image)
			}
		}

		want := []string{"system:ghcr.io/siderolabs/kubelet:v" + to}
		if strings.HasPrefix(n, "cp-") {
			want = []string{
				"cri:registry.k8s.io/kube-apiserver:v" + to, "cri:registry.k8s.io/kube-controller-manager:v" + to,
				"cri:registry.k8s.io/kube-scheduler:v" + to, "system:ghcr.io/siderolabs/kubelet:v" + to,
			}
		}

		if !slices.Equal(pulled, want) {
			t.Errorf("%s pulled %v, want %v", n, pulled, want)
		}

		// One apply (a dry run and the apply) per stage that concerns the
		// machine: control plane, kube-proxy and kubelet on a control plane,
		// the kubelet on a worker.
		applies := 2
		if strings.HasPrefix(n, "cp-") {
			applies = 6
		}

		if d := ec.rpcs(t, n, applyRPC) - before[n][0]; d != applies {
			t.Errorf("%s got %d ApplyConfiguration calls, want %d", n, d, applies)
		}
	}

	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	testenv.Must(t, err)

	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != "v"+to || !nodeReady(&n) {
			t.Errorf("Node %s: kubelet %s, ready %t", n.Name, n.Status.NodeInfo.KubeletVersion, nodeReady(&n))
		}
	}

	// The bootstrap manifests re-applied with Talos's field manager and inventory.
	ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	testenv.Must(t, err)

	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "registry.k8s.io/kube-proxy:v"+to || ds.Annotations["config.k8s.io/owning-inventory"] == "" {
		t.Errorf("kube-proxy: image %s, annotations %v", img, ds.Annotations)
	}

	if ds.Status.UpdatedNumberScheduled != ds.Status.DesiredNumberScheduled || ds.Status.NumberAvailable != ds.Status.DesiredNumberScheduled {
		t.Errorf("kube-proxy not rolled out: %+v", ds.Status)
	}

	if _, err := k.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeconfig-in-cluster", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted bootstrap manifest object was not applied again: %v", err)
	}

	inv, err := k.CoreV1().ConfigMaps("kube-system").Get(ctx, "talos-bootstrap-manifests-inventory", metav1.GetOptions{})
	testenv.Must(t, err)

	if _, ok := inv.Data["kube-system_kube-proxy_apps_DaemonSet"]; !ok {
		t.Errorf("the inventory lacks kube-proxy: %v", inv.Data)
	}

	// The operation's record: the pre-checks, every stage done, the kubelets
	// of the control planes before those of the workers.
	if op.Status.From != from || op.Status.To != to || !apimeta.IsStatusConditionTrue(op.Status.Conditions, ichorv1alpha1.PreChecksPassedCondition) {
		t.Errorf("from %q to %q, conditions %+v", op.Status.From, op.Status.To, op.Status.Conditions)
	}

	for _, st := range op.Status.Stages {
		if st.Phase != ichorv1alpha1.StageDone {
			t.Errorf("stage %s: %+v", st.Name, st)
		}
	}

	var lastCP, firstWorker time.Time

	for _, p := range op.Status.Machines {
		if p.Stage != ichorv1alpha1.KubernetesStageKubelet || p.Phase != ichorv1alpha1.MachineDone || p.Version != "v"+from {
			t.Errorf("%s: %+v", p.Name, p)

			continue
		}

		if p.Role == ichorv1alpha1.RoleControlPlane && p.CompletedAt.After(lastCP) {
			lastCP = p.CompletedAt.Time
		}

		if p.Role != ichorv1alpha1.RoleControlPlane && (firstWorker.IsZero() || p.StartedAt.Time.Before(firstWorker)) {
			firstWorker = p.StartedAt.Time
		}
	}

	if firstWorker.Before(lastCP) {
		t.Errorf("a worker's kubelet started (%s) before the last control plane's finished (%s)", firstWorker, lastCP)
	}

	// The cluster records the version; every machine is in sync with a render
	// that pins nothing.
	testenv.Eventually(t, waitTimeout, "the cluster records "+to, func() error {
		c := ec.cluster(t)
		if c.Status.KubernetesUpgrade.Version != to || c.Spec.KubernetesVersion != to {
			return fmt.Errorf("status.kubernetesUpgrade %+v", c.Status.KubernetesUpgrade)
		}

		return nil
	})

	for _, n := range machines {
		m := &ichorv1alpha1.TalosMachine{}
		testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ec.ns, Name: n}, m))

		if !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.InSyncCondition) {
			t.Errorf("%s is not in sync: %+v", n, m.Status.Conditions)
		}
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}

	return out
}

// Rule (issue 22): an API in use that the target removes (read from each
// kube-apiserver's apiserver_requested_deprecated_apis) pauses the operation
// at its pre-checks, names the API and the override, and changes nothing; the
// override annotation (with a resume) lets it go on, recorded as a Warning
// Event on the cluster; after the upgrade the API is no longer served.
func TestKubernetesUpgradeRemovedAPI(t *testing.T) {
	ec := newCluster(t, "127.0.113.0/24", []string{"cp-1", "w-1"}, runtimeConfigPatch())
	ctx := context.Background()
	cfg := ec.restConfig(t)

	a, err := apiServerOf(cfg, ec.emu(t, "cp-1").IP())
	testenv.Must(t, err)

	// A client of the removed version: networking.k8s.io/v1beta1 ServiceCIDRs
	// (deprecated in 1.34, removed in 1.37), served at 1.36 because the patch enables it.
	path := "/apis/networking.k8s.io/v1beta1/servicecidrs"
	testenv.Eventually(t, waitTimeout, path+" served", func() error {
		_, err := a.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)

		return err
	})

	before := [2]int{ec.rpcs(t, "cp-1", applyRPC), ec.rpcs(t, "cp-1", pullRPC)}

	ec.setKubernetesVersion(t, to)
	name := ec.operation(t, to)
	op := ec.waitPhase(t, name, ichorv1alpha1.OperationPaused)

	if op.Status.FailedStep != ichorv1alpha1.KubernetesStagePreCheck ||
		!strings.Contains(op.Status.FailureReason, "servicecidrs.v1beta1.networking.k8s.io (removed in 1.37)") ||
		!strings.Contains(op.Status.FailureReason, "ichor operation resume "+name+" --override") {
		t.Fatalf("failed step %q: %s", op.Status.FailedStep, op.Status.FailureReason)
	}

	found := false

	for _, r := range op.Status.RemovedAPIs {
		if r.Resource == "servicecidrs" && r.Group == "networking.k8s.io" && r.Version == "v1beta1" && r.RemovedRelease == "1.37" &&
			slices.Equal(r.ControlPlanes, []string{"cp-1"}) {
			found = true
		}
	}

	if !found {
		t.Fatalf("status.removedAPIs %+v", op.Status.RemovedAPIs)
	}

	if !op.Status.Overridable {
		t.Error("status.overridable is false, but the removed APIs are all that stops the upgrade")
	}

	// Nothing moved: no pull, no apply, the kubelets and the API server as they were.
	if after := [2]int{ec.rpcs(t, "cp-1", applyRPC), ec.rpcs(t, "cp-1", pullRPC)}; after != before {
		t.Fatalf("cp-1 got %d applies and %d pulls while refused", after[0]-before[0], after[1]-before[1])
	}

	if v, err := a.Discovery().ServerVersion(); err != nil || v.GitVersion != "v"+from {
		t.Fatalf("the API server moved: %v %v", v, err)
	}

	// The override, with a resume, goes on and is recorded on the cluster.
	ec.annotateOp(t, name, map[string]string{ichorv1alpha1.OverrideRemovedAPIsAnnotation: "1", ichorv1alpha1.ResumeAnnotation: "1"})
	op = ec.waitPhase(t, name, ichorv1alpha1.OperationSucceeded)

	if c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.PreChecksPassedCondition); c == nil || !strings.Contains(c.Message, "override") {
		t.Errorf("PreChecksPassed %+v", c)
	}

	testenv.Eventually(t, waitTimeout, "the override recorded on the cluster", func() error {
		var evs eventsv1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ec.ns)); err != nil {
			return err
		}

		for _, e := range evs.Items {
			if e.Reason == "OverrideRemovedAPIs" && e.Regarding.Kind == "TalosCluster" && e.Type == "Warning" && strings.Contains(e.Note, "servicecidrs") {
				return nil
			}
		}

		return fmt.Errorf("no OverrideRemovedAPIs Warning among %d Events", len(evs.Items))
	})

	// At 1.37 the removed version is gone, as the pre-check said.
	testenv.Eventually(t, waitTimeout, path+" no longer served", func() error {
		_, err := a.Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("GET %s: %w", path, err)
		}

		return nil
	})
}

// Rule (chaos): with the controller killed after every reconcile (each one
// a new controller process), the operation still finishes, resuming each
// time from its status, and no finished machine is repeated: each node gets
// exactly one apply per stage that concerns it and one pull of each image.
func TestKubernetesUpgradeChaos(t *testing.T) {
	machines := []string{"cp-1", "w-1", "w-2"}
	ec := newCluster(t, "127.0.114.0/24", machines)

	stopOperations()
	t.Cleanup(func() { testenv.Must(t, startOperations(context.Background())) })

	before := map[string][2]int{}
	for _, n := range machines {
		before[n] = [2]int{ec.rpcs(t, n, applyRPC), ec.rpcs(t, n, pullRPC)}
	}

	ec.setKubernetesVersion(t, to)
	name := ec.operation(t, to)

	chaos := testworld.RunChaos(t, 3*waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, ec.ns, name) },
		func() testworld.ChaosStep {
			return testworld.OperationStep(ec.getOp(t, name), func(p ichorv1alpha1.MachineProgress) string {
				if p.Step == "" {
					return ""
				}

				return p.Stage + "/" + p.Step
			})
		})
	steps := chaos.Steps

	for _, n := range machines {
		applies, pulls := 2, 1
		if strings.HasPrefix(n, "cp-") {
			applies, pulls = 6, 4
		}

		if d := [2]int{ec.rpcs(t, n, applyRPC) - before[n][0], ec.rpcs(t, n, pullRPC) - before[n][1]}; d != [2]int{applies, pulls} {
			t.Errorf("%s got %d ApplyConfiguration and %d Pull calls across the restarts, want %d and %d", n, d[0], d[1], applies, pulls)
		}

		// A machine's steps only ever go forward within a stage, and each
		// stage that concerns it ends once.
		seen := map[string]int{}
		for _, s := range steps[n] {
			if strings.HasSuffix(s, "/done") {
				seen[s]++
			}
		}

		for s, c := range seen {
			if c != 1 {
				t.Errorf("%s ended %s %d times: %v", n, s, c, steps[n])
			}
		}

		want := []string{"pre-pull/done", "kubelet/kubelet-wait", "kubelet/done"}
		if strings.HasPrefix(n, "cp-") {
			want = append(want, "control-plane/cp-wait", "control-plane/done", "kube-proxy/proxy-wait", "kube-proxy/done")
		}

		for _, s := range want {
			if !slices.Contains(steps[n], s) {
				t.Errorf("%s never seen at %s: %v", n, s, steps[n])
			}
		}

		if v := nodeVersion(t, ec, n); v != "v"+to {
			t.Errorf("%s's Node reports kubelet %s", n, v)
		}
	}
}

func nodeVersion(t *testing.T, ec *emuCluster, machine string) string {
	t.Helper()

	node, err := ec.kube(t).CoreV1().Nodes().Get(context.Background(), machine, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}

	return node.Status.NodeInfo.KubeletVersion
}
