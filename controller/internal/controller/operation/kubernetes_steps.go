package operation

// The kubernetes operation's steps: per machine (pull, apply, wait) and the
// manifests stage the operation runs itself.

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// kubernetesStep runs one step of a machine in a kubernetes operation; ok is
// false for a step that is not the kubernetes operation's.
func (w *work) kubernetesStep(ctx context.Context) (res ctrl.Result, err error, ok bool) {
	target := kubeupgrade.Describe(kubernetesTarget(w.op))

	switch w.mp.Step {
	case stepPull:
		res, err = w.pull(ctx)
	case stepCPApply:
		res, err = w.kubeApply(ctx, stepCPWait, "kube-apiserver, kube-controller-manager and kube-scheduler at "+target)
	case stepCPWait:
		res, err = w.controlPlaneWait(ctx)
	case stepProxyApply:
		res, err = w.kubeApply(ctx, stepProxyWait, "kube-proxy at "+target)
	case stepProxyWait:
		res, err = w.proxyWait(ctx)
	case stepKubeletApply:
		res, err = w.kubeApply(ctx, stepKubeletWait, "the kubelet at "+target)
	case stepKubeletWait:
		res, err = w.kubeletWait(ctx)
	default:
		return ctrl.Result{}, nil, false
	}

	return res, err, true
}

// pull pre-pulls the machine's target images through Talos's image API, as
// upgrade-k8s does before it changes anything: the control-plane images into
// the CRI's namespace, the kubelet into the system one. Pulling is
// idempotent, so a step cut short pulls again.
func (w *work) pull(ctx context.Context) (ctrl.Result, error) {
	images, err := w.targetImages(ctx)
	if err != nil {
		return w.fail("cannot render the target configuration: " + err.Error())
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	type pull struct{ ns, image string }

	var pulls []pull

	cps := images.controlPlaneImages()
	for _, c := range sortedKeys(cps) {
		pulls = append(pulls, pull{talos.ImageNamespaceCRI, cps[c]})
	}

	if images.Kubelet != "" {
		pulls = append(pulls, pull{talos.ImageNamespaceSystem, images.Kubelet})
	}

	for _, p := range pulls {
		if _, err := n.PullImage(ctx, p.ns, p.image); err != nil {
			return w.fail(fmt.Sprintf("pre-pulling %s failed: %s (check that the registry offers that version and that the node reaches it)", p.image, talos.Message(err)))
		}
	}

	names := make([]string, 0, len(pulls))
	for _, p := range pulls {
		names = append(names, p.image)
	}

	return w.finishMachine(ctx, fmt.Sprintf("pulled %s", strings.Join(names, ", ")))
}

// kubeApply applies the machine's render, in which the operation's status
// has moved the stage's component to the target (the others stay pinned),
// without a reboot, then waits in step wait. A node that runs the render
// already goes to the wait (a controller stopped after the apply). A render
// that also carries changes waiting for a reboot is refused: those go
// through a config rollout, with a drain and a reboot.
func (w *work) kubeApply(ctx context.Context, wait, what string) (ctrl.Result, error) {
	n, running, stored, failure := w.nodePlans(ctx)
	if failure != "" {
		return w.fail(failure)
	}
	defer n.Close()

	w.recordVersionBefore(ctx, n)

	if running.Action == plan.ActionNone && stored.Action == plan.ActionNone {
		return w.next(wait, "the node runs the configuration with "+what)
	}

	p := running
	if p.Action == plan.ActionNone {
		p = stored
	}

	if p.Reboot {
		return w.fail(fmt.Sprintf("the configuration of %s also changes what needs a reboot (%s): roll that out first (`ichor config apply`), then resume",
			w.m.Name, strings.Join(firstPaths(p.Paths(plan.RebootRequired), 5), ", ")))
	}

	// Recorded before it goes out (a stale read conflicts and sends nothing);
	// applying the same render again is harmless.
	w.mp.Message = "applying the configuration with " + what

	if err := w.s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	warnings, err := n.Apply(ctx, w.st.Result.Bytes, machine.ApplyConfigurationRequest_NO_REBOOT)
	if len(warnings) > 0 {
		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, "ApplyWarnings", "DryRun",
			"the node %s warns about the configuration: %s", w.m.Name, strings.Join(warnings, "; "))
	}

	if err != nil {
		return w.fail("the node refused the configuration: " + talos.Message(err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, ichorv1alpha1.AppliedReason, "Apply",
		"applied the configuration with %s to %s (no reboot)", what, w.m.Name)

	return w.next(wait, "applied the configuration with "+what)
}

// recordVersionBefore records, once, what the stage's component ran before:
// the kube-apiserver's image version, or the kubelet's.
func (w *work) recordVersionBefore(ctx context.Context, n *talos.Verified) {
	if w.mp.Version != "" {
		return
	}

	switch w.mp.Stage {
	case ichorv1alpha1.KubernetesStageControlPlane:
		if pods, err := n.StaticPods(ctx); err == nil {
			if v := kubeupgrade.ImageVersion(pods["kube-apiserver"].Image); v != "" {
				w.mp.Version = "v" + v
			}
		}
	case ichorv1alpha1.KubernetesStageKubelet:
		if k, err := w.r.workload(ctx, w.op, w.st.Bundle); err == nil {
			if node, err := workload.NodeAt(ctx, k, w.m.Status.NodeName, w.m.Spec.Address); err == nil && node != nil {
				w.mp.Version = node.Status.NodeInfo.KubeletVersion
			}
		}
	}
}

// stillApplied checks, in a wait, that the node runs the render; a node that
// does not (the apply was lost) goes back to the apply step.
func (w *work) stillApplied(ctx context.Context, n *talos.Verified, apply string) (ctrl.Result, bool) {
	running, _, err := w.diff(ctx, n)
	if err != nil {
		w.mp.Message = "cannot read the node's configuration: " + talos.Message(err)

		return w.poll(), false
	}

	if running.Action != plan.ActionNone {
		res, _ := w.next(apply, "the node does not run the configuration; applying it again")

		return res, false
	}

	return ctrl.Result{}, true
}

// controlPlaneWait waits until the control plane's static pods run the
// target images and are Ready (StaticPodStatus, as upgrade-k8s waits for the
// mirror pods), then for its own kube-apiserver's /readyz.
func (w *work) controlPlaneWait(ctx context.Context) (ctrl.Result, error) {
	if limit := w.r.APIServerTimeout + w.r.APIServerSettle; w.elapsed() > limit {
		return w.fail(fmt.Sprintf("the control-plane static pods of %s did not run the target images and answer /readyz within %s of the apply "+
			"(read the node's kubelet and kube-apiserver logs); resuming waits again", w.m.Name, limit))
	}

	images, err := w.targetImages(ctx)
	if err != nil {
		return w.fail("cannot render the target configuration: " + err.Error())
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		w.mp.Message = "waiting for the node to answer: " + talos.Message(err)

		return w.poll(), nil
	}
	defer n.Close()

	if res, ok := w.stillApplied(ctx, n, stepCPApply); !ok {
		return res, nil
	}

	pods, err := n.StaticPods(ctx)
	if err != nil {
		w.mp.Message = talos.Message(err)

		return w.poll(), nil
	}

	want := images.controlPlaneImages()
	for _, c := range sortedKeys(want) {
		pod, ok := pods[c]

		switch {
		case !ok:
			w.mp.Message = fmt.Sprintf("waiting for the static pod %s to run", c)
		case pod.Image != want[c]:
			w.mp.Message = fmt.Sprintf("waiting for the static pod %s to run %s (it runs %s)", c, want[c], pod.Image)
		case !pod.Ready:
			w.mp.Message = fmt.Sprintf("waiting for the static pod %s to be Ready", c)
		default:
			continue
		}

		return w.poll(), nil
	}

	if err := w.apiServerReady(ctx); err != nil {
		w.mp.Message = "waiting for /readyz: " + err.Error()

		return w.poll(), nil
	}

	return w.finishMachine(ctx, "the control plane runs "+kubeupgrade.Describe(kubernetesTarget(w.op))+" and answers /readyz")
}

// proxyWait waits until the kube-proxy Manifest resource Talos renders from
// the node's configuration carries the target image (the manifests stage
// applies it to the cluster).
func (w *work) proxyWait(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.APIServerTimeout {
		return w.fail(fmt.Sprintf("Talos on %s did not render kube-proxy's manifest with the target image within %s; resuming waits again", w.m.Name, w.r.APIServerTimeout))
	}

	images, err := w.targetImages(ctx)
	if err != nil {
		return w.fail("cannot render the target configuration: " + err.Error())
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		w.mp.Message = "waiting for the node to answer: " + talos.Message(err)

		return w.poll(), nil
	}
	defer n.Close()

	if res, ok := w.stillApplied(ctx, n, stepProxyApply); !ok {
		return res, nil
	}

	if !images.ProxyEnabled {
		return w.finishMachine(ctx, "kube-proxy is replaced (disabled in the configuration): its image moved, nothing runs it")
	}

	ms, err := n.Manifests(ctx)
	if err != nil {
		w.mp.Message = talos.Message(err)

		return w.poll(), nil
	}

	for _, m := range ms {
		if m.ID != kubeProxyManifest {
			continue
		}

		for _, o := range m.Objects {
			if o.GetKind() == kindDaemonSet && o.GetName() == kubeProxyName && containerImage(o) == images.Proxy {
				return w.finishMachine(ctx, "Talos renders kube-proxy with "+images.Proxy)
			}
		}
	}

	w.mp.Message = "waiting for Talos to render kube-proxy's manifest with " + images.Proxy

	return w.poll(), nil
}

// containerImage is the first container's image of a workload object.
func containerImage(o *unstructured.Unstructured) string {
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		return ""
	}

	c, _ := cs[0].(map[string]any)
	img, _ := c["image"].(string)

	return img
}

// kubeletWait waits until the machine's Node reports the target kubelet
// version and is Ready (upgrade-k8s's checkNodeKubeletVersion).
func (w *work) kubeletWait(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		return w.fail(fmt.Sprintf("the Node of %s did not report kubelet %s and Ready within %s of the apply (read the node's kubelet log); resuming waits again",
			w.m.Name, kubeupgrade.Describe(kubernetesTarget(w.op)), w.r.RebootTimeout))
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		w.mp.Message = "waiting for the node to answer: " + talos.Message(err)

		return w.poll(), nil
	}

	res, ok := w.stillApplied(ctx, n, stepKubeletApply)
	n.Close()

	if !ok {
		return res, nil
	}

	k, err := w.r.workload(ctx, w.op, w.st.Bundle)
	if err != nil {
		w.mp.Message = "waiting for the cluster's Kubernetes API: " + err.Error()

		return w.poll(), nil //nolint:nilerr // waited for, not an error
	}

	node, err := workload.NodeAt(ctx, k, w.m.Status.NodeName, w.m.Spec.Address)
	if err != nil || node == nil {
		w.mp.Message = "waiting for the machine's Node"

		return w.poll(), nil //nolint:nilerr // waited for, not an error
	}

	want := kubeupgrade.Describe(kubernetesTarget(w.op))

	switch got := node.Status.NodeInfo.KubeletVersion; {
	case got != want:
		w.mp.Message = fmt.Sprintf("waiting for Node %s to report kubelet %s (it reports %s)", node.Name, want, got)

		return w.poll(), nil
	case !workload.NodeReady(node):
		w.mp.Message = "waiting for Node " + node.Name + " to be Ready"

		return w.poll(), nil
	}

	return w.finishMachine(ctx, fmt.Sprintf("Node %s runs kubelet %s", node.Name, want))
}

// manifestsStage syncs the bootstrap manifests (step apply), then waits for
// the kube-proxy DaemonSet to roll out (step rollout) unless kube-proxy is
// replaced.
func (r *Reconciler) manifestsStage(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	st := stageOf(op, ichorv1alpha1.KubernetesStageManifests)

	cp, err := r.firstControlPlane(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}

	if cp == nil {
		r.fail(op, nil, ichorv1alpha1.KubernetesStageManifests, "the operation has no control plane left to read the bootstrap manifests from")

		return ctrl.Result{}, nil
	}

	ms, err := machinestate.Load(ctx, r.Client, r.APIReader, cp)
	if err != nil {
		if machinestate.IsStalled(err) {
			r.fail(op, nil, ichorv1alpha1.KubernetesStageManifests, err.Error())

			return ctrl.Result{}, nil
		}

		return ctrl.Result{}, err
	}

	cfg, err := r.workloadConfig(ctx, op, ms.Bundle)
	if err != nil {
		st.Message = "waiting for the cluster's Kubernetes API: " + err.Error()

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waited for, not an error
	}

	if st.Step == manifestsRollout {
		return r.kubeProxyRollout(ctx, s, st, cfg)
	}

	n, err := r.Nodes.Dial(ctx, cp.Spec.Address, ms.Bundle)
	if err != nil {
		st.Message = fmt.Sprintf("waiting for %s to answer: %s", cp.Name, talos.Message(err))

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	manifests, err := n.Manifests(ctx)
	n.Close()

	if err != nil {
		st.Message = fmt.Sprintf("cannot read the Manifest resources of %s: %s", cp.Name, talos.Message(err))

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	var (
		objs  []*unstructured.Unstructured
		proxy bool
	)

	for _, m := range manifests {
		if strings.HasPrefix(m.ID, talos.InlineManifestPrefix) && s.Cluster.Spec.CNI.Preset == ichorv1alpha1.CNIPresetCilium {
			r.fail(op, nil, ichorv1alpha1.KubernetesStageManifests, fmt.Sprintf("%s renders the inline manifest %s: the CNI hand-over is outstanding, and syncing it "+
				"would re-apply the bootstrap Cilium; wait for the hand-over (condition %s), then resume", cp.Name, m.ID, ichorv1alpha1.CNIHandoverCondition))

			return ctrl.Result{}, nil
		}

		for _, o := range m.Objects {
			if o.GetKind() == "DaemonSet" && o.GetNamespace() == kubeProxyNamespace && o.GetName() == kubeProxyName {
				proxy = true
			}
		}

		objs = append(objs, m.Objects...)
	}

	// Server-side apply is idempotent: a step cut short applies again.
	res, err := workload.SyncManifests(ctx, cfg, objs)
	if err != nil {
		r.fail(op, nil, ichorv1alpha1.KubernetesStageManifests, fmt.Sprintf("syncing Talos's bootstrap manifests from %s failed after %d object(s): %v; "+
			"resuming applies them again", cp.Name, res.Applied, err))

		return ctrl.Result{}, nil
	}

	msg := fmt.Sprintf("server-side applied %d object(s) of the %d Manifest resources of %s as Talos's field manager (%d changed, %d created) and recorded them in its inventory",
		res.Applied, len(manifests), cp.Name, res.Changed, res.Created)
	r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "ManifestsSynced", "Sync", "%s", msg)

	if !proxy {
		return r.finishStage(ctx, s, msg+"; kube-proxy is replaced, so there is no rollout to wait for")
	}

	now := metav1.NewTime(r.now())
	st.Step, st.Message, st.StartedAt = manifestsRollout, msg+"; waiting for the kube-proxy DaemonSet to roll out", &now
	op.Status.ProgressSequence++

	return ichorreconcile.NextStep(), nil
}

// kubeProxyRollout waits for the kube-proxy DaemonSet to run its new template everywhere.
func (r *Reconciler) kubeProxyRollout(ctx context.Context, s *scope, st *ichorv1alpha1.OperationStage, cfg *rest.Config) (ctrl.Result, error) {
	op := s.Object

	if st.StartedAt != nil && r.now().Sub(st.StartedAt.Time) > r.RebootTimeout {
		r.fail(op, nil, ichorv1alpha1.KubernetesStageManifests, fmt.Sprintf("the kube-proxy DaemonSet did not roll out within %s (%s); resuming waits again",
			r.RebootTimeout, st.Message))

		return ctrl.Result{}, nil
	}

	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ctrl.Result{}, err
	}

	ok, why, err := workload.DaemonSetRolledOut(ctx, k, kubeProxyNamespace, kubeProxyName)
	if err != nil {
		st.Message = "reading the kube-proxy DaemonSet: " + err.Error()

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waited for, not an error
	}

	if !ok {
		st.Message = "waiting for the kube-proxy DaemonSet to roll out: " + why

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	return r.finishStage(ctx, s, "the bootstrap manifests are synced and the kube-proxy DaemonSet rolled out ("+why+")")
}
