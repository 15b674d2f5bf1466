package lifecycle

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// monitor looks at a provisioned machine: its stage, and whether its node
// answers only in maintenance mode with the approved identity (its disk was
// wiped or replaced), in which case it is provisioned again.
func (r *Reconciler) monitor(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine

	// The look dials and reads; it may reuse a bundle Secret read a moment
	// ago. The steps below that send the node something load it fresh.
	s.look = true
	if res, err, done := r.loadOrStall(ctx, s, false); done {
		return res, err
	}

	if n, err := r.Nodes.Dial(ctx, m.Spec.Address, s.state.Bundle); err == nil {
		stage, _, err := n.Stage(ctx)
		if err == nil {
			m.Status.Stage = stage

			// Who answers is checked at every look: a machine that answers as
			// another is paused before any step would send it something.
			v, verr := r.verify(ctx, m, n, "monitoring")
			n.Close()

			if v != nil || verr == nil && !identityPaused(m) {
				nodeHealthy(m)
			}

			// Healthy: the next idle look is paced with the fleet's size.
			return ctrl.Result{RequeueAfter: r.pace.Every(ctx, r.MonitorInterval)}, errors.Join(verr, r.holdWhileEven(ctx, m))
		}

		n.Close()
	}

	// The cluster's API does not answer: is the node back in maintenance mode?
	mn, err := r.maintenance(ctx, s)
	if errors.Is(err, errRunsOurConfig) {
		// It answered with the cluster's credentials after all: the next look decides.
		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
	}

	if err != nil || mn == nil {
		if err != nil {
			m.Status.Stage = ichorv1alpha1.StageUnreachable
			progress(m, ichorv1alpha1.NodeUnreachableReason, fmt.Sprintf("the node at %s answers neither with the cluster's credentials nor in maintenance mode: %s",
				m.Spec.Address, talos.Message(err)))
		}

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
	}

	mn.Close()
	m.Status.Stage = ichorv1alpha1.StageMaintenance

	if m.Spec.Identity.UUID == "" {
		progress(m, ichorv1alpha1.WeakIdentityReason, fmt.Sprintf("the node at %s answers in maintenance mode, but the machine has no SMBIOS UUID to confirm it is the approved one: "+
			"it is not re-installed automatically; remove the machine and approve the node again", m.Spec.Address))

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
	}

	if _, held := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]; held {
		progress(m, ichorv1alpha1.HeldReason, "the node answers in maintenance mode with its approved identity (disk wiped or replaced); the annotation "+
			ichorv1alpha1.HoldApplyAnnotation+" stops its re-installation")

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
	}

	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		if res, err, stop := r.dropStaleMember(ctx, s); stop {
			return res, err
		}
	}

	m.Status.ConfigSentAt = nil
	m.Status.Reinstalls++
	setCond(m, ichorv1alpha1.ProvisionedCondition, metav1.ConditionFalse, ichorv1alpha1.ReinstalledReason,
		"the node answered in maintenance mode with its approved identity: its disk was wiped or replaced")
	progress(m, ichorv1alpha1.ReinstalledReason, "re-installing the node: it answered in maintenance mode with its approved identity, so its disk was wiped or replaced")
	warnf(r, m, ichorv1alpha1.ReinstalledReason, "Provision",
		"the node at %s answers in maintenance mode with its approved identity (disk wiped or replaced): sending its configuration again", m.Spec.Address)

	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// nodeHealthy records that the provisioned node answers as configured.
func nodeHealthy(m *ichorv1alpha1.TalosMachine) {
	setCond(m, ichorv1alpha1.NodeHealthyCondition, metav1.ConditionTrue, ichorv1alpha1.RunningReason,
		"the node answers with the cluster's credentials as this machine")
}

// holdWhileEven renews the cluster lock a control plane holds after its join
// made the count even, and gives it up once the count is odd again.
func (r *Reconciler) holdWhileEven(ctx context.Context, m *ichorv1alpha1.TalosMachine) error {
	if m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return nil
	}

	holder, err := r.Locker.Holder(ctx, r.lockKey(m))
	if err != nil || holder != lock.MachineIdentity(m.Namespace, m.Name) {
		return err
	}

	even, err := r.topology(ctx, m)
	if err != nil {
		return err
	}

	if even {
		_, err = r.Locker.Acquire(ctx, r.lockKey(m), holder)

		return err
	}

	return r.releaseLock(ctx, m)
}

// dropStaleMember removes a wiped control plane's old etcd member through a
// surviving control plane, under the cluster lock. With no survivor nothing
// is sent: the cluster has to be recovered from a snapshot.
func (r *Reconciler) dropStaleMember(ctx context.Context, s *scope) (ctrl.Result, error, bool) {
	m := s.machine

	ok, err := r.takeLock(ctx, m, "re-installing control plane "+m.Name)
	if err != nil || !ok {
		return ctrl.Result{RequeueAfter: lockWait}, err, true
	}

	// A member removal is sent with the bundle as the API server has it now.
	s.fresh()

	if res, err, done := r.loadOrStall(ctx, s, false); done {
		return res, err, true
	}

	sv, err := r.survivor(ctx, m, s.state.Bundle)
	if err != nil {
		return ctrl.Result{}, err, true
	}

	if sv == nil {
		msg := fmt.Sprintf("the node at %s was wiped and no other control plane of cluster %s answers: nothing was sent. "+
			"Recover etcd from a snapshot with `talosctl bootstrap --recover-from` and the os:admin talosconfig of the cluster's secrets (`ichor secrets export`)", m.Spec.Address, m.Spec.ClusterName)
		if c := findCond(m, ichorv1alpha1.ReadyCondition); c == nil || c.Reason != ichorv1alpha1.RecoverClusterReason {
			warnf(r, m, ichorv1alpha1.RecoverClusterReason, "Provision", "%s", msg)
		}

		progress(m, ichorv1alpha1.RecoverClusterReason, msg)

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, r.releaseLock(ctx, m), true
	}
	defer sv.Close()

	members, err := sv.EtcdMembers(ctx)
	if err != nil {
		return ctrl.Result{}, err, true
	}

	stale := memberAt(members, m.Spec.Address)
	if stale == nil {
		return ctrl.Result{}, nil, false
	}

	// No count floor: the member comes back as soon as the node is re-installed.
	if ref := guard.CheckEtcdMemberRemoval(r.guardMembers(ctx, s.state.Bundle, members), stale.ID, 0, false); ref != nil {
		progress(m, ichorv1alpha1.RemovalRefusedReason, "the wiped node's old etcd member cannot be removed: "+ref.Rule+"; "+ref.WayOut)

		return ctrl.Result{RequeueAfter: pausedWait}, nil, true
	}

	if ok, err := r.removeMember(ctx, m, sv, stale, "removal of the wiped node's old etcd member"); !ok {
		return ctrl.Result{RequeueAfter: pausedWait}, err, true
	}

	r.eventf(m, corev1.EventTypeNormal, "EtcdMemberRemoved", "Provision",
		"removed the wiped node's old etcd member %s (%x) through another control plane", stale.Hostname, stale.ID)

	return ctrl.Result{}, nil, false
}
