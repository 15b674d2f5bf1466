package operation

// The talos operation (architecture, "Upgrades"; issue 21): every machine to
// the cluster's spec.talosVersion and spec.schematic, control planes first,
// one at a time, then workers within spec.maxUnavailable.
//
//   - Pre-checks, once, as the operation's step "precheck": the target is the
//     cluster's spec (a talos operation never moves a version the spec does
//     not name), the Kubernetes pairing, the upgrade path from what every
//     machine runs, every node running and Ready, etcd healthy.
//   - Per machine: check (a machine that runs the target is skipped) → the
//     storage hook, cordon and drain (Talos's LifecycleService.Upgrade does
//     neither: talosctl drains client-side before it reboots,
//     t:cmd/talosctl/cmd/talos/upgrade.go) → LifecycleService.Upgrade into
//     the inactive slot (t:internal/app/lifecycle/lifecycle.go: "the reboot
//     comes as a separate API call") → Reboot → verify a new boot running the
//     target version and schematic (back on the previous version is the A/B
//     fallback: a failure) → Node Ready, uncordon, the etcd member healthy and
//     listed.
//
// The version contract is never changed here.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// Steps of the talos operation.
const (
	// opStepPreCheck is the operation's pre-check step (between select and rollout).
	opStepPreCheck = "precheck"

	stepCheck = "check"
	// stepUpgrade sends LifecycleService.Upgrade.
	stepUpgrade = "upgrade"
	// stepUpgrading records that the Upgrade was sent (Persist before the
	// call): a reconcile that finds it did not see the answer.
	stepUpgrading = "upgrading"
	// stepRebootUpgrade sends the Reboot that activates the new slot.
	stepRebootUpgrade = "reboot-upgrade"
	// stepWaitUpgrade waits for the new boot and verifies what it runs.
	stepWaitUpgrade = "wait-upgrade"
)

func isTalos(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationTalos
}

// talosTarget is the version and schematic the operation upgrades to: its
// spec.talos, else the cluster's spec. schematic "" is not compared.
func talosTarget(op *ichorv1alpha1.TalosOperation, c *ichorv1alpha1.TalosCluster) (version, schematic string) {
	if t := op.Spec.Talos; t != nil {
		version, schematic = t.Version, t.Schematic
	}

	if version == "" && c != nil {
		version = c.Spec.TalosVersion
	}

	if schematic == "" && c != nil {
		schematic = c.Spec.Schematic
	}

	return version, schematic
}

// runsTarget reports whether a node runs the target.
func runsTarget(r talos.Running, version, schematic string) bool {
	return r.Version == version && (schematic == "" || r.Schematic == schematic)
}

func describeRunning(r talos.Running) string {
	if r.Schematic == "" {
		return r.Version
	}

	return fmt.Sprintf("%s (schematic %.12s…)", r.Version, r.Schematic)
}

// precheckPhase runs the talos operation's pre-checks once, after the
// machines were selected; a failure pauses the operation on step precheck
// (the resume annotation runs them again). Their outcome is the
// PreChecksPassed condition.
func (r *Reconciler) precheckPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if halted(op) || op.Status.Step != opStepPreCheck {
		return ctrl.Result{}, nil
	}

	if isKubernetes(op) {
		return r.kubernetesPrecheckPhase(ctx, s)
	}

	problems, from, err := r.precheck(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}

	if len(problems) > 0 {
		msg := "pre-checks failed: " + strings.Join(problems, "; ")
		setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, msg)
		r.fail(op, nil, opStepPreCheck, msg)

		return ctrl.Result{}, nil
	}

	version, _ := talosTarget(op, s.Cluster)
	op.Status.From, op.Status.To = from, version
	setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("talos %s to %s: the upgrade path, the Kubernetes %s pairing, every node and etcd are fine", from, version, s.Cluster.Spec.KubernetesVersion))

	op.Status.Step = opStepRollout
	op.Status.ProgressSequence++

	return ichorreconcile.NextStep(), nil
}

// precheck returns what stops the upgrade (nothing: it may go) and the oldest
// version a selected machine runs.
func (r *Reconciler) precheck(ctx context.Context, s *scope) (problems []string, from string, err error) {
	op, c := s.Object, s.Cluster
	version, schematic := talosTarget(op, c)

	if version != c.Spec.TalosVersion || (op.Spec.Talos != nil && op.Spec.Talos.Schematic != "" && op.Spec.Talos.Schematic != c.Spec.Schematic) {
		problems = append(problems, fmt.Sprintf("the operation's target %s is not the cluster's spec.talosVersion %s (and spec.schematic): "+
			"a talos operation upgrades to the cluster's spec; set it with `ichor upgrade talos %s`", version, c.Spec.TalosVersion, version))
	}

	if perr := release.CheckPair(version, c.Spec.KubernetesVersion); perr != nil {
		problems = append(problems, perr.Error()+"; upgrade Kubernetes first, or choose a Talos that supports it (`ichor upgrade talos --list`)")
	}

	var bundleState *machinestate.State

	for i := range op.Status.Machines {
		p := &op.Status.Machines[i]

		m, merr := r.machine(ctx, op, p.Name)
		if merr != nil {
			return nil, "", merr
		}

		if m == nil {
			continue
		}

		st, lerr := machinestate.Load(ctx, r.Client, r.APIReader, m)
		if lerr != nil {
			if machinestate.IsStalled(lerr) {
				return []string{lerr.Error()}, "", nil
			}

			return nil, "", lerr
		}

		bundleState = st

		n, derr := r.Nodes.Dial(ctx, m.Spec.Address, st.Bundle)
		if derr != nil {
			problems = append(problems, fmt.Sprintf("%s does not answer: %s", m.Name, talos.Message(derr)))

			continue
		}

		running, rerr := n.Running(ctx)
		stage, ready, serr := n.Stage(ctx)
		n.Close()

		switch {
		case rerr != nil:
			problems = append(problems, fmt.Sprintf("%s: %s", m.Name, talos.Message(rerr)))

			continue
		case serr != nil || stage != ichorv1alpha1.StageRunning || !ready:
			problems = append(problems, fmt.Sprintf("%s is not running and ready (stage %s)", m.Name, orUnknown(stage)))
		}

		if from == "" || release.TalosPath(running.Version, from) == nil {
			from = running.Version
		}

		if runsTarget(running, version, schematic) {
			continue
		}

		if perr := release.TalosPath(running.Version, version); perr != nil {
			problems = append(problems, fmt.Sprintf("%s runs %s: %s (choose a version from `ichor upgrade talos --list`)", m.Name, running.Version, perr.Error()))
		}
	}

	if bundleState == nil {
		return problems, from, nil
	}

	if msg := r.etcdHealthy(ctx, op, bundleState.Bundle); msg != "" {
		problems = append(problems, "etcd is not healthy: "+msg)
	}

	if k, kerr := r.workload(ctx, op, bundleState.Bundle); kerr != nil {
		problems = append(problems, "cannot reach the cluster's Kubernetes API: "+kerr.Error())
	} else {
		for _, p := range op.Status.Machines {
			m, merr := r.machine(ctx, op, p.Name)
			if merr != nil || m == nil {
				continue
			}

			node, nerr := workload.NodeAt(ctx, k, m.Status.NodeName, m.Spec.Address)

			switch {
			case nerr != nil:
				problems = append(problems, nerr.Error())
			case node != nil && !workload.NodeReady(node):
				problems = append(problems, "Node "+node.Name+" is not Ready")
			}
		}
	}

	return problems, from, nil
}

// check decides whether the machine needs the upgrade, and may take it.
func (w *work) check(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	running, err := n.Running(ctx)
	if err != nil {
		return w.fail(talos.Message(err))
	}

	version, schematic := talosTarget(w.op, w.st.Cluster)
	if runsTarget(running, version, schematic) {
		w.mp.Phase, w.mp.Message, w.mp.Step = ichorv1alpha1.MachineSkipped, "the node runs "+describeRunning(running), stepDone
		w.op.Status.ProgressSequence++

		return ichorreconcile.NextStep(), nil
	}

	if err := release.TalosPath(running.Version, version); err != nil {
		return w.fail(fmt.Sprintf("the node runs %s: %v", running.Version, err))
	}

	if w.cp() {
		if msg := w.controlPlaneDown(ctx, "upgrading "+w.m.Name); msg != "" {
			return w.fail(msg)
		}
	}

	w.mp.Version = running.Version

	return w.next(stepDrain, fmt.Sprintf("upgrading from %s to %s", describeRunning(running), version))
}

// installerImage is the installer of the target for this machine, as the
// render would name it with the cluster's spec at the target.
func (w *work) installerImage() (string, error) {
	c := w.st.Cluster.DeepCopy()
	c.Spec.TalosVersion, c.Spec.Schematic = talosTarget(w.op, w.st.Cluster)

	return render.InstallerImage(c, w.m)
}

// upgrade sends LifecycleService.Upgrade, recorded first (engineering rule
// 10): a reconcile that finds stepUpgrading did not see the answer and pauses
// rather than send a second one.
func (w *work) upgrade(ctx context.Context) (ctrl.Result, error) {
	image, err := w.installerImage()
	if err != nil {
		return w.fail(err.Error())
	}

	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	boot, err := n.BootID(ctx)
	if err != nil {
		return w.fail(talos.Message(err))
	}

	w.mp.BootID = boot
	w.r.next(w.op, w.mp, stepUpgrading, "installing "+image+" into the inactive boot slot")

	if err := w.s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	res, err := n.Upgrade(ctx, image)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			// The controller is stopping: the next one finds stepUpgrading.
			return ctrl.Result{}, ctx.Err()
		}

		w.mp.Step = stepUpgrade

		return w.fail(fmt.Sprintf("the node did not install %s: %s (check that the release source offers that version and the node can pull the image)",
			image, talos.Message(err)))
	}

	if res.Legacy {
		// MachineService.Upgrade reboots by itself (its sequence cordons and drains first).
		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "Upgrading", "Upgrade",
			"%s has no LifecycleService: sent the legacy Upgrade of %s, which reboots the node", w.m.Name, image)

		return w.next(stepWaitUpgrade, "legacy upgrade sent; the node reboots by itself")
	}

	w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeNormal, "Upgraded", "Upgrade", "installed %s into the inactive boot slot of %s", image, w.m.Name)

	return w.next(stepRebootUpgrade, "installed "+image+"; rebooting into it")
}

// upgradeUnknown is a machine found on stepUpgrading: the controller stopped
// before it saw the Upgrade's answer.
func (w *work) upgradeUnknown() (ctrl.Result, error) {
	w.mp.Step = stepUpgrade

	return w.fail("the controller stopped while the Upgrade of " + w.m.Name + " was being sent, so whether the node installed it is not known; " +
		"Ichor sends an Upgrade once. Resuming sends it again (installing into the inactive slot again replaces what is there)")
}

// rebootUpgrade sends the Reboot that activates the new slot, recorded first.
func (w *work) rebootUpgrade(ctx context.Context) (ctrl.Result, error) {
	n, err := w.dial(ctx)
	if mm := talos.AsIdentityMismatch(err); mm != nil {
		return w.mismatch(mm)
	}

	if err != nil {
		return w.fail("cannot reach the node: " + talos.Message(err))
	}
	defer n.Close()

	if boot, err := n.BootID(ctx); err == nil {
		w.mp.BootID = boot
	}

	return w.sendReboot(ctx, n, stepRebootUpgrade, stepWaitUpgrade, "rebooting "+w.m.Name+" into the upgraded slot", "rebooting into the upgraded slot")
}

// waitUpgrade waits for a new boot and checks that it runs the target: a
// node back on its previous version booted the previous A/B slot, which
// fails the machine (resuming sends the Upgrade again).
func (w *work) waitUpgrade(ctx context.Context) (ctrl.Result, error) {
	if w.elapsed() > w.r.RebootTimeout {
		w.mp.Step = stepRebootUpgrade

		return w.fail(fmt.Sprintf("the node did not come back on a new boot within %s of its reboot request; resuming sends the Reboot again "+
			"(check the node's console first)", w.r.RebootTimeout))
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

	boot, err := n.BootID(ctx)
	if err != nil || boot == w.mp.BootID {
		w.mp.Message = "rebooting: the node has not gone down yet"

		return w.poll(), nil
	}

	stage, ready, err := n.Stage(ctx)
	if err != nil || stage != ichorv1alpha1.StageRunning || !ready {
		w.mp.Message = fmt.Sprintf("rebooting: the node is %s (ready %t)", orUnknown(stage), ready)

		return w.poll(), nil
	}

	running, err := n.Running(ctx)
	if err != nil {
		w.mp.Message = talos.Message(err)

		return w.poll(), nil
	}

	version, schematic := talosTarget(w.op, w.st.Cluster)
	if !runsTarget(running, version, schematic) {
		w.mp.Step = stepUpgrade
		msg := fmt.Sprintf("the node came back on a new boot running %s, not %s: the upgraded slot did not boot and the bootloader fell back to the previous A/B slot. "+
			"Read the node's boot log (`talosctl -n %s dmesg`); resuming sends the Upgrade again", describeRunning(running), version, w.m.Spec.Address)
		w.r.Recorder.Eventf(w.op, w.m, corev1.EventTypeWarning, "UpgradeRolledBack", "Verify", "%s: %s", w.m.Name, msg)

		return w.fail(msg)
	}

	return w.next(stepUncordon, "the node runs "+describeRunning(running))
}

// etcdMember checks that a control plane's etcd lists this machine as a member.
func (w *work) etcdMember(ctx context.Context, n *talos.Verified) (bool, string) {
	members, err := n.EtcdMembers(ctx)
	if err != nil {
		return false, talos.Message(err)
	}

	for _, m := range members {
		if talos.CompareMember(m, talos.MachineIdentity(w.m)) == nil && !m.Learner {
			return true, ""
		}
	}

	return false, "etcd does not list " + w.m.Name + " as a voting member yet"
}
