package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/hook"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// remove runs one step of the removal sequence: evacuate → drain → etcd →
// reset → delete the Node → drop the finalizer. The phase is written to
// status before the next step runs, and "reset requested" before the Reset
// call, so a controller killed at any point resumes without a second Reset
// (architecture, "Nodes": Reset is fire-and-forget).
func (r *Reconciler) remove(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine

	if m.Status.Removal == nil {
		// The whole cluster is being torn down (its finalizer deletes its
		// machines): the node is left as it is, neither drained nor reset
		// (controller/internal/controller/teardown).
		switch c, err := r.cluster(ctx, m); {
		case err == nil && !c.DeletionTimestamp.IsZero(), apierrors.IsNotFound(err):
			if m.Status.ResetRequestedAt != nil {
				return ctrl.Result{}, r.dropFinalizer(m, "its cluster is being torn down and the teardown reset it")
			}
			if m.Status.ConfigSentAt != nil || provisioned(m) {
				warnf(r, m, ichorv1alpha1.RemovedWithoutWipeReason, "Remove",
					"cluster %s is being torn down: %s was left as it is, not drained and not reset; it still runs the cluster's configuration",
					m.Spec.ClusterName, m.Name)
			}

			return ctrl.Result{}, r.dropFinalizer(m, "left as it is: its cluster is being torn down")
		case err != nil:
			return ctrl.Result{}, err
		}

		if m.Status.ConfigSentAt == nil && !provisioned(m) {
			// Nothing was ever sent to the node: nothing to undo.
			return ctrl.Result{}, r.dropFinalizer(m, "nothing had been sent to the node")
		}

		now := s.now()
		m.Status.Removal = &ichorv1alpha1.MachineRemoval{Phase: ichorv1alpha1.RemovalEvacuating, StartedAt: &now}
		progress(m, ichorv1alpha1.RemovingReason, "removal started")
		r.eventf(m, corev1.EventTypeNormal, ichorv1alpha1.RemovingReason, "Remove", "removal of %s started", m.Name)

		return ichorreconcile.NextStep(), nil
	}

	if res, err, done := r.loadOrStall(ctx, s, false); done {
		m.Status.Removal.Message = "the removal waits: " + progressMessage(m) + "; or set spec.forceRemove to remove the machine without drain and reset"

		return res, err
	}

	var (
		next string
		res  ctrl.Result
		err  error
	)

	switch m.Status.Removal.Phase {
	case ichorv1alpha1.RemovalEvacuating:
		next, res, err = r.evacuate(ctx, s)
	case ichorv1alpha1.RemovalDraining:
		next, res, err = r.drain(ctx, s)
	case ichorv1alpha1.RemovalLeavingEtcd:
		next, res, err = r.leaveEtcd(ctx, s)
	case ichorv1alpha1.RemovalResetting:
		next, res, err = r.reset(ctx, s)
	case ichorv1alpha1.RemovalDeletingNode:
		next, res, err = r.deleteNode(ctx, s)
	case ichorv1alpha1.RemovalDone:
		return ctrl.Result{}, r.done(ctx, s)
	}

	if next != "" {
		m.Status.Removal.Phase = next
		m.Status.Removal.Message = ""
		progress(m, ichorv1alpha1.RemovingReason, "removal: "+next)

		return ichorreconcile.NextStep(), err
	}

	return res, err
}

// progressMessage is what the lifecycle last said it waits for.
func progressMessage(m *ichorv1alpha1.TalosMachine) string {
	if c := findCond(m, ichorv1alpha1.DeletingCondition); c != nil && !m.DeletionTimestamp.IsZero() {
		return c.Message
	}

	return ""
}

// pause records why the removal waits, on Deleting and in status.removal.
func (r *Reconciler) pause(m *ichorv1alpha1.TalosMachine, reason, msg string) (string, ctrl.Result, error) {
	if c := findCond(m, ichorv1alpha1.DeletingCondition); c == nil || c.Message != msg {
		warnf(r, m, reason, "Remove", "%s", msg)
	}

	progress(m, reason, msg)
	m.Status.Removal.Message = msg

	return "", ctrl.Result{RequeueAfter: pausedWait}, nil
}

// reachable reports whether the node answers with the cluster's credentials.
func (r *Reconciler) reachable(ctx context.Context, s *scope) (*talos.Node, bool) {
	n, err := r.Nodes.Dial(ctx, s.machine.Spec.Address, s.state.Bundle)
	if err != nil {
		return nil, false
	}

	stage, _, err := n.Stage(ctx)
	if err != nil {
		n.Close()

		return nil, false
	}

	s.machine.Status.Stage = stage

	return n, true
}

// evacuate runs the storage hook. A forced removal skips it, as it skips
// the drain: the hardware is dead, and its replicas with it. An evacuation
// that reached its timeout pauses the removal, which never drains a node
// with replicas still on it.
func (r *Reconciler) evacuate(ctx context.Context, s *scope) (string, ctrl.Result, error) {
	if s.machine.Spec.ForceRemove {
		return ichorv1alpha1.RemovalDraining, ctrl.Result{}, nil
	}

	done, msg, err := r.Storage.Evacuate(ctx, s.machine)
	if p, paused := hook.IsPaused(err); paused {
		return r.pause(s.machine, ichorv1alpha1.EvacuationPausedReason, "the storage evacuation is paused: "+p.Message+
			" (or set spec.forceRemove to remove the machine without evacuation, drain and reset)")
	}

	if err != nil {
		return "", ctrl.Result{}, err
	}

	if !done {
		return r.pause(s.machine, ichorv1alpha1.RemovingReason, "waiting for the storage evacuation: "+msg)
	}

	return ichorv1alpha1.RemovalDraining, ctrl.Result{}, nil
}

// drain cordons and drains the Node with kubectl's own drain helper (it
// encodes the DaemonSet, mirror-pod, local-storage and PodDisruptionBudget
// rules). A timeout pauses the removal; it never escalates.
func (r *Reconciler) drain(ctx context.Context, s *scope) (string, ctrl.Result, error) {
	m := s.machine

	if m.Spec.ForceRemove {
		return ichorv1alpha1.RemovalLeavingEtcd, ctrl.Result{}, nil
	}

	k, err := r.Workload(ctx, s.state.Cluster, s.state.Bundle)
	if err != nil {
		return r.pause(m, ichorv1alpha1.DrainPausedReason, "cannot reach the cluster's Kubernetes API to drain the node: "+err.Error()+
			"; the removal waits (set spec.forceRemove to skip drain and reset)")
	}

	node, err := workload.NodeAt(ctx, k, m.Status.NodeName, m.Spec.Address)
	if err != nil {
		return r.pause(m, ichorv1alpha1.DrainPausedReason, err.Error())
	}

	if node == nil {
		return ichorv1alpha1.RemovalLeavingEtcd, ctrl.Result{}, nil
	}

	// Neither the node at the address nor the Node found there may be
	// another machine's: a reused or repointed address is not drained.
	n, live := r.reachable(ctx, s)
	if live {
		v, err := r.verify(ctx, m, n, "drain")

		n.Close()

		if v == nil {
			return "", ctrl.Result{RequeueAfter: pausedWait}, err
		}
	}

	if !r.ownNode(m, node.Name, "drain") {
		return "", ctrl.Result{RequeueAfter: pausedWait}, nil
	}

	if err := workload.Drain(ctx, k, node, r.DrainTimeout, !live); err != nil {
		return r.pause(m, ichorv1alpha1.DrainPausedReason, fmt.Sprintf("draining Node %s did not finish: %v; the removal waits and tries again "+
			"(check PodDisruptionBudgets and pods without a controller, or set spec.forceRemove)", node.Name, err))
	}

	r.eventf(m, corev1.EventTypeNormal, "Drained", "Remove", "cordoned and drained Node %s", node.Name)

	return ichorv1alpha1.RemovalLeavingEtcd, ctrl.Result{}, nil
}

// leaveEtcd checks, for a control plane, that removing its member keeps
// quorum and the declared count (guard.CheckEtcdMemberRemoval, with the
// members' live health). A node that answers leaves etcd itself in its
// graceful reset: removing its member first would make that reset fail with
// "member not found" (Talos's LeaveEtcd task). A node that does not answer,
// or a forced removal, is removed through a surviving control plane.
func (r *Reconciler) leaveEtcd(ctx context.Context, s *scope) (string, ctrl.Result, error) {
	m := s.machine

	if m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return ichorv1alpha1.RemovalResetting, ctrl.Result{}, nil
	}

	ok, err := r.takeLock(ctx, m, "removal of control plane "+m.Name)
	if err != nil || !ok {
		m.Status.Removal.Message = progressMessage(m)

		return "", ctrl.Result{RequeueAfter: lockWait}, err
	}

	sv, err := r.survivor(ctx, m, s.state.Bundle)
	if err != nil {
		return "", ctrl.Result{}, err
	}

	if sv == nil {
		return r.pause(m, ichorv1alpha1.RemovalRefusedReason, "no other control plane's etcd answers, so removing "+m.Name+
			" cannot be shown to keep etcd quorum; bring another control plane back first")
	}
	defer sv.Close()

	members, err := sv.EtcdMembers(ctx)
	if err != nil {
		return r.pause(m, ichorv1alpha1.RemovalRefusedReason, "cannot list the etcd members (etcd may have lost quorum): "+err.Error())
	}

	target := memberAt(members, m.Spec.Address)
	if target == nil {
		return ichorv1alpha1.RemovalResetting, ctrl.Result{}, nil
	}

	if !memberOf(m, target) {
		r.identityMismatch(m, memberMismatch(m, target), "etcd member removal")

		return "", ctrl.Result{RequeueAfter: pausedWait}, nil
	}

	if ref := guard.CheckEtcdMemberRemoval(r.guardMembers(ctx, s.state.Bundle, members), target.ID, s.state.Cluster.Spec.ControlPlane.Count, false); ref != nil {
		return r.pause(m, ichorv1alpha1.RemovalRefusedReason, ref.Rule+"; "+ref.WayOut)
	}

	n, live := r.reachable(ctx, s)
	if live {
		n.Close()
	}

	if live && !m.Spec.ForceRemove {
		return ichorv1alpha1.RemovalResetting, ctrl.Result{}, nil
	}

	if ok, err := r.removeMember(ctx, m, sv, target, "etcd member removal"); !ok {
		return "", ctrl.Result{RequeueAfter: pausedWait}, err
	}

	r.eventf(m, corev1.EventTypeNormal, "EtcdMemberRemoved", "Remove", "removed etcd member %s (%x) through another control plane", target.Hostname, target.ID)

	return ichorv1alpha1.RemovalResetting, ctrl.Result{}, nil
}

// reset sends one graceful reset naming STATE and EPHEMERAL
// (reclaim.ResetRequest), after recording that it did, then waits for the
// node to leave its configuration.
func (r *Reconciler) reset(ctx context.Context, s *scope) (string, ctrl.Result, error) {
	m := s.machine

	if m.Status.ResetRequestedAt != nil {
		return r.awaitReset(ctx, s)
	}

	n, live := r.reachable(ctx, s)
	if m.Spec.ForceRemove || !live {
		if live {
			n.Close()
		}

		m.Status.Removal.Wiped = new(false)
		why := "spec.forceRemove is set"

		if !live {
			why = "the node does not answer"
		}

		warnf(r, m, ichorv1alpha1.RemovedWithoutWipeReason, "Remove",
			"%s: %s was removed without a reset; STATE and EPHEMERAL were NOT wiped and it still holds the cluster's configuration", why, m.Name)

		return ichorv1alpha1.RemovalDeletingNode, ctrl.Result{}, nil
	}
	defer n.Close()

	// The node at the address must be this machine: a reused or repointed
	// address gets no Reset (the pause names both identities).
	v, err := r.verify(ctx, m, n, "reset")
	if v == nil {
		return "", ctrl.Result{RequeueAfter: pausedWait}, err
	}

	now := s.now()
	m.Status.ResetRequestedAt = &now
	m.Status.Removal.Wiped = new(true)

	// Written before the call, with the optimistic lock: a stale read, or a
	// second controller, fails here instead of sending a second Reset.
	if err := s.persist(ctx); err != nil {
		return "", ctrl.Result{}, fmt.Errorf("record the reset request: %w", err)
	}

	reboot := m.Annotations[ichorv1alpha1.RemoveRebootAnnotation] == "true"

	if err := v.Reset(ctx, reclaim.ResetRequest(true, reboot)); err != nil {
		if definite(err) {
			// The node refused before doing anything: a later reconcile may ask again.
			m.Status.ResetRequestedAt = nil

			return r.pause(m, ichorv1alpha1.RemovingReason, "the node refused the reset: "+err.Error())
		}

		m.Status.Removal.Message = "the reset was requested; the node did not confirm it: " + err.Error()
	}

	r.eventf(m, corev1.EventTypeNormal, "ResetRequested", "Remove",
		"requested a graceful reset of %s wiping STATE and EPHEMERAL (reboot: %t)", m.Name, reboot)

	return "", ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

// definite reports whether a Reset error means the node did not start one.
func definite(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	default:
		return false
	}
}

// awaitReset waits for a requested reset to take the node out of its
// configuration (it answers only in maintenance mode, or not at all once it
// powered off). A reset that never started is asked for again: when the
// grace has passed and the node still answers with the cluster's
// credentials in the running stage, the request never reached it (a
// controller killed between recording it and sending it), for Talos enters
// the resetting stage as soon as a reset sequence starts
// (t:internal/app/machined/pkg/controllers/runtime/machine_status.go:
// SequenceReset's start event sets MachineStageResetting). The record is
// dropped and reset() checks the identity, records and sends again.
func (r *Reconciler) awaitReset(ctx context.Context, s *scope) (string, ctrl.Result, error) {
	m := s.machine

	n, live := r.reachable(ctx, s)
	if live {
		n.Close()

		if m.Status.Stage == ichorv1alpha1.StageRunning && s.now().Sub(m.Status.ResetRequestedAt.Time) > r.ResetGrace {
			at := m.Status.ResetRequestedAt.UTC().Format(time.RFC3339)
			m.Status.ResetRequestedAt = nil
			m.Status.Removal.Message = fmt.Sprintf("the reset requested at %s never started (the node still runs its configuration): it is requested again", at)
			r.eventf(m, corev1.EventTypeWarning, "ResetNotStarted", "Remove",
				"the reset of %s requested at %s never started: the node still runs its configuration after %s; requesting it again", m.Name, at, r.ResetGrace)

			return "", ichorreconcile.NextStep(), nil
		}

		return "", ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		// Talos's graceful reset left etcd; make sure, through a survivor.
		if sv, err := r.survivor(ctx, m, s.state.Bundle); err == nil && sv != nil {
			members, lerr := sv.EtcdMembers(ctx)
			if lerr == nil {
				if t := memberAt(members, m.Spec.Address); t != nil {
					if ok, err := r.removeMember(ctx, m, sv, t, "etcd member removal"); !ok {
						sv.Close()

						return "", ctrl.Result{RequeueAfter: pausedWait}, err
					}
				}
			}

			sv.Close()
		}
	}

	m.Status.Stage = ichorv1alpha1.StageResetting

	return ichorv1alpha1.RemovalDeletingNode, ctrl.Result{}, nil
}

func (r *Reconciler) deleteNode(ctx context.Context, s *scope) (string, ctrl.Result, error) {
	m := s.machine

	k, err := r.Workload(ctx, s.state.Cluster, s.state.Bundle)
	if err != nil {
		return r.pause(m, ichorv1alpha1.RemovingReason, "cannot reach the cluster's Kubernetes API to delete the Node: "+err.Error())
	}

	node, err := workload.NodeAt(ctx, k, m.Status.NodeName, m.Spec.Address)
	if err != nil {
		return r.pause(m, ichorv1alpha1.RemovingReason, err.Error())
	}

	if node != nil {
		if !r.ownNode(m, node.Name, "Node deletion") {
			return "", ctrl.Result{RequeueAfter: pausedWait}, nil
		}

		if err := k.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return r.pause(m, ichorv1alpha1.RemovingReason, "deleting Node "+node.Name+": "+err.Error())
		}
	}

	return ichorv1alpha1.RemovalDone, ctrl.Result{}, nil
}

func (r *Reconciler) done(ctx context.Context, s *scope) error {
	m := s.machine

	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		if err := r.releaseLock(ctx, m); err != nil {
			return err
		}

		if _, err := r.topology(ctx, m); err != nil {
			return err
		}
	}

	how := "drained, left etcd, reset (STATE and EPHEMERAL wiped) and its Node deleted"
	if m.Status.Removal.Wiped == nil || !*m.Status.Removal.Wiped {
		how = "removed WITHOUT a reset: its disks were not wiped"
	}

	return r.dropFinalizer(m, how)
}

// dropFinalizer ends the removal: the skeleton removes the finalizer once
// the removal phase returns without an error or a requeue.
func (r *Reconciler) dropFinalizer(m *ichorv1alpha1.TalosMachine, how string) error {
	r.eventf(m, corev1.EventTypeNormal, "Removed", "Remove", "%s: %s", m.Name, how)

	return nil
}

// ownNode reports whether the Kubernetes Node found at the machine's address
// is its own (the Node name recorded at the join); another machine's Node is
// neither drained nor deleted, and the machine is paused.
func (r *Reconciler) ownNode(m *ichorv1alpha1.TalosMachine, node, step string) bool {
	want := talos.MachineIdentity(m)
	expected := want.NodeName
	if expected == "" {
		// Not joined yet: Talos names the Node after the hostname.
		expected, _, _ = strings.Cut(want.Hostname, ".")
	}

	if expected == "" || strings.EqualFold(expected, node) {
		return true
	}

	r.identityMismatch(m, &talos.IdentityMismatchError{
		Where: "Kubernetes Node " + node + " at " + m.Spec.Address, Want: want, Got: talos.Identity{NodeName: node}, Fields: []string{"Node name"},
	}, step)

	return false
}

// memberOf reports whether an etcd member is named after the machine
// (Talos names the member after the hostname).
func memberOf(m *ichorv1alpha1.TalosMachine, mem *talos.EtcdMember) bool {
	return memberMismatch(m, mem) == nil
}

func memberMismatch(m *ichorv1alpha1.TalosMachine, mem *talos.EtcdMember) *talos.IdentityMismatchError {
	want := talos.MachineIdentity(m)

	return talos.AsIdentityMismatch(talos.CompareMember(*mem, want))
}
