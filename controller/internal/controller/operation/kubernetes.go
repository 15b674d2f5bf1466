package operation

// The kubernetes operation (architecture, "Upgrades"; issue 22): every
// machine to the cluster's spec.kubernetesVersion in talosctl upgrade-k8s's
// order (t:pkg/cluster/kubernetes/talos_managed.go), each stage finished on
// every machine before the next, so that no kubelet is ever newer than an
// API server:
//
//   - precheck (once): the target is the cluster's spec, one minor up at most
//     from what the machines run, paired with the cluster's Talos and Cilium;
//     every node running and Ready, etcd healthy, nothing waiting for a reboot;
//     no Cilium inline manifest left to hand over (the manifests sync would
//     re-apply it); no API in use that the target removes (each
//     kube-apiserver's apiserver_requested_deprecated_apis), unless the
//     override annotation says so, which is recorded on the cluster.
//   - pre-pull: the target's images on every node through Talos's image API
//     (control-plane images on control planes into the CRI's namespace, the
//     kubelet everywhere into the system one, as upgrade-k8s pre-pulls).
//   - control-plane: one control plane at a time, its render with the
//     control-plane components at the target applied (no reboot), then its
//     static pods running the target images and Ready, and its own /readyz.
//   - kube-proxy: the control planes' kube-proxy image moved likewise, until
//     the Manifest resource Talos renders from it carries the target.
//   - manifests: the Manifest resources of a control plane server-side applied
//     with Talos's field manager and inventory (workload.SyncManifests), then,
//     unless kube-proxy is replaced, the kube-proxy DaemonSet rolled out.
//   - kubelet: control planes first, then workers within maxUnavailable, each
//     render with its kubelet at the target applied, until its Node reports
//     the target version and is Ready.
//
// The intermediate configurations are renders with the components the
// operation has not reached pinned to the running version (kubeupgrade.Pins);
// the operation renders with its own status, so that what it applies is what
// the machine reconciler renders once the status is written. spec is never
// written. Per-machine stages record their progress in status.machines
// (stage, phase, step), so a restarted controller resumes where it stopped
// and never repeats a finished machine.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// Machine steps of the kubernetes operation's per-machine stages.
const (
	stepPull         = "pull"
	stepCPApply      = "cp-apply"
	stepCPWait       = "cp-wait"
	stepProxyApply   = "proxy-apply"
	stepProxyWait    = "proxy-wait"
	stepKubeletApply = "kubelet-apply"
	stepKubeletWait  = "kubelet-wait"
)

// Steps of the manifests stage (status.stages[].step).
const (
	manifestsApply   = "apply"
	manifestsRollout = "rollout"
)

// The kube-proxy DaemonSet Talos's bootstrap manifests create (t:…/k8s/internal/k8stemplates).
const (
	kubeProxyNamespace = "kube-system"
	kubeProxyName      = "kube-proxy"
	kubeProxyManifest  = "10-kube-proxy"
)

func isKubernetes(op *ichorv1alpha1.TalosOperation) bool { return kubeupgrade.IsKubernetes(op) }

// kubernetesTarget is the version the operation upgrades to ("1.37.2").
func kubernetesTarget(op *ichorv1alpha1.TalosOperation) string {
	return kubeupgrade.Normalize(op.Spec.Kubernetes.Version)
}

// machineStages are the per-machine stages and whether a worker takes part.
var machineStages = map[string]bool{
	ichorv1alpha1.KubernetesStagePrePull:      true,
	ichorv1alpha1.KubernetesStageControlPlane: false,
	ichorv1alpha1.KubernetesStageKubeProxy:    false,
	ichorv1alpha1.KubernetesStageKubelet:      true,
}

// firstKubernetesStep is the first step of a machine in a stage.
func firstKubernetesStep(stage string) string {
	switch stage {
	case ichorv1alpha1.KubernetesStagePrePull:
		return stepPull
	case ichorv1alpha1.KubernetesStageControlPlane:
		return stepCPApply
	case ichorv1alpha1.KubernetesStageKubeProxy:
		return stepProxyApply
	default:
		return stepKubeletApply
	}
}

// initStages records the stages, all pending, when the machines are selected.
func initStages(op *ichorv1alpha1.TalosOperation) {
	op.Status.Stages = nil
	for _, s := range ichorv1alpha1.KubernetesStages {
		op.Status.Stages = append(op.Status.Stages, ichorv1alpha1.OperationStage{Name: s, Phase: ichorv1alpha1.StagePending})
	}
}

func stageOf(op *ichorv1alpha1.TalosOperation, name string) *ichorv1alpha1.OperationStage {
	for i := range op.Status.Stages {
		if op.Status.Stages[i].Name == name {
			return &op.Status.Stages[i]
		}
	}

	op.Status.Stages = append(op.Status.Stages, ichorv1alpha1.OperationStage{Name: name, Phase: ichorv1alpha1.StagePending})

	return &op.Status.Stages[len(op.Status.Stages)-1]
}

// startStage moves the operation to stage: the stage in progress, and for a
// per-machine stage every machine it covers pending in it.
func (r *Reconciler) startStage(op *ichorv1alpha1.TalosOperation, stage, msg string) {
	now := metav1.NewTime(r.now())
	st := stageOf(op, stage)
	st.Phase, st.StartedAt, st.Message, st.Step = ichorv1alpha1.StageInProgress, &now, msg, ""

	if stage == ichorv1alpha1.KubernetesStageManifests {
		st.Step = manifestsApply
	}

	op.Status.Step = stage
	op.Status.ProgressSequence++

	workers, perMachine := machineStages[stage]
	if !perMachine {
		return
	}

	for i := range op.Status.Machines {
		p := &op.Status.Machines[i]
		if p.Role != ichorv1alpha1.RoleControlPlane && !workers {
			continue
		}

		*p = ichorv1alpha1.MachineProgress{Name: p.Name, Role: p.Role, Phase: ichorv1alpha1.MachinePending, Stage: stage}
	}
}

// finishStage marks the current stage done and starts the next one (or
// completes the operation after the last).
func (r *Reconciler) finishStage(ctx context.Context, s *scope, msg string) (ctrl.Result, error) {
	op := s.Object
	now := metav1.NewTime(r.now())
	st := stageOf(op, op.Status.Step)
	st.Phase, st.CompletedAt, st.Message = ichorv1alpha1.StageDone, &now, msg

	i := kubeupgrade.StageIndex(op.Status.Step)
	if i < 0 || i+1 >= len(ichorv1alpha1.KubernetesStages) {
		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
			fmt.Sprintf("upgraded Kubernetes from %s to %s: control planes, kube-proxy and the bootstrap manifests, then every kubelet",
				kubeupgrade.Describe(op.Status.From), kubeupgrade.Describe(op.Status.To)))
	}

	next := ichorv1alpha1.KubernetesStages[i+1]
	r.startStage(op, next, "")
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("upgrading Kubernetes to %s: stage %s", kubeupgrade.Describe(kubernetesTarget(op)), next))
	r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "StageStarted", "Stage", "stage %s done (%s); starting stage %s", ichorv1alpha1.KubernetesStages[i], msg, next)

	return ichorreconcile.NextStep(), nil
}

// kubernetesPrecheckPhase runs the pre-checks once; a failure pauses the
// operation on step precheck (resume runs them again).
func (r *Reconciler) kubernetesPrecheckPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	problems, notes, err := r.kubernetesPrecheck(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}

	st := stageOf(op, ichorv1alpha1.KubernetesStagePreCheck)
	if st.StartedAt == nil {
		now := metav1.NewTime(r.now())
		st.Phase, st.StartedAt = ichorv1alpha1.StageInProgress, &now
	}

	if len(problems) > 0 {
		msg := "pre-checks failed: " + strings.Join(problems, "; ")
		st.Message = truncate(msg, 4096)
		setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, msg)
		r.fail(op, nil, opStepPreCheck, msg)

		// The override goes past the removed APIs in use, and only when
		// they are all that is wrong.
		_, overridden := op.Annotations[ichorv1alpha1.OverrideRemovedAPIsAnnotation]
		op.Status.Overridable = len(op.Status.RemovedAPIs) > 0 && !overridden && len(problems) == 1

		return ctrl.Result{}, nil
	}

	msg := fmt.Sprintf("kubernetes %s to %s: the version skew, the Talos %s pairing, every node and etcd are fine",
		kubeupgrade.Describe(op.Status.From), kubeupgrade.Describe(op.Status.To), s.Cluster.Spec.TalosVersion)
	if len(op.Status.RemovedAPIs) == 0 {
		msg += "; no API the target removes is in use"
	}
	if len(notes) > 0 {
		msg += "; " + strings.Join(notes, "; ")
	}

	setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason, msg)

	return r.finishStage(ctx, s, msg)
}

// kubernetesPrecheck returns what stops the upgrade and notes that do not.
func (r *Reconciler) kubernetesPrecheck(ctx context.Context, s *scope) (problems, notes []string, err error) {
	op, c := s.Object, s.Cluster
	target := kubernetesTarget(op)
	from := kubeupgrade.Normalize(kubeupgrade.Running(c))
	op.Status.From, op.Status.To = from, target

	if !kubeupgrade.Same(target, c.Spec.KubernetesVersion) {
		problems = append(problems, fmt.Sprintf("the operation's target %s is not the cluster's spec.kubernetesVersion %s: "+
			"a kubernetes operation upgrades to the cluster's spec; set it with `ichor upgrade kubernetes %s`",
			kubeupgrade.Describe(target), kubeupgrade.Describe(c.Spec.KubernetesVersion), target))
	}

	if err := release.KubernetesSkew(from, target); err != nil {
		problems = append(problems, err.Error()+" (choose a version from `ichor upgrade kubernetes --list`)")
	}

	if err := release.CheckPair(c.Spec.TalosVersion, target); err != nil {
		problems = append(problems, err.Error()+"; upgrade Talos first, or choose a Kubernetes the running Talos supports")
	}

	if w := guard.UntestedCilium(c, target); w != "" {
		notes = append(notes, w)
	}

	cps := 0

	var bundleState *machinestate.State

	for i := range op.Status.Machines {
		p := &op.Status.Machines[i]

		m, merr := r.machine(ctx, op, p.Name)
		if merr != nil {
			return nil, nil, merr
		}

		if m == nil {
			continue
		}

		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			cps++
		}

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.RebootRequiredCondition) {
			problems = append(problems, fmt.Sprintf("%s has configuration changes waiting for a reboot (%s); roll them out first (`ichor config apply`): "+
				"the upgrade applies each machine's whole configuration without a reboot", m.Name, strings.Join(firstPaths(m.Status.RebootRequiredPaths, 5), ", ")))
		}

		st, lerr := machinestate.Load(ctx, r.Client, r.APIReader, m)
		if lerr != nil {
			if machinestate.IsStalled(lerr) {
				return []string{lerr.Error()}, nil, nil
			}

			return nil, nil, lerr
		}

		bundleState = st

		n, derr := r.Nodes.Dial(ctx, m.Spec.Address, st.Bundle)
		if derr != nil {
			problems = append(problems, fmt.Sprintf("%s does not answer: %s", m.Name, talos.Message(derr)))

			continue
		}

		stage, ready, serr := n.Stage(ctx)
		n.Close()

		if serr != nil || stage != ichorv1alpha1.StageRunning || !ready {
			problems = append(problems, fmt.Sprintf("%s is not running and ready (stage %s)", m.Name, orUnknown(stage)))
		}
	}

	if bundleState == nil {
		return problems, notes, nil
	}

	if msg := r.etcdHealthy(ctx, op, bundleState.Bundle); msg != "" {
		problems = append(problems, "etcd is not healthy: "+msg)
	}

	if cps > 1 && c.Spec.Endpoint.Type == ichorv1alpha1.EndpointTypeNode {
		note := fmt.Sprintf("the cluster endpoint %s is one control plane's API server (type node): while that control plane's kube-apiserver restarts, "+
			"the cluster's API is away for everyone; a VIP or a load balancer keeps it up", c.Spec.Endpoint.Host)
		notes = append(notes, note)
		r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, "SingleEndpoint", "PreCheck", "%s", note)
	}

	cfg, kerr := r.workloadConfig(ctx, op, bundleState.Bundle)
	if kerr != nil {
		return append(problems, "cannot reach the cluster's Kubernetes API: "+kerr.Error()), notes, nil //nolint:nilerr // a pre-check's finding, not an error
	}

	problems = append(problems, r.nodesReady(ctx, op, cfg)...)
	problems = append(problems, r.handOverOutstanding(ctx, op, c, bundleState)...)

	removed, rproblems := r.removedAPIs(ctx, op, cfg, target)
	problems = append(problems, rproblems...)
	op.Status.RemovedAPIs = removed

	if len(removed) > 0 {
		names := make([]string, 0, len(removed))
		for _, a := range removed {
			names = append(names, kubeupgrade.DescribeRemovedAPI(a))
		}

		list := strings.Join(names, ", ")

		if _, ok := op.Annotations[ichorv1alpha1.OverrideRemovedAPIsAnnotation]; ok {
			note := fmt.Sprintf("override (%s): upgrading to %s although these APIs it removes are in use: %s", ichorv1alpha1.OverrideRemovedAPIsAnnotation,
				kubeupgrade.Describe(target), list)
			notes = append(notes, note)
			r.Recorder.Eventf(c, op, corev1.EventTypeWarning, "OverrideRemovedAPIs", "PreCheck", "operation %s: %s", op.Name, note)
		} else {
			problems = append(problems, fmt.Sprintf("APIs that Kubernetes %s removes are in use: %s. Move their clients and stored objects to the replacement "+
				"versions, then resume; or resume with the override (`ichor operation resume %s --override`, which needs the override verb on the cluster and is recorded)",
				kubeupgrade.Describe(target), list, op.Name))
		}
	}

	return problems, notes, nil
}

// nodesReady lists the selected machines whose Node is not Ready, and the
// kubelets newer than the target.
func (r *Reconciler) nodesReady(ctx context.Context, op *ichorv1alpha1.TalosOperation, cfg *rest.Config) []string {
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return []string{err.Error()}
	}

	var problems []string

	for _, p := range op.Status.Machines {
		m, merr := r.machine(ctx, op, p.Name)
		if merr != nil || m == nil {
			continue
		}

		node, nerr := workload.NodeAt(ctx, k, m.Status.NodeName, m.Spec.Address)

		switch {
		case nerr != nil:
			problems = append(problems, nerr.Error())
		case node == nil:
			problems = append(problems, fmt.Sprintf("no Kubernetes Node has the address of %s", m.Name))
		case !workload.NodeReady(node):
			problems = append(problems, "Node "+node.Name+" is not Ready")
		case kubeupgrade.Compare(node.Status.NodeInfo.KubeletVersion, kubernetesTarget(op)) > 0:
			problems = append(problems, fmt.Sprintf("the kubelet of Node %s is %s, newer than the target", node.Name, node.Status.NodeInfo.KubeletVersion))
		}
	}

	return problems
}

// handOverOutstanding refuses an upgrade while the control planes still
// render a Cilium inline manifest: the manifests sync would re-apply the
// bootstrap version of Cilium over Ichor's Helm release (architecture, "Cilium").
func (r *Reconciler) handOverOutstanding(ctx context.Context, op *ichorv1alpha1.TalosOperation, c *ichorv1alpha1.TalosCluster, st *machinestate.State) []string {
	if c.Spec.CNI.Preset != ichorv1alpha1.CNIPresetCilium {
		return nil
	}

	cp, err := r.firstControlPlane(ctx, op)
	if err != nil || cp == nil {
		return nil
	}

	n, err := r.Nodes.Dial(ctx, cp.Spec.Address, st.Bundle)
	if err != nil {
		return []string{fmt.Sprintf("%s does not answer: %s", cp.Name, talos.Message(err))}
	}
	defer n.Close()

	ms, err := n.Manifests(ctx)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s", cp.Name, talos.Message(err))}
	}

	var inline []string

	for _, m := range ms {
		if strings.HasPrefix(m.ID, talos.InlineManifestPrefix) {
			inline = append(inline, m.ID)
		}
	}

	if len(inline) == 0 {
		return nil
	}

	return []string{fmt.Sprintf("the control planes still render the inline manifest(s) %s: the CNI hand-over is outstanding (condition %s), and the manifests sync "+
		"of the upgrade would re-apply them over Cilium's Helm release; wait for the hand-over to finish", strings.Join(inline, ", "), ichorv1alpha1.CNIHandoverCondition)}
}

// removedAPIs reads every control plane's apiserver_requested_deprecated_apis.
func (r *Reconciler) removedAPIs(ctx context.Context, op *ichorv1alpha1.TalosOperation, cfg *rest.Config, target string) ([]ichorv1alpha1.RemovedAPI, []string) {
	cps, err := r.controlPlanes(ctx, op)
	if err != nil {
		return nil, []string{err.Error()}
	}

	var (
		all      []ichorv1alpha1.RemovedAPI
		problems []string
	)

	for _, cp := range cps {
		body, err := workload.APIServerMetrics(ctx, cfg, cp.Spec.Address)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cannot read the APIs in use from %s: %v", cp.Name, err))

			continue
		}

		found, err := kubeupgrade.RemovedAPIs(body, target)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cannot read the APIs in use from %s: %v", cp.Name, err))

			continue
		}

		all = kubeupgrade.MergeRemovedAPIs(all, cp.Name, found)
	}

	if len(all) > 128 {
		all = all[:128]
	}

	return all, problems
}

// firstControlPlane is the first control plane of the operation's machines that still exists.
func (r *Reconciler) firstControlPlane(ctx context.Context, op *ichorv1alpha1.TalosOperation) (*ichorv1alpha1.TalosMachine, error) {
	for _, p := range op.Status.Machines {
		if p.Role != ichorv1alpha1.RoleControlPlane {
			continue
		}

		m, err := r.machine(ctx, op, p.Name)
		if err != nil {
			return nil, err
		}

		if m != nil {
			return m, nil
		}
	}

	return nil, nil
}

// kubernetesRolloutPhase runs the current stage.
func (r *Reconciler) kubernetesRolloutPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	if op.Status.Step == ichorv1alpha1.KubernetesStageManifests {
		return r.manifestsStage(ctx, s)
	}

	if _, ok := machineStages[op.Status.Step]; !ok {
		r.fail(op, nil, op.Status.Step, "unknown stage "+op.Status.Step)

		return ctrl.Result{}, nil
	}

	active, held, err := r.activeMachines(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}

	if len(active) > 0 {
		return r.stepMachines(ctx, s, active)
	}

	if len(held) > 0 {
		return r.stageHeld(op, held), nil
	}

	done, skipped := 0, 0

	for _, p := range op.Status.Machines {
		if p.Stage != op.Status.Step {
			continue
		}

		switch p.Phase {
		case ichorv1alpha1.MachineDone:
			done++
		case ichorv1alpha1.MachineSkipped:
			skipped++
		}
	}

	return r.finishStage(ctx, s, fmt.Sprintf("%d machine(s) done, %d already there or skipped", done, skipped))
}

// stageHeld is a stage whose remaining machines all carry a hold
// annotation: it waits, saying so in the stage and in Ready.
func (r *Reconciler) stageHeld(op *ichorv1alpha1.TalosOperation, held []string) ctrl.Result {
	msg := fmt.Sprintf("stage %s waits for the hold annotation to leave %s: every stage finishes on every machine before the next",
		op.Status.Step, strings.Join(held, ", "))
	stageOf(op, op.Status.Step).Message = msg
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.HeldReason, msg)

	return ctrl.Result{RequeueAfter: cmp.Or(r.HeldWait, DefaultHeldWait)}
}

// loadKubernetesState renders m with the pins of the operation's own status.
func (r *Reconciler) loadKubernetesState(ctx context.Context, s *scope, m *ichorv1alpha1.TalosMachine) (*machinestate.State, error) {
	return machinestate.Load(ctx, r.Client, r.APIReader, m, func(in *render.Input) {
		in.Kubernetes = kubeupgrade.PinsFor(in.Cluster, m, s.Object)
	})
}

// targetImages are the images machine m runs at the target: its render with
// nothing pinned.
func (w *work) targetImages(ctx context.Context) (kubeImages, error) {
	st, err := machinestate.Load(ctx, w.r.Client, w.r.APIReader, w.m, func(in *render.Input) { in.Kubernetes = kubeupgrade.Versions{} })
	if err != nil {
		return kubeImages{}, err
	}

	return imagesOf(st.Result), nil
}

// kubeImages are the Kubernetes images of a render ("" for what it lacks).
type kubeImages struct {
	APIServer, ControllerManager, Scheduler, Proxy, Kubelet string
	ProxyEnabled                                            bool
}

func imagesOf(res *render.Result) kubeImages {
	var out kubeImages

	cfg := res.Config
	isCP := cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane()

	if c := cfg.K8sAPIServerConfig(); c != nil && isCP {
		out.APIServer = c.Image()
	}

	if c := cfg.K8sControllerManagerConfig(); c != nil && isCP && c.Enabled() {
		out.ControllerManager = c.Image()
	}

	if c := cfg.K8sSchedulerConfig(); c != nil && isCP && c.Enabled() {
		out.Scheduler = c.Image()
	}

	if c := cfg.K8sProxyConfig(); c != nil && isCP {
		out.Proxy, out.ProxyEnabled = c.Image(), c.Enabled()
	}

	if c := cfg.K8sKubeletConfig(); c != nil {
		out.Kubelet = c.Image()
	}

	return out
}

// controlPlaneImages are the control-plane images by static pod component.
func (k kubeImages) controlPlaneImages() map[string]string {
	out := map[string]string{}

	for c, img := range map[string]string{"kube-apiserver": k.APIServer, "kube-controller-manager": k.ControllerManager, "kube-scheduler": k.Scheduler} {
		if img != "" {
			out[c] = img
		}
	}

	return out
}

// sortedKeys are a map's keys in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}

	slices.Sort(keys)

	return keys
}
