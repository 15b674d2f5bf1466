package operation

// The managed cluster as the steps reach it: its control planes, their etcd, its Kubernetes API.

import (
	"context"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// controlPlanes are the cluster's configured control planes.
func (r *Reconciler) controlPlanes(ctx context.Context, op *ichorv1alpha1.TalosOperation) ([]ichorv1alpha1.TalosMachine, error) {
	return machinestate.Machines(ctx, r.Client, op.Namespace, op.Spec.ClusterName, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Spec.Role == ichorv1alpha1.RoleControlPlane && rollout.Configured(m)
	})
}

// controlPlanesEtcd reads, now, whether each configured control plane's
// etcd member answers (one that cannot be dialled does not).
func (r *Reconciler) controlPlanesEtcd(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) ([]guard.ControlPlaneEtcd, error) {
	cps, err := r.controlPlanes(ctx, op)
	if err != nil {
		return nil, err
	}

	out := make([]guard.ControlPlaneEtcd, 0, len(cps))

	for _, cp := range cps {
		seen := guard.ControlPlaneEtcd{Name: cp.Name}

		if n, err := r.Nodes.Dial(ctx, cp.Spec.Address, b); err == nil {
			seen.Healthy = n.EtcdHealthy(ctx)
			n.Close()
		}

		out = append(out, seen)
	}

	return out, nil
}

// etcdHealthy is "" when every control plane's etcd member answers, else
// which do not.
func (r *Reconciler) etcdHealthy(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) string {
	cps, err := r.controlPlanesEtcd(ctx, op, b)
	if err != nil {
		return err.Error()
	}

	var bad []string

	for _, cp := range cps {
		if !cp.Healthy {
			bad = append(bad, cp.Name)
		}
	}

	if len(bad) > 0 {
		return "no answer from the etcd member of " + strings.Join(bad, ", ")
	}

	return ""
}

// controlPlaneDown checks, now, that the machine's control plane may be taken
// down (guard.CheckControlPlaneDown); what is what is done to it ("rebooting
// cp-1"). "" when it may, else why not.
func (w *work) controlPlaneDown(ctx context.Context, what string) string {
	cps, err := w.r.controlPlanesEtcd(ctx, w.op, w.st.Bundle)
	if err != nil {
		return "etcd is not healthy on every control plane, so " + what + " could lose quorum: " + err.Error()
	}

	if ref := guard.CheckControlPlaneDown(cps, w.m.Name, what); ref != nil {
		return ref.Message()
	}

	return ""
}

func (r *Reconciler) workloadConfig(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) (*rest.Config, error) {
	cps, err := r.controlPlanes(ctx, op)
	if err != nil {
		return nil, err
	}

	return workload.Config(ctx, r.Nodes, op.Spec.ClusterName, cps, b)
}

func (r *Reconciler) workload(ctx context.Context, op *ichorv1alpha1.TalosOperation, b *secrets.Bundle) (kubernetes.Interface, error) {
	cfg, err := r.workloadConfig(ctx, op, b)
	if err != nil {
		return nil, err
	}

	return kubernetes.NewForConfig(cfg)
}
