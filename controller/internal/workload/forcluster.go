package workload

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
)

// ForCluster reaches the cluster's Kubernetes API with the admin credentials
// of its bundle (read through apiReader: Secrets are not cached), through an
// approved control plane (listed through cache).
func ForCluster(ctx context.Context, apiReader, cache client.Reader, nodes *talos.Dialer, c *ichorv1alpha1.TalosCluster) (*rest.Config, kubernetes.Interface, error) {
	b, err := machinestate.LoadBundle(ctx, apiReader, c)
	if err != nil {
		return nil, nil, err
	}

	cps, err := machinestate.Machines(ctx, cache, c.Namespace, c.Name, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved &&
			m.Spec.Address != "" && m.DeletionTimestamp.IsZero()
	})
	if err != nil {
		return nil, nil, err
	}

	cfg, err := Config(ctx, nodes, c.Name, cps, b)
	if err != nil {
		return nil, nil, err
	}

	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}

	return cfg, k, nil
}
