package talosemu

import (
	"context"
	_ "embed" // the stages kwok plays
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/clock"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/controllers"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
)

// kwok (sigs.k8s.io/kwok, as a library) plays the pods' lifecycle on the emulated Nodes: one
// controller per emulated Kubernetes cluster. Our machines register and heartbeat their Node
// themselves (kubelet.go); kwok manages only the pods bound to the Nodes carrying
// kwokManagedLabel, which the world sets on the Nodes of running machines and removes when a
// machine goes down, so a powered-off machine's pods are left to the controller-manager as
// they would be with a real kubelet gone.
const (
	kwokManagedLabel = "talosemu.ichor.dev/kwok-managed"
	// kwokUser is the identity kwok's controller uses; on real Talos the kubelets do its work
	// with their system:node identities.
	kwokUser = "talosemu:kwok-controller"
	// kwokSync is how often the managed labels are reconciled (machines going down poke it).
	kwokSync = 2 * time.Second
)

// kwokNodeStage is a Node stage that matches no Node: kwok's pod controller only handles pods
// of Nodes its node controller tracks, and its node controller only runs with a Node stage;
// with this one it tracks our Nodes without ever changing them.
//
//go:embed kwok-node-untouched.yaml
var kwokNodeStage string

// kwokPodReadyAgainStage makes a running pod Ready again once its Node's machine runs again
// (the node lifecycle controller marked it NotReady while the machine was away; a real
// kubelet restarts its containers). kwok's fast stages only make Pending pods Ready.
//
//go:embed kwok-pod-ready-again.yaml
var kwokPodReadyAgainStage string

// kwokStages are kwok's default ("fast") pod stages — ready, complete (Job pods), delete —
// from sigs.k8s.io/kwok/kustomize/stage/pod/fast (embedded by that package), plus ours above.
// With the pod runner on, no pod stage matches the pods it runs (podrunner.go).
func kwokStages(podRunner bool) (map[internalversion.StageResourceRef][]*internalversion.Stage, error) {
	out := map[internalversion.StageResourceRef][]*internalversion.Stage{}

	for _, raw := range []string{podfast.DefaultPodReady, podfast.DefaultPodComplete, podfast.DefaultPodDelete, kwokPodReadyAgainStage, kwokNodeStage} {
		st, err := kwokconfig.UnmarshalWithType[*internalversion.Stage](raw)
		if err != nil {
			return nil, fmt.Errorf("kwok stage: %w", err)
		}

		if podRunner && st.Spec.ResourceRef.Kind == kindPod {
			excludeRunnerPods(st)
		}

		out[st.Spec.ResourceRef] = append(out[st.Spec.ResourceRef], st)
	}

	return out, nil
}

// kwokRunner is the kwok controller of one emulated cluster.
type kwokRunner struct {
	w       *World
	cluster string   // kubeClusterKey
	starter *Machine // the control plane whose config names the endpoint and CIDRs
	poke    chan struct{}
}

// startKwok starts the kwok controller of m's cluster once (the first API server of the
// cluster is ready). It runs until the world closes, following whichever API server is up.
func (w *World) startKwok(m *Machine) {
	key := kubeClusterKey(m.activeConfig())
	if key == "" {
		return
	}

	w.kwokMu.Lock()
	defer w.kwokMu.Unlock()

	if w.kwoks == nil {
		w.kwoks = map[string]*kwokRunner{}
	}

	if _, ok := w.kwoks[key]; ok || w.kwokCtx == nil {
		return
	}

	r := &kwokRunner{w: w, cluster: key, starter: m, poke: make(chan struct{}, 1)}
	w.kwoks[key] = r

	w.kwokWG.Add(1)

	go func() {
		defer w.kwokWG.Done()

		r.run(w.kwokCtx)
	}()
}

// pokeKwok asks the kwok runners to reconcile the managed labels now (a kubelet started or
// stopped).
func (w *World) pokeKwok() {
	w.kwokMu.Lock()
	defer w.kwokMu.Unlock()

	for _, r := range w.kwoks {
		select {
		case r.poke <- struct{}{}:
		default:
		}
	}
}

func (r *kwokRunner) run(ctx context.Context) {
	logger := kwoklog.NewLogger(nil, kwoklog.LevelWarn)
	if r.w.logger != nil {
		logger = kwoklog.NewLogger(r.w.logger.Writer(), kwoklog.LevelWarn)
	}

	ctx = kwoklog.NewContext(ctx, logger)

	var lastErr string

	for ctx.Err() == nil {
		err := r.start(ctx)
		if err == nil {
			break
		}

		if msg := err.Error(); msg != lastErr {
			r.w.logf("kwok: %v", err)
			lastErr = msg
		}

		sleepCtx(ctx, 2*time.Second)
	}

	t := time.NewTicker(kwokSync)
	defer t.Stop()

	for ctx.Err() == nil {
		if err := r.syncLabels(ctx); err != nil {
			if msg := err.Error(); msg != lastErr {
				r.w.logf("kwok: managed nodes: %v", err)
				lastErr = msg
			}
		}

		select {
		case <-ctx.Done():
		case <-t.C:
		case <-r.poke:
		}
	}
}

// start grants kwok's identity its ClusterRole and starts the controller.
func (r *kwokRunner) start(ctx context.Context) error {
	admin, err := r.starter.adminClient()
	if err != nil {
		return err
	}

	if err := applyKwokRBAC(ctx, admin); err != nil {
		return fmt.Errorf("granting %s its ClusterRole: %w", kwokUser, err)
	}

	// kwok stands for the kubelets, which follow a CA rotation (Talos
	// bootstraps a kubelet again when its client certificate no longer
	// verifies, t:internal/app/machined/pkg/controllers/k8s/kubelet_service.go
	// refreshKubeletCerts): its client signs with the CA that issues now
	rc, err := r.starter.followingRESTConfig(kwokUser, nil)
	if err != nil {
		return err
	}

	typed, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}

	stages, err := kwokStages(r.w.podBinDir != "")
	if err != nil {
		return err
	}

	cidr := "10.244.0.0/16"
	if nc := r.starter.activeConfig().K8sNetworkConfig(); nc != nil && len(nc.PodCIDRs()) > 0 {
		cidr = nc.PodCIDRs()[0].String()
	}

	ctr, err := controllers.NewController(controllers.Config{
		Clock:                        clock.RealClock{},
		TypedClient:                  typed,
		DynamicClient:                dyn,
		RESTClient:                   typed.Discovery().RESTClient(),
		RESTMapper:                   restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(typed.Discovery())),
		ManageNodesWithLabelSelector: kwokManagedLabel + "=true",
		// pod IPs come from the Node's podCIDR (controller-manager allocates one per Node),
		// this range only for a Node without one
		CIDR:                      cidr,
		LocalStages:               stages,
		PodPlayStageParallelism:   4,
		NodePlayStageParallelism:  1,
		PodsOnNodeSyncParallelism: 2,
		// 0: kwok holds no Node Leases, our kubelets renew them
		NodeLeaseDurationSeconds: 0,
		ID:                       kwokUser,
	})
	if err != nil {
		return err
	}

	return ctr.Start(ctx)
}

// syncLabels puts kwokManagedLabel on the Nodes of this cluster's machines whose kubelet runs
// and removes it from every other Node.
func (r *kwokRunner) syncLabels(ctx context.Context) error {
	running := map[string]bool{}

	for _, o := range r.w.machines {
		if o.kubeletUp.Load() && kubeClusterKey(o.activeConfig()) == r.cluster {
			running[o.nodeName()] = true
		}
	}

	admin, err := r.starter.adminClient()
	if err != nil {
		return err
	}

	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()

	nodes, err := admin.CoreV1().Nodes().List(sctx, metav1.ListOptions{})
	if err != nil {
		return err
	}

	var errs []string

	for i := range nodes.Items {
		n := &nodes.Items[i]

		_, has := n.Labels[kwokManagedLabel]

		var val any

		switch {
		case running[n.Name] && !has:
			val = argTrue
		case !running[n.Name] && has:
			val = nil // removes the label
		default:
			continue
		}

		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{kwokManagedLabel: val}}})
		if err != nil {
			return err
		}

		if _, err := admin.CoreV1().Nodes().Patch(sctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("node %s: %v", n.Name, err))
		}
	}

	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}

	return nil
}

// applyKwokRBAC creates the ClusterRole and ClusterRoleBinding of kwok's identity: what a
// kubelet does for the pods bound to it (read Nodes and pods, write pod status, delete pods
// being deleted, record events).
func applyKwokRBAC(ctx context.Context, c *kubernetes.Clientset) error {
	const get, patch, update = "get", "patch", "update"

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: kwokUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{get, "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{get, "list", "watch", "delete", patch, update}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{get, patch, update}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", patch, update}},
		},
	}

	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kwokUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kwokUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kwokUser}},
	}

	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()

	if _, err := c.RbacV1().ClusterRoles().Create(rctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	if _, err := c.RbacV1().ClusterRoleBindings().Create(rctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	return nil
}

// stopKwok stops every kwok controller (World.Close).
func (w *World) stopKwok() {
	w.kwokMu.Lock()
	cancel := w.kwokCancel
	w.kwokCancel = nil
	w.kwokMu.Unlock()

	if cancel != nil {
		cancel()
	}

	w.kwokWG.Wait()
}

// kwokState is the World's part for kwok.
type kwokState struct {
	kwokMu     sync.Mutex
	kwoks      map[string]*kwokRunner
	kwokCtx    context.Context //nolint:containedctx // the lifetime of the world's kwok controllers
	kwokCancel context.CancelFunc
	kwokWG     sync.WaitGroup
}
