package teardown

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// Event reasons of the reset path.
const (
	// ResetRequestedReason: the teardown sent a machine a graceful reset.
	ResetRequestedReason = "TeardownResetRequested"
	// ResetSkippedReason: a machine could not be reset and is left as it is.
	ResetSkippedReason = "TeardownResetSkipped"
)

// runsConfig reports whether a machine was sent the cluster's configuration.
func runsConfig(m *ichorv1alpha1.TalosMachine) bool {
	return m.Status.ConfigSentAt != nil || meta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition)
}

// leftRunning reports whether a machine keeps running the cluster's
// configuration after the teardown: it runs it and was not sent a reset.
func leftRunning(m *ichorv1alpha1.TalosMachine) bool {
	return runsConfig(m) && m.Status.ResetRequestedAt == nil
}

// resetMachines runs only when the cluster carries
// ichor.maesh.dev/teardown-reset-machines: "true" (the webhook asks
// `reset-node` on talosoperations of whoever set it). Each machine that runs the
// cluster's configuration and was not reset yet gets, in this order: the
// hold-apply annotation (so that the lifecycle does not install it again
// once it is back in maintenance mode), the check that the node at its
// address is this machine (talos Verified), status.resetRequestedAt written
// with the optimistic lock, and then one graceful Reset wiping STATE and
// EPHEMERAL with a reboot (reclaim.ResetRequest, the same reset as a node
// removal). A restarted controller sees resetRequestedAt and never sends a
// second one. A machine that does not answer, or is not the machine its
// TalosMachine names, is left as it is with a Warning Event; it then counts
// as left running, so the bundle Secret is kept.
func (r *Reconciler) resetMachines(ctx context.Context, c *ichorv1alpha1.TalosCluster) (bool, error) {
	if c.Annotations[ichorv1alpha1.TeardownResetMachinesAnnotation] != annotationTrue {
		return true, nil
	}
	ms, err := ofCluster(ctx, r.machineReader(), c, &ichorv1alpha1.TalosMachineList{},
		func(o *ichorv1alpha1.TalosMachine) string { return o.Spec.ClusterName })
	if err != nil {
		return false, err
	}
	var b *secrets.Bundle
	for _, m := range ms {
		if !leftRunning(m) || !m.DeletionTimestamp.IsZero() || m.Annotations[skippedAnnotation] != "" {
			continue
		}
		if m.Spec.Address == "" {
			if err := r.skip(ctx, c, m, "it has no spec.address to reach its node at"); err != nil {
				return false, err
			}
			continue
		}
		if b == nil {
			if b, err = r.loadBundle(ctx, c); err != nil {
				return false, err
			}
		}
		if err := r.resetOne(ctx, c, m, b); err != nil {
			return false, err
		}
	}
	return true, nil
}

// skippedAnnotation on a TalosMachine says why the teardown left it as it is.
const skippedAnnotation = "ichor.maesh.dev/teardown-reset-skipped"

// skip leaves a machine as it is, with a Warning Event, and marks it so
// that a later pass does not try again.
func (r *Reconciler) skip(ctx context.Context, c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, why string) error {
	r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ResetSkippedReason, "Teardown",
		"machine %s was not reset: %s; it is left as it is and still runs the cluster's configuration", m.Name, why)
	patch := client.MergeFrom(m.DeepCopy())
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[skippedAnnotation] = why
	if err := r.Client.Patch(ctx, m, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("marking TalosMachine %s as not reset: %w", m.Name, err)
	}
	return nil
}

func (r *Reconciler) loadBundle(ctx context.Context, c *ichorv1alpha1.TalosCluster) (*secrets.Bundle, error) {
	s := &corev1.Secret{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: c.Spec.SecretsBundleRef.Name}, s); err != nil {
		return nil, fmt.Errorf("reading the secrets bundle Secret %s to reset the machines: %w", c.Spec.SecretsBundleRef.Name, err)
	}
	b, err := bundle.LoadForCluster(s, c)
	if err != nil {
		return nil, fmt.Errorf("loading the secrets bundle to reset the machines: %w", err)
	}
	return b, nil
}

// resetOne holds, verifies, records and resets one machine.
func (r *Reconciler) resetOne(ctx context.Context, c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, b *secrets.Bundle) error {
	if _, held := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]; !held {
		patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[ichorv1alpha1.HoldApplyAnnotation] = "teardown"
		if err := r.Client.Patch(ctx, m, patch); err != nil {
			return fmt.Errorf("holding TalosMachine %s before its reset: %w", m.Name, err)
		}
	}

	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	d := r.Dialer
	if d == nil {
		d = &talos.Dialer{}
	}
	n, err := d.Dial(dctx, m.Spec.Address, b)
	if err != nil {
		return r.skip(ctx, c, m, "its node does not answer: "+talos.Message(err))
	}
	defer n.Close()
	v, err := n.VerifyIdentity(dctx, talos.MachineIdentity(m))
	if err != nil {
		return r.skip(ctx, c, m, talos.Message(err))
	}

	// Recorded before the call, with the optimistic lock: a stale read or a
	// second controller fails here instead of sending a second Reset.
	now := metav1.Now()
	patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
	m.Status.ResetRequestedAt = &now
	if err := r.Client.Status().Patch(ctx, m, patch); err != nil {
		return fmt.Errorf("recording the reset of TalosMachine %s: %w", m.Name, err)
	}

	if err := v.Reset(dctx, reclaim.ResetRequest(true, true)); err != nil {
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
			// The node refused before doing anything: it still runs the cluster.
			patch := client.MergeFromWithOptions(m.DeepCopy(), client.MergeFromWithOptimisticLock{})
			m.Status.ResetRequestedAt = nil
			if perr := r.Client.Status().Patch(ctx, m, patch); perr != nil {
				return fmt.Errorf("clearing the refused reset of TalosMachine %s: %w", m.Name, perr)
			}
			return r.skip(ctx, c, m, "the node refused the reset: "+talos.Message(err))
		}
		// Sent, not confirmed: Reset is fire-and-forget; it counts as sent.
	}
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, ResetRequestedReason, "Teardown",
		"requested a graceful reset of machine %s (STATE and EPHEMERAL wiped, then a reboot into maintenance mode)", m.Name)
	return nil
}
