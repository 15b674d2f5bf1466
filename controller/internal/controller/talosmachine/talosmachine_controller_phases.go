package talosmachine

import (
	"context"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/settings"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// maxEventPaths caps the paths an Event names; status holds them all (up to its limit).
const maxEventPaths = 10

// maxStatusPaths is the CRD's limit on driftPaths and rebootRequiredPaths.
const maxStatusPaths = 256

// reconcileNode compares the render with the node and acts:
//
//   - the node runs the render (or has it staged): in sync;
//   - the render changed since the last apply (its hash or render.Version):
//     a desired-state change, applied now when the plan allows it, else
//     reported as waiting for a config operation;
//   - the render did not change but the node differs: drift, reported, and
//     re-applied under AutoCorrect when no reboot is needed.
func (r *Reconciler) reconcileNode(ctx context.Context, s *scope) (ctrl.Result, error) {
	m, role := s.machine, s.machine.Spec.Role

	p, err := plan.FromBytes(s.result.Bytes, s.active, role)
	if err != nil {
		markUnreachable(m, fmt.Errorf("read the node's configuration: %w", err))

		return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
	}

	// A STAGED apply leaves the running configuration alone until the next
	// install or upgrade; the stored (persistent) one is what a reboot runs.
	stored := p
	if s.persistent != nil {
		if stored, err = plan.FromBytes(s.result.Bytes, s.persistent, role); err != nil {
			markUnreachable(m, fmt.Errorf("read the node's stored configuration: %w", err))

			return ctrl.Result{RequeueAfter: r.driftInterval()}, nil
		}
	}

	switch {
	case p.Action == plan.ActionNone && stored.Action == plan.ActionNone:
		markInSync(m, s.result.Hash, false)

		return ctrl.Result{}, nil
	case stored.Action == plan.ActionNone:
		markInSync(m, s.result.Hash, true)

		return ctrl.Result{}, nil
	case p.Action == plan.ActionNone:
		// The node runs the render but stores something else (a staged
		// configuration no longer wanted): re-applying the render changes
		// nothing that runs and replaces what is stored.
		p = plan.Plan{Changes: stored.Changes, Class: plan.NoReboot, Action: plan.ActionApply, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}
	}

	// A held machine (adopted, or recovered after a full loss) is compared and
	// never applied to: every difference is reported as drift until a person
	// lifts the hold (architecture, "Bootstrap" and "Backup, recovery, certificates").
	if held(m) {
		return r.heldDrift(s, p)
	}

	desiredChange := m.Status.AppliedConfigHash != s.result.Hash || m.Status.RenderVersion != render.Version
	if desiredChange {
		return r.converge(ctx, s, p)
	}

	return r.drift(ctx, s, p)
}

// converge applies a desired-state change, or reports that it waits for a rollout.
func (r *Reconciler) converge(ctx context.Context, s *scope, p plan.Plan) (ctrl.Result, error) {
	m := s.machine
	setDrift(m, nil)

	if p.Action == plan.ActionWaitForRollout {
		if markWaiting(m, p) {
			r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ichorv1alpha1.WaitingForRolloutReason, "Plan",
				"%s change waits for a config operation: %s", p.Class, eventPaths(p.Paths(p.Class)))
		}

		return ctrl.Result{}, nil
	}

	clearWaiting(m)

	if err := r.apply(ctx, s, p.Mode); err != nil {
		return ctrl.Result{}, err
	}

	reason := ichorv1alpha1.AppliedReason
	if p.Mode == machine.ApplyConfigurationRequest_STAGED {
		reason = ichorv1alpha1.StagedReason
	}

	markInSync(m, s.result.Hash, p.Mode == machine.ApplyConfigurationRequest_STAGED)
	r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, reason, "Apply",
		"applied the rendered configuration in mode %s: %s", p.Mode, eventPaths(p.AllPaths()))

	return ctrl.Result{}, nil
}

// drift reports a node that differs from an unchanged render, and corrects it
// under AutoCorrect when no reboot (or kube-apiserver restart on a control
// plane) is needed.
func (r *Reconciler) drift(ctx context.Context, s *scope, p plan.Plan) (ctrl.Result, error) {
	m := s.machine
	paths := p.AllPaths()
	first := !conditionTrue(m, ichorv1alpha1.DriftedCondition) || !equalStrings(m.Status.DriftPaths, capPaths(paths))

	// The cluster's policy, else the installation's default, read now: a
	// change of the default (ichor settings set) counts from this drift on.
	eff, err := settings.Read(ctx, r.Client)
	if err != nil {
		// the defaults (Warn) are the safe reading: report, change nothing
		ctrl.LoggerFrom(ctx).Error(err, "reading Ichor's settings; unless the cluster sets a drift policy the drift is reported, not corrected")
	}

	if eff.DriftPolicy(s.cluster) == ichorv1alpha1.DriftPolicyAutoCorrect && p.Action == plan.ActionApply {
		if err := r.apply(ctx, s, p.Mode); err != nil {
			setDrift(m, paths)

			return ctrl.Result{}, err
		}

		markInSync(m, s.result.Hash, false)
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ichorv1alpha1.DriftCorrectedReason, "Apply",
			"re-applied the rendered configuration in mode %s: %s", p.Mode, eventPaths(paths))

		return ctrl.Result{}, nil
	}

	setDrift(m, paths)

	if first {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ichorv1alpha1.DriftDetectedReason, "Compare",
			"the node's configuration differs from the render (%s): %s", p.Class, eventPaths(paths))
	}

	return ctrl.Result{}, nil
}

// heldDrift reports what a held machine's node differs in, applying nothing.
func (r *Reconciler) heldDrift(s *scope, p plan.Plan) (ctrl.Result, error) {
	m := s.machine
	paths := p.AllPaths()
	first := !conditionTrue(m, ichorv1alpha1.DriftedCondition) || !equalStrings(m.Status.DriftPaths, capPaths(paths))

	clearWaiting(m)
	setDrift(m, paths)
	notInSync(m, ichorv1alpha1.HeldReason, fmt.Sprintf("the node differs from the render in %d path(s) and the annotation %s stops applies",
		len(paths), ichorv1alpha1.HoldApplyAnnotation))

	if first {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ichorv1alpha1.DriftDetectedReason, "Compare",
			"held: the node's configuration differs from the render (%s), nothing is applied while %s is set: %s",
			p.Class, ichorv1alpha1.HoldApplyAnnotation, eventPaths(paths))
	}

	return ctrl.Result{}, nil
}

// apply makes the dry run, surfaces its warnings and applies.
func (r *Reconciler) apply(ctx context.Context, s *scope, mode machine.ApplyConfigurationRequest_Mode) error {
	m := s.machine

	warnings, err := s.node.Apply(ctx, s.result.Bytes, mode)
	if len(warnings) > 0 {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, "ApplyWarnings", "DryRun",
			"the node warns about the configuration: %s", strings.Join(warnings, "; "))
	}

	if err != nil {
		markApplyFailed(m, err)

		return fmt.Errorf("machine %s/%s: %w", m.Namespace, m.Name, err)
	}

	return nil
}

func eventPaths(paths []string) string {
	if len(paths) > maxEventPaths {
		return strings.Join(paths[:maxEventPaths], ", ") + fmt.Sprintf(" and %d more", len(paths)-maxEventPaths)
	}

	return strings.Join(paths, ", ")
}

func capPaths(paths []string) []string {
	if len(paths) > maxStatusPaths {
		return paths[:maxStatusPaths]
	}

	return paths
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}

	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}

	return true
}

// reconcileDiskRoles sets DiskRolesEffective on an installed machine from
// the node's volumes (storage.CheckDiskRoles): a disk-role change Talos
// accepted but does not apply (a changed selector or a lowered maxSize of a
// provisioned volume) is reported with its paths and the way out, with a
// Warning Event when it first appears. A node whose volumes cannot be read
// leaves the condition Unknown; the next poll reads again.
func (r *Reconciler) reconcileDiskRoles(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine

	if !m.Status.Installed {
		set(m, ichorv1alpha1.DiskRolesEffectiveCondition, metav1.ConditionTrue, storage.NotInstalledReason,
			"the machine is not installed yet: its disk roles apply at install")

		return ctrl.Result{}, nil
	}

	intents, err := render.VolumeIntents(m, s.storages)
	if err != nil {
		// The render already refused this input; nothing more to say here.
		return ctrl.Result{}, nil //nolint:nilerr // reported by the render (Stalled)
	}

	// A machine whose render places no volume (the dedicated system disk,
	// no disk role, no storage preset) has nothing to judge: its volumes are
	// not read, three COSI lists saved on every drift check of most machines.
	var (
		vols  []talos.VolumeStatus
		disks []ichorv1alpha1.DiscoveredDisk
	)

	if len(intents) > 0 {
		if vols, disks, err = s.node.Volumes(ctx); err != nil {
			set(m, ichorv1alpha1.DiskRolesEffectiveCondition, metav1.ConditionUnknown, storage.VolumesUnreadableReason,
				"cannot read the node's volumes: "+talos.Message(err))

			return ctrl.Result{}, nil
		}
	}

	rep := storage.CheckDiskRoles(intents, StorageVolumes(vols), disks)
	first := rep.Status == metav1.ConditionFalse && !conditionFalseWith(m, ichorv1alpha1.DiskRolesEffectiveCondition, rep.Message)

	set(m, ichorv1alpha1.DiskRolesEffectiveCondition, rep.Status, rep.Reason, rep.Message)

	if first {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ichorv1alpha1.AcceptedNoEffectReason, "CheckVolumes", "%s", rep.Message)
	}

	return ctrl.Result{}, nil
}

// StorageVolumes converts the node's volumes for the storage checks.
func StorageVolumes(vols []talos.VolumeStatus) []storage.Volume {
	out := make([]storage.Volume, 0, len(vols))
	for _, v := range vols {
		out = append(out, storage.Volume{ID: v.ID, Phase: v.Phase, Parent: v.Parent, Size: v.Size})
	}

	return out
}

// conditionFalseWith reports whether condition t is already False with message msg.
func conditionFalseWith(m *ichorv1alpha1.TalosMachine, t, msg string) bool {
	c := apimeta.FindStatusCondition(m.Status.Conditions, t)

	return c != nil && c.Status == metav1.ConditionFalse && c.Message == msg
}
