package lifecycle

import (
	"context"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/kubernetes"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// WorkloadFunc returns a client of the cluster's own Kubernetes API.
type WorkloadFunc = workload.Func

// workloadFromControlPlane fetches the admin kubeconfig from a control plane
// that answers (Talos's Kubeconfig RPC) and builds a client from it.
// The client is kept for a while (workload.Cache): machines joining poll it
// every few seconds each.
func (r *Reconciler) workloadFromControlPlane(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (kubernetes.Interface, error) {
	return r.workloads.Client(c, b, time.Now(), func() (kubernetes.Interface, error) {
		cps, err := r.machines(ctx, c.Namespace, c.Name, func(m *ichorv1alpha1.TalosMachine) bool {
			// The first control plane is not provisioned until its Node is Ready,
			// which is read through its own API server.
			return m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Address != "" && (provisioned(m) || m.Status.ConfigSentAt != nil)
		})
		if err != nil {
			return nil, err
		}

		return workload.Client(ctx, r.Nodes, c.Name, cps, b)
	})
}

// controlPlanes lists the provisioned control planes of a cluster, except the
// machine named except.
func (r *Reconciler) controlPlanes(ctx context.Context, namespace, cluster, except string) ([]ichorv1alpha1.TalosMachine, error) {
	return r.machines(ctx, namespace, cluster, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Name != except && m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Address != "" && provisioned(m)
	})
}

// machines lists the machines of a cluster that keep says to keep.
func (r *Reconciler) machines(ctx context.Context, namespace, cluster string, keep func(*ichorv1alpha1.TalosMachine) bool) ([]ichorv1alpha1.TalosMachine, error) {
	return machinestate.Machines(ctx, r.Client, namespace, cluster, keep)
}
