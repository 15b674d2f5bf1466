// Package removal says, before anything is written, what removing a
// TalosMachine would do: the dangerous-operation refusals (the same guard
// call the CLI, the UI backend and the webhook make), the steps the
// controller's removal sequence takes in order, and the effects on the
// cluster in plain words (architecture, "Nodes": evacuate → drain → leave
// etcd → graceful reset of STATE and EPHEMERAL → delete the Node).
//
// It knows only what Ichor records: the counts are those of the approved
// TalosMachines, not of the live etcd members, which the controller checks
// again before a member leaves. `ichor node remove --dry-run`, the prompt of
// a real removal and the console's remove dialog all print this, so the
// three read the same.
package removal

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Options are a removal's options.
type Options struct {
	// Reboot reboots the node into maintenance mode after the reset instead
	// of powering it off (the remove-reboot annotation).
	Reboot bool
	// Force skips drain and reset, for dead hardware (spec.forceRemove).
	Force bool
}

// Preview is what a removal would do.
type Preview struct {
	// Allowed is true when no check refuses the removal now.
	Allowed bool
	// Refusals are the checks that refuse it.
	Refusals []guard.Refusal
	// Steps are the controller's steps, in order, for people.
	Steps []string
	// Effects are what changes for the cluster and the node, for people.
	Effects []string
}

// Refusals returns the refusals of a removal made through Ichor's CLI or UI:
// guard.ValidateMachineDelete with the allow-delete annotation set, since
// the removal sets it itself (the annotation guards against a plain
// `kubectl delete`, not against a removal a person has confirmed).
func Refusals(m *ichorv1alpha1.TalosMachine, facts guard.MachineFacts) []guard.Refusal {
	probe := m.DeepCopy()
	if probe.Annotations == nil {
		probe.Annotations = map[string]string{}
	}

	probe.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = "true"

	return guard.ValidateMachineDelete(probe, facts)
}

// Plan returns the preview of removing m with opts, from the guard's facts.
func Plan(m *ichorv1alpha1.TalosMachine, facts guard.MachineFacts, opts Options) Preview {
	if m.DeletionTimestamp != nil {
		phase := "starting"
		if m.Status.Removal != nil && m.Status.Removal.Phase != "" {
			phase = m.Status.Removal.Phase
		}

		return Preview{
			Refusals: []guard.Refusal{{
				Field:  "metadata.deletionTimestamp",
				Rule:   fmt.Sprintf("machine %s is already being removed (phase %s)", m.Name, phase),
				WayOut: fmt.Sprintf("follow it with `ichor node remove %s --wait` or on the node's page", m.Name),
			}},
			Steps:   []string{"The removal is under way, in phase " + phase + "."},
			Effects: []string{"nothing more: the removal that was started goes on"},
		}
	}

	p := Preview{Refusals: Refusals(m, facts)}
	p.Allowed = len(p.Refusals) == 0

	if m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved {
		p.Steps = []string{"The TalosMachine is deleted at once; nothing is sent to the node."}
		p.Effects = []string{
			fmt.Sprintf("no change to the cluster: the machine is %s, not a member", stateOrPending(m.Spec.Approval.State)),
			"a node that is still in maintenance mode is listed again as pending the next time discovery finds it",
		}

		return p
	}

	p.Effects = clusterEffects(m, facts)

	if m.Status.ConfigSentAt == nil && !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition) {
		// The controller's remove step: nothing was ever sent, nothing to undo.
		p.Steps = []string{"Nothing has been sent to the node yet: the TalosMachine is deleted at once, with no drain and no reset."}
		p.Effects = append(p.Effects, "the node is not touched: it never received the cluster's configuration")

		return p
	}

	p.Steps = steps(m, opts)
	p.Effects = append(p.Effects, nodeEffects(m, opts)...)

	return p
}

// clusterEffects are the counts before and after, from the approved TalosMachines.
func clusterEffects(m *ichorv1alpha1.TalosMachine, facts guard.MachineFacts) []string {
	c := facts.Cluster

	switch {
	case c == nil:
		return []string{fmt.Sprintf("TalosCluster %q does not exist: no cluster counts change", m.Spec.ClusterName)}
	case c.DeletionTimestamp != nil:
		return []string{fmt.Sprintf("TalosCluster %q is being deleted: its machines go with it", c.Name)}
	}

	var out []string

	switch {
	case guard.IsApprovedControlPlane(m):
		before := facts.OtherApprovedControlPlanes + 1
		after := facts.OtherApprovedControlPlanes
		out = append(out,
			fmt.Sprintf("control planes: %d → %d (the cluster declares %d)", before, after, c.Spec.ControlPlane.Count),
			etcdEffect(m, before, after))
	case guard.IsApprovedWorker(m):
		before := facts.OtherApprovedWorkers + 1
		after := facts.OtherApprovedWorkers

		line := fmt.Sprintf("workers: %d → %d", before, after)
		if after == 0 {
			if c.Spec.ControlPlane.Schedulable != nil && *c.Spec.ControlPlane.Schedulable {
				line += "; workloads then run on the control planes only"
			} else {
				line += "; the control planes are unschedulable, so nothing could run workloads"
			}
		}

		out = append(out, line)
	}

	return out
}

// etcdEffect is the etcd line for a control plane going from before to after voting members.
func etcdEffect(m *ichorv1alpha1.TalosMachine, before, after int) string {
	if m.Status.ConfigSentAt == nil && !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition) {
		return "etcd: no change (this control plane never joined)"
	}

	line := fmt.Sprintf("etcd: %d %s → %d", before, plural(before, "member", "members"), after)
	if after == 0 {
		return line + ": etcd and the cluster's state (Kubernetes objects) are destroyed"
	}

	quorum := guard.QuorumSize(after)
	tolerates := after - quorum
	line += fmt.Sprintf(", quorum %d, ", quorum)

	if tolerates == 0 {
		return line + "tolerates no failure until a control plane is added"
	}

	return line + fmt.Sprintf("tolerates %d %s", tolerates, plural(tolerates, "failure", "failures"))
}

// steps are the controller's removal phases for a machine that received its configuration.
func steps(m *ichorv1alpha1.TalosMachine, opts Options) []string {
	node := nodeName(m)
	cp := m.Spec.Role == ichorv1alpha1.RoleControlPlane

	out := []string{ichorv1alpha1.RemovalEvacuating + ": the storage evacuation hook runs, when one is configured."}

	if opts.Force {
		out = append(out, ichorv1alpha1.RemovalDraining+": skipped (force).")
	} else {
		out = append(out, ichorv1alpha1.RemovalDraining+": "+node+" is cordoned and drained with kubectl's drain rules "+
			"(evictions respect PodDisruptionBudgets; DaemonSet pods stay); a drain that does not finish in time pauses the removal, it never forces.")
	}

	if cp {
		check := "takes the cluster lock and, through another control plane, checks the live etcd members: the removal pauses if quorum " +
			"would break or fewer members than the cluster declares would remain"
		if opts.Force {
			out = append(out, ichorv1alpha1.RemovalLeavingEtcd+": Ichor "+check+"; then it removes this member through that control plane.")
		} else {
			out = append(out, ichorv1alpha1.RemovalLeavingEtcd+": Ichor "+check+"; the node leaves etcd itself during its graceful reset "+
				"(a node that does not answer is removed through another control plane).")
		}
	}

	if opts.Force {
		out = append(out, ichorv1alpha1.RemovalResetting+": skipped (force): nothing is sent to the node.")
	} else {
		out = append(out, ichorv1alpha1.RemovalResetting+": Ichor sends one graceful Talos reset that wipes STATE and EPHEMERAL, then the node "+
			afterReset(opts.Reboot)+"; a node that does not answer is removed without the wipe, and the Event says so.")
	}

	out = append(out, ichorv1alpha1.RemovalDeletingNode+": "+node+" is deleted from Kubernetes.")

	done := ichorv1alpha1.RemovalDone + ": the finalizer is dropped and the TalosMachine is deleted"
	if cp {
		done += "; the cluster lock is released"
	}

	return append(out, done+".")
}

// nodeEffects are what happens to the node itself.
func nodeEffects(m *ichorv1alpha1.TalosMachine, opts Options) []string {
	if opts.Force {
		out := []string{"no drain, no reset: the disks keep their data, and STATE still holds the cluster's configuration; " +
			"wipe the node before using it again"}
		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			out[0] = "no drain, no reset: the disks keep their data; Ichor removes the etcd member; " +
				"STATE still holds the cluster's configuration, wipe the node before using it again"
		}

		if opts.Reboot {
			out = append(out, "reboot has no effect with force: no reset is sent")
		}

		return append(out, nodeName(m)+" is deleted from Kubernetes")
	}

	out := []string{"the node is drained (evictions respect PodDisruptionBudgets)"}

	if opts.Reboot {
		out = append(out, "Talos resets STATE and EPHEMERAL and reboots into maintenance mode; the machine comes back as a pending machine")
	} else {
		out = append(out, "Talos resets STATE and EPHEMERAL and powers off; the machine comes back as a pending machine when it is powered on")
	}

	return append(out, "the installed Talos and the user disks are not touched", nodeName(m)+" is deleted from Kubernetes")
}

func afterReset(reboot bool) string {
	if reboot {
		return "reboots into maintenance mode"
	}

	return "powers off"
}

// nodeName names the machine's Kubernetes Node as status records it.
func nodeName(m *ichorv1alpha1.TalosMachine) string {
	if m.Status.NodeName != "" {
		return "Node " + m.Status.NodeName
	}

	return "its Node"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}

	return many
}

func stateOrPending(s string) string {
	if s == "" {
		return "pending"
	}

	return s
}
