package operation

// The machine steps of a config rollout: plan, drain, apply, reboot, wait for the boot, uncordon.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// plan decides what the machine needs; a machine that runs the render is skipped.
func (w *work) plan(ctx context.Context) (ctrl.Result, error) {
	n, running, stored, failure := w.nodePlans(ctx)
	if failure != "" {
		return w.fail(failure)
	}
	defer n.Close()

	if running.Action == plan.ActionNone && stored.Action == plan.ActionNone {
		w.mp.Phase, w.mp.Message = ichorv1alpha1.MachineSkipped, "the node runs the rendered configuration"
		w.mp.Step = stepDone
		w.op.Status.ProgressSequence++

		return ichorreconcile.NextStep(), nil
	}

	p := running
	if p.Action == plan.ActionNone {
		p = stored
	}

	summary := fmt.Sprintf("%s: %s", p.Class, strings.Join(firstPaths(p.AllPaths(), 10), ", "))

	if p.Reboot {
		if w.cp() {
			if msg := w.controlPlaneDown(ctx, "rebooting "+w.m.Name); msg != "" {
				return w.fail(msg)
			}
		}

		return w.next(stepDrain, summary)
	}

	return w.next(stepApply, summary)
}

func firstPaths(paths []string, n int) []string {
	if len(paths) > n {
		return append(slices.Clone(paths[:n]), fmt.Sprintf("and %d more", len(paths)-n))
	}

	return paths
}

// drain runs the storage hook, then cordons and drains the machine's Node.
// An evacuation that reached its timeout with replicas still on the node
// (hook.PausedError) pauses the operation without draining: it is not a
// failed step, so nothing is resumed by hand; the operation goes on by itself
// once the storage system has moved them, or the timeout is raised
// (architecture, "Storage": "pause (never proceed to drain)").
func (w *work) drain(ctx context.Context) (ctrl.Result, error) {
	done, msg, err := w.r.Storage.Evacuate(ctx, w.m)
	if p, ok := hook.IsPaused(err); ok {
		return w.evacuationPaused(p), nil
	}

	if err != nil {
		return w.fail("the storage hook failed: " + err.Error())
	}

	if !done {
		w.mp.Message = "waiting for the storage system to evacuate the node: " + msg

		return w.poll(), nil
	}

	if c := apimeta.FindStatusCondition(w.op.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil && c.Reason == ichorv1alpha1.EvacuationPausedReason {
		setCond(w.op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			"the storage evacuation of "+w.m.Name+" finished; going on")
	}

	k, err := w.r.workload(ctx, w.op, w.st.Bundle)
	if err != nil {
		return w.fail("cannot reach the cluster's Kubernetes API to drain the node: " + err.Error())
	}

	node, err := workload.NodeAt(ctx, k, w.m.Status.NodeName, w.m.Spec.Address)
	if err != nil {
		return w.fail(err.Error())
	}

	after := stepApply

	switch {
	case isTalos(w.op):
		after = stepUpgrade
	case isNode(w.op):
		after = afterDrain(w.op)
	}

	if nodeAction(w.op) == ichorv1alpha1.NodeActionShutdown {
		// Talos's shutdown sequence cordons and drains the node itself, and
		// its boot sequence uncordons it (see node.go).
		return w.next(after, "storage evacuated; Talos's shutdown sequence drains the node")
	}

	if node == nil {
		return w.next(after, "no Kubernetes Node has the machine's address: nothing to drain")
	}

	if own := w.m.Status.NodeName; own != "" && !strings.EqualFold(own, node.Name) {
		return w.mismatch(&talos.IdentityMismatchError{
			Where: "Kubernetes Node " + node.Name + " at " + w.m.Spec.Address, Want: talos.MachineIdentity(w.m),
			Got: talos.Identity{NodeName: node.Name}, Fields: []string{"Node name"},
		})
	}

	if msg, err := w.drainCapacity(ctx, k, node.Name); err != nil {
		return ctrl.Result{}, err
	} else if msg != "" {
		w.op.Status.Overridable = true

		return w.fail(msg)
	}

	if err := workload.Drain(ctx, k, node, w.r.DrainTimeout, false); err != nil {
		return w.fail(fmt.Sprintf("draining Node %s did not finish: %v (check PodDisruptionBudgets and pods without a controller)", node.Name, err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "Drained", "Drain", "cordoned and drained Node %s of machine %s", node.Name, w.m.Name)

	return w.next(after, "cordoned and drained Node "+node.Name)
}

// evacuationPaused holds the operation at the drain of a machine whose
// storage evacuation reached its timeout: phase Paused, Ready with reason
// EvacuationPaused and the hook's message, the lock kept; it looks again at
// every poll.
func (w *work) evacuationPaused(p *hook.PausedError) ctrl.Result {
	msg := w.m.Name + ": " + p.Message
	if c := apimeta.FindStatusCondition(w.op.Status.Conditions, ichorv1alpha1.ReadyCondition); c == nil || c.Reason != ichorv1alpha1.EvacuationPausedReason {
		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, ichorv1alpha1.EvacuationPausedReason, "Evacuate", "%s", msg)
	}

	w.mp.Message = "not drained: " + p.Message
	w.op.Status.Phase = ichorv1alpha1.OperationPaused
	setCond(w.op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.EvacuationPausedReason, msg)

	return w.poll()
}

// apply sends the render: STAGED before a reboot, else in the plan's mode.
func (w *work) apply(ctx context.Context) (ctrl.Result, error) {
	n, running, stored, failure := w.nodePlans(ctx)
	if failure != "" {
		return w.fail(failure)
	}
	defer n.Close()

	p := running
	if p.Action == plan.ActionNone {
		p = stored
	}

	mode := p.Mode
	if !p.Reboot && mode == machine.ApplyConfigurationRequest_STAGED && running.Action != plan.ActionNone {
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	if p.Action != plan.ActionNone || stored.Action != plan.ActionNone {
		// What the machine went through so far is recorded before the
		// configuration goes out, and a decision taken on a stale read
		// (a conflict) sends nothing.
		w.mp.Message = fmt.Sprintf("applying the rendered configuration in mode %s", mode)

		if err := w.s.Persist(ctx); err != nil {
			return ctrl.Result{}, err
		}

		warnings, err := n.Apply(ctx, w.st.Result.Bytes, mode)
		if len(warnings) > 0 {
			w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, "ApplyWarnings", "DryRun",
				"the node %s warns about the configuration: %s", w.m.Name, strings.Join(warnings, "; "))
		}

		if err != nil {
			return w.fail("the node refused the configuration: " + talos.Message(err))
		}

		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, ichorv1alpha1.AppliedReason, "Apply",
			"applied the rendered configuration to %s in mode %s", w.m.Name, mode)
	}

	switch {
	case p.Reboot:
		return w.next(stepReboot, fmt.Sprintf("applied in mode %s; rebooting", mode))
	case p.Class == plan.APIServerRestart && w.cp():
		return w.next(stepWaitAPIServer, "applied; waiting for the kube-apiserver to restart and answer /readyz")
	default:
		return w.finishMachine(ctx, fmt.Sprintf("applied in mode %s", mode))
	}
}

func (w *work) reboot(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	return w.sendReboot(ctx, n, stepReboot, stepWaitBoot, "rebooting "+w.m.Name+" to run the staged configuration", "rebooting")
}

// sendReboot sends n a Reboot, recorded before it is sent (engineering rule
// 10): the machine moves to next and the status is written first, so a
// reconcile that comes after a crash, a lost write or a stale read finds it
// waiting for its boot and never sends a second Reboot; a Persist that
// conflicts sends none. A Reboot that fails (not sent, or not known to be)
// puts the machine back at step and fails it: resuming sends it again.
func (w *work) sendReboot(ctx context.Context, n *talos.Verified, step, next, event, msg string) (ctrl.Result, error) {
	w.r.next(w.op, w.mp, next, "reboot requested")

	if err := w.s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	if err := n.Reboot(ctx); err != nil {
		w.mp.Step = step

		return w.fail(talos.Message(err))
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "Rebooting", "Reboot", "%s", event)
	w.mp.Message = msg

	return ichorreconcile.NextStep(), nil
}

// waitBoot waits until the node runs the render (a staged configuration
// runs only after the reboot) and Talos reports it running and ready.
func (w *work) waitBoot(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		// The Reboot is recorded before it is sent and never sent twice: a
		// node that never went down may not have got it.
		return w.fail(fmt.Sprintf("the node did not come back running the rendered configuration within %s of its reboot request; "+
			"if it never went down (Ichor sends a Reboot once, and this one may not have reached it), reboot it with `talosctl -n %s reboot`",
			w.r.RebootTimeout, w.m.Spec.Address))
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		w.mp.Message = "rebooting: the node does not answer yet"

		return w.poll(), nil
	}
	defer n.Close()

	if w.mp.BootID != "" {
		// A node operation's reboot recorded the boot it left.
		if boot, err := n.BootID(ctx); err != nil || boot == w.mp.BootID {
			if err == nil && w.rebootNeverStarted(ctx, n) {
				at := w.mp.StepStartedAt.UTC().Format(time.RFC3339)
				w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, "RebootNotStarted", "Reboot",
					"the reboot of %s requested at %s never started: the node still runs on its old boot after %s; requesting it again", w.m.Name, at, w.r.RebootGrace)

				return w.next(stepNodeReboot, fmt.Sprintf("the reboot requested at %s never started (the node still runs on its old boot): it is requested again", at))
			}

			w.mp.Message = "rebooting: the node has not gone down yet"

			return w.poll(), nil
		}
	}

	stage, ready, err := n.Stage(ctx)
	if err != nil || stage != ichorv1alpha1.StageRunning || !ready {
		w.mp.Message = fmt.Sprintf("rebooting: the node is %s (ready %t)", orUnknown(stage), ready)

		return w.poll(), nil
	}

	if isNode(w.op) {
		return w.next(stepUncordon, "the node is back on a new boot")
	}

	running, _, err := w.diff(ctx, n)
	if err != nil || running.Action != plan.ActionNone {
		w.mp.Message = "rebooting: the node does not run the rendered configuration yet"

		return w.poll(), nil
	}

	return w.next(stepUncordon, "the node runs the rendered configuration")
}

// rebootNeverStarted says whether a node operation's recorded Reboot never
// reached the node (a controller killed between recording it and sending
// it): RebootGrace has passed and the node still answers on the boot it left
// in the running stage, for Talos enters the rebooting stage as soon as a
// reboot sequence starts (t:internal/app/machined/pkg/controllers/runtime/machine_status.go:
// SequenceReboot's start event sets MachineStageRebooting). A Reboot the node
// took (its answer said so) never gets here. The node operation's reboot step
// then checks the identity, records and sends again.
func (w *work) rebootNeverStarted(ctx context.Context, n *talos.Verified) bool {
	if !isNode(w.op) || w.elapsed() <= w.r.RebootGrace {
		return false
	}

	stage, _, err := n.Stage(ctx)

	return err == nil && stage == ichorv1alpha1.StageRunning
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}

	return s
}

// uncordon waits for the Node to be Ready, makes it schedulable, and for a
// control plane waits for its etcd member to answer.
func (w *work) uncordon(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		return w.fail(fmt.Sprintf("the node's Kubernetes Node or etcd member was not back within %s", w.r.RebootTimeout))
	}

	k, err := w.r.workload(ctx, w.op, w.st.Bundle)
	if err != nil {
		w.mp.Message = "waiting for the cluster's Kubernetes API: " + err.Error()

		return w.poll(), nil //nolint:nilerr // a node or API not back yet is waited for, not an error
	}

	node, err := workload.NodeAt(ctx, k, w.m.Status.NodeName, w.m.Spec.Address)
	if err != nil {
		w.mp.Message = err.Error()

		return w.poll(), nil //nolint:nilerr // a node or API not back yet is waited for, not an error
	}

	if node != nil {
		if own := w.m.Status.NodeName; own != "" && !strings.EqualFold(own, node.Name) {
			return w.mismatch(&talos.IdentityMismatchError{
				Where: "Kubernetes Node " + node.Name + " at " + w.m.Spec.Address, Want: talos.MachineIdentity(w.m),
				Got: talos.Identity{NodeName: node.Name}, Fields: []string{"Node name"},
			})
		}

		if !workload.NodeReady(node) {
			w.mp.Message = "waiting for Node " + node.Name + " to be Ready"

			return w.poll(), nil
		}

		if node.Spec.Unschedulable {
			if err := workload.Uncordon(ctx, k, node); err != nil {
				w.mp.Message = err.Error()

				return w.poll(), nil //nolint:nilerr // a node or API not back yet is waited for, not an error
			}
		}
	}

	// The storage system may schedule onto the node again (the evacuation
	// before the drain switched it off).
	if err := hook.Restore(ctx, w.r.Storage, w.m); err != nil {
		w.mp.Message = "re-enabling storage scheduling on the node: " + err.Error()

		return w.poll(), nil //nolint:nilerr // retried at the next poll, like the uncordon
	}

	if w.cp() {
		n, err := w.dial(ctx)
		if mm := talos.AsIdentityMismatch(err); mm != nil {
			return w.mismatch(mm)
		}

		if err != nil {
			w.mp.Message = "waiting for the node's etcd member: " + talos.Message(err)

			return w.poll(), nil
		}

		healthy := n.EtcdHealthy(ctx)

		member, why := true, ""
		if healthy && isTalos(w.op) {
			member, why = w.etcdMember(ctx, n)
		}

		n.Close()

		if !healthy {
			w.mp.Message = "waiting for the node's etcd member to answer"

			return w.poll(), nil
		}

		if !member {
			w.mp.Message = "waiting for etcd membership: " + why

			return w.poll(), nil
		}
	}

	if isTalos(w.op) {
		version, _ := talosTarget(w.op, w.st.Cluster)

		return w.finishMachine(ctx, "upgraded to "+version)
	}

	if isNode(w.op) {
		return w.finishMachine(ctx, "rebooted")
	}

	return w.finishMachine(ctx, "rebooted into the rendered configuration")
}

// drainCapacity is the capacity check before each drain of a cluster of
// three control planes and no worker (architecture, "Topology": such
// clusters "get a capacity check before each drain"): the pods the drain
// evicts must fit in what the other two nodes have free
// (guard.CheckDrainCapacity), or the step fails with what does not fit and
// the ways out. The override annotation lets it go on, recorded as a Warning
// Event on the TalosCluster. It returns the failure message, "" to go on.
func (w *work) drainCapacity(ctx context.Context, k kubernetes.Interface, node string) (string, error) {
	n, err := guard.CountApproved(ctx, w.r.Client, w.op.Namespace, w.op.Spec.ClusterName, "")
	if err != nil {
		return "", err
	}

	if !guard.CapacityChecked(n) {
		return "", nil
	}

	nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "cannot read the cluster's Nodes for the capacity check before draining " + node + ": " + err.Error(), nil //nolint:nilerr // a failed step, not a retry
	}

	pods, err := k.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "cannot read the cluster's pods for the capacity check before draining " + node + ": " + err.Error(), nil //nolint:nilerr // a failed step, not a retry
	}

	refusal := guard.CheckDrainCapacity(guard.NodeLoadsOf(nodes.Items, pods.Items), node)
	if refusal == nil {
		return "", nil
	}

	if _, ok := w.op.Annotations[ichorv1alpha1.OverrideDrainCapacityAnnotation]; ok {
		w.r.Recorder.Eventf(w.st.Cluster, w.op, corev1.EventTypeWarning, "OverrideDrainCapacity", "Drain",
			"operation %s: override (%s): draining %s although %s", w.op.Name, ichorv1alpha1.OverrideDrainCapacityAnnotation, node, refusal.Rule)

		return "", nil
	}

	return fmt.Sprintf("a cluster of three control planes and no worker is checked before each drain: %s. Scale workloads down or add a worker, "+
		"then resume (`ichor operation resume %s`); or go on knowing that they wait: `ichor operation resume %s --override` "+
		"(needs the override verb on the cluster and is recorded)", refusal.Rule, w.op.Name, w.op.Name), nil
}
