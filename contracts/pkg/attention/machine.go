package attention

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// problem is the plain text of one reason.
type problem struct {
	sev    Severity
	action Action
	// text is the summary; %[1]s is the machine, %[2]s the cause of a node
	// error (Cause) or the paths count, %[3]s the address.
	text string
}

// reasonText says what each reason of a machine's lifecycle and
// configuration conditions means. A reason it does not list is told by its
// condition type (typeText).
var reasonText = map[string]problem{
	// Lifecycle (Provisioned, NodeHealthy, Deleting).
	ichorv1alpha1.ProvisioningReason:    {Info, ActionOpenNode, "%[1]s is being sent its configuration"},
	ichorv1alpha1.InstallingReason:      {Info, ActionOpenNode, "%[1]s is installing Talos"},
	ichorv1alpha1.JoiningReason:         {Info, ActionOpenNode, "%[1]s is joining the cluster"},
	ichorv1alpha1.NotProvisionedReason:  {Info, ActionOpenNode, "%[1]s is approved; its provisioning has not started yet"},
	ichorv1alpha1.ReinstalledReason:     {Warning, ActionOpenNode, "%[1]s came back with an empty disk: Ichor installs it again"},
	ichorv1alpha1.ClusterLockHeldReason: {Info, ActionOpenNode, "%[1]s waits for the cluster lock"},
	ichorv1alpha1.HeldReason:            {Warning, ActionOpenNode, "%[1]s is held: the hold-apply annotation stops its installation"},
	ichorv1alpha1.RecoverClusterReason:  {Error, ActionOpenNode, "no control plane survives: the cluster must be recovered before %[1]s can come back"},
	ichorv1alpha1.NodeUnreachableReason: {Error, ActionOpenNode, "%[1]s: the node's Talos API does not answer (%[2]s)"},
	ichorv1alpha1.ApplyFailedReason:     {Error, ActionOpenNode, "%[1]s refused the configuration Ichor sent it (%[2]s)"},
	ichorv1alpha1.RenderFailedReason:    {Error, ActionOpenNode, "Ichor cannot render the configuration of %[1]s"},
	ichorv1alpha1.RemovingReason:        {Info, ActionOpenNode, "%[1]s is being removed"},
	ichorv1alpha1.DrainPausedReason:     {Warning, ActionOpenNode, "removing %[1]s waits: its Kubernetes node could not be drained"},
	ichorv1alpha1.EvacuationPausedReason: {Warning, ActionOpenNode,
		"removing %[1]s waits: the storage system still keeps data on the node"},
	ichorv1alpha1.RemovalRefusedReason: {Error, ActionOpenNode,
		"removing %[1]s is refused: it would break etcd quorum or the declared number of control planes"},
	ichorv1alpha1.RemovedWithoutWipeReason: {Warning, ActionOpenNode, "%[1]s was removed without a wipe: its node did not answer"},
	// Identity (IdentityConflict, FingerprintTrusted; also on Provisioned and InSync).
	ichorv1alpha1.IdentityMismatchReason: {Error, ActionOpenNode,
		"another machine answers at the address of %[1]s (%[3]s): Ichor sends it nothing"},
	ichorv1alpha1.WeakIdentityReason: {Error, ActionOpenNode,
		"%[1]s has no hardware UUID to tell it apart from other machines"},
	ichorv1alpha1.DuplicateIdentityReason: {Error, ActionOpenNode,
		"%[1]s reports the same hardware UUID as another machine"},
	ichorv1alpha1.FingerprintChangedReason: {Error, ActionOpenNode,
		"%[1]s presents another maintenance certificate than when it was discovered: confirm it is the same machine"},
	// Configuration (InSync, Drifted, RebootRequired, APIServerRestartRequired).
	ichorv1alpha1.DriftDetectedReason: {Warning, ActionOpenNode,
		"%[1]s runs a configuration different from the one Ichor rendered%[2]s"},
	ichorv1alpha1.AcceptedNoEffectReason: {Warning, ActionOpenNode,
		"%[1]s accepted a volume change Talos does not apply to an installed node"},
}

// typeText tells an abnormal condition whose reason reasonText does not list.
var typeText = map[string]problem{
	ichorv1alpha1.ProvisionedCondition:        {Warning, ActionOpenNode, "%[1]s is not provisioned"},
	ichorv1alpha1.NodeHealthyCondition:        {Error, ActionOpenNode, "%[1]s is not healthy"},
	ichorv1alpha1.InSyncCondition:             {Warning, ActionOpenNode, "%[1]s does not run the configuration Ichor rendered"},
	ichorv1alpha1.DeletingCondition:           {Info, ActionOpenNode, "%[1]s is being removed"},
	ichorv1alpha1.IdentityConflictCondition:   {Error, ActionOpenNode, "the identity of %[1]s is in doubt"},
	ichorv1alpha1.FingerprintTrustedCondition: {Error, ActionOpenNode, "the maintenance certificate of %[1]s is not trusted"},
	ichorv1alpha1.DiskRolesEffectiveCondition: {Warning, ActionOpenNode, "the disk roles of %[1]s are not in effect"},
	ichorv1alpha1.AdoptionHeldCondition:       {Warning, ActionOpenNode, "%[1]s is held (adopted or recovered): nothing is applied to it until the hold is lifted"},
	ichorv1alpha1.DriftedCondition:            {Warning, ActionOpenNode, "%[1]s runs a configuration different from the one Ichor rendered%[2]s"},
	ichorv1alpha1.RebootRequiredCondition: {Warning, ActionApply,
		"a configuration change of %[1]s waits for a rollout that reboots it%[2]s"},
	ichorv1alpha1.APIServerRestartRequiredCondition: {Warning, ActionApply,
		"a configuration change of %[1]s waits for a rollout that restarts its kube-apiserver%[2]s"},
	ichorv1alpha1.ReadyCondition: {Warning, ActionOpenNode, "%[1]s is not ready"},
}

// machineOrder is the order a machine's conditions are told in; InSync comes
// after the conditions whose reasons it repeats.
var machineOrder = []string{
	ichorv1alpha1.IdentityConflictCondition,
	ichorv1alpha1.FingerprintTrustedCondition,
	ichorv1alpha1.ProvisionedCondition,
	ichorv1alpha1.NodeHealthyCondition,
	ichorv1alpha1.DriftedCondition,
	ichorv1alpha1.RebootRequiredCondition,
	ichorv1alpha1.APIServerRestartRequiredCondition,
	ichorv1alpha1.InSyncCondition,
	ichorv1alpha1.DiskRolesEffectiveCondition,
	ichorv1alpha1.AdoptionHeldCondition,
}

// notAProblem are reasons of an abnormal InSync that another item tells, or
// that only say the machine is not provisioned yet.
var notAProblem = map[string]bool{
	ichorv1alpha1.NotConfiguredReason:     true,
	ichorv1alpha1.WaitingForRolloutReason: true,
	ichorv1alpha1.PausedReason:            true,
}

// machineItems are one machine's problems, one per reason.
func machineItems(m *ichorv1alpha1.TalosMachine) []Item {
	find := func(t string) *metav1.Condition { return apimeta.FindStatusCondition(m.Status.Conditions, t) }

	var out []Item

	seen := map[string]bool{}
	add := func(c *metav1.Condition, p problem, arg string) {
		out = append(out, Item{
			Key: KindMachine + "/" + m.Name + "/" + c.Type, Severity: p.sev, Kind: KindMachine, Subject: m.Name,
			Summary: fmt.Sprintf(p.text, m.Name, arg, address(m)), Detail: detail(c), Since: since(c),
			Action: p.action, Command: command(p.action, m.Name),
		})
	}
	tell := func(c *metav1.Condition) {
		if seen[c.Reason] && c.Reason != "" {
			return
		}

		seen[c.Reason] = true

		p, ok := reasonText[c.Reason]
		if !ok || c.Type == ichorv1alpha1.RebootRequiredCondition || c.Type == ichorv1alpha1.APIServerRestartRequiredCondition {
			p, ok = typeText[c.Type]
		}

		if !ok {
			p = problem{Warning, ActionOpenNode, "%[1]s: " + c.Type + " is " + string(c.Status)}
		}

		arg := ""

		switch {
		case c.Reason == ichorv1alpha1.NodeUnreachableReason || c.Reason == ichorv1alpha1.ApplyFailedReason:
			arg = Cause(c.Message)
		case c.Type == ichorv1alpha1.DriftedCondition || c.Reason == ichorv1alpha1.DriftDetectedReason:
			arg = paths(len(m.Status.DriftPaths))
		case c.Type == ichorv1alpha1.RebootRequiredCondition || c.Type == ichorv1alpha1.APIServerRestartRequiredCondition:
			arg = paths(len(m.Status.RebootRequiredPaths))
		}

		add(c, p, arg)
	}

	switch m.Spec.Approval.State {
	case ichorv1alpha1.ApprovalRejected:
		return nil
	case ichorv1alpha1.ApprovalApproved:
	default:
		if c := find(ichorv1alpha1.IdentityConflictCondition); c != nil && c.Status == metav1.ConditionTrue {
			tell(c)

			return out
		}

		out = append(out, Item{
			Key: KindMachine + "/" + m.Name + "/approval", Severity: Warning, Kind: KindMachine, Subject: m.Name,
			Summary: fmt.Sprintf("%s (%s) waits for approval", m.Name, address(m)),
			Since:   m.CreationTimestamp.Time,
			Action:  ActionApprove, Command: command(ActionApprove, m.Name),
		})

		return out
	}

	// A machine being removed has one problem: its removal.
	if c := find(ichorv1alpha1.DeletingCondition); c != nil && c.Status == metav1.ConditionTrue {
		tell(c)

		if r := m.Status.Removal; r != nil && r.Phase != "" && c.Reason == ichorv1alpha1.RemovingReason {
			out[len(out)-1].Summary += " (" + r.Phase + ")"
		}

		return out
	} else if !m.DeletionTimestamp.IsZero() {
		add(&metav1.Condition{Type: ichorv1alpha1.DeletingCondition, Reason: ichorv1alpha1.RemovingReason},
			reasonText[ichorv1alpha1.RemovingReason], "")

		return out
	}

	provisioned := find(ichorv1alpha1.ProvisionedCondition)

	for _, t := range machineOrder {
		c := find(t)
		if c == nil || !ichorv1alpha1.ConditionAbnormal(*c) {
			continue
		}

		// Before the node runs, only the provisioning tells.
		if t != ichorv1alpha1.ProvisionedCondition && t != ichorv1alpha1.IdentityConflictCondition &&
			t != ichorv1alpha1.FingerprintTrustedCondition && (provisioned == nil || provisioned.Status != metav1.ConditionTrue) {
			continue
		}

		if t == ichorv1alpha1.InSyncCondition && notAProblem[c.Reason] {
			continue
		}

		tell(c)
	}

	// A machine that is not ready says so, even when no condition above tells why.
	if ready := find(ichorv1alpha1.ReadyCondition); len(out) == 0 && (ready == nil || ready.Status != metav1.ConditionTrue) {
		if ready == nil {
			ready = &metav1.Condition{Type: ichorv1alpha1.ReadyCondition, Reason: ichorv1alpha1.NotProvisionedReason}
		}

		if ready.Reason == ichorv1alpha1.NotProvisionedReason || ready.Status == metav1.ConditionFalse {
			tell(ready)
		}
	}

	return out
}

func address(m *ichorv1alpha1.TalosMachine) string {
	if m.Spec.Address == "" {
		return "no address"
	}

	return m.Spec.Address
}

// command is the CLI command of an action on a machine.
func command(a Action, machine string) string {
	switch a {
	case ActionApprove:
		return "ichor machine approve " + machine + " --role controlplane|worker"
	case ActionApply:
		return "ichor config apply"
	case ActionOpenNode:
		return "ichor machine get " + machine
	}

	return ""
}
