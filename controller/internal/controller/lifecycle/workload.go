package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/talosnode"
)

// WorkloadFunc returns a client of the cluster's own Kubernetes API.
type WorkloadFunc func(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (kubernetes.Interface, error)

// workloadTimeout bounds every call to the workload cluster's API.
const workloadTimeout = 20 * time.Second

// workloadFromControlPlane fetches the admin kubeconfig from a control plane
// that answers (Talos's Kubeconfig RPC) and builds a client from it. The
// kubeconfig stays in memory.
func (r *Reconciler) workloadFromControlPlane(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle) (kubernetes.Interface, error) {
	cps, err := r.machines(ctx, c.Namespace, c.Name, func(m *ichorv1alpha1.TalosMachine) bool {
		// The first control plane is not provisioned until its Node is Ready,
		// which is read through its own API server.
		return m.Spec.Role == ichorv1alpha1.RoleControlPlane && m.Spec.Address != "" && (provisioned(m) || m.Status.ConfigSentAt != nil)
	})
	if err != nil {
		return nil, err
	}

	var errs []error

	for _, cp := range cps {
		n, err := r.Nodes.Dial(ctx, cp.Spec.Address, b)
		if err != nil {
			errs = append(errs, err)

			continue
		}

		kc, err := n.Kubeconfig(ctx)
		n.Close()

		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cp.Name, err))

			continue
		}

		cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			return nil, errors.New("the control plane's kubeconfig does not parse")
		}

		cfg.Timeout = workloadTimeout

		return kubernetes.NewForConfig(cfg)
	}

	if len(errs) == 0 {
		return nil, fmt.Errorf("cluster %s has no provisioned control plane to reach its Kubernetes API through", c.Name)
	}

	return nil, fmt.Errorf("no control plane of cluster %s gave a kubeconfig: %w", c.Name, errors.Join(errs...))
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
	var list ichorv1alpha1.TalosMachineList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{machinestate.ClusterIndex: cluster}); err != nil {
		return nil, err
	}

	var out []ichorv1alpha1.TalosMachine

	for i := range list.Items {
		if keep(&list.Items[i]) {
			out = append(out, list.Items[i])
		}
	}

	return out, nil
}

// survivor dials another provisioned control plane of m's cluster that
// answers; nil when none does.
func (r *Reconciler) survivor(ctx context.Context, m *ichorv1alpha1.TalosMachine, b *secrets.Bundle) (*talosnode.Node, error) {
	cps, err := r.controlPlanes(ctx, m.Namespace, m.Spec.ClusterName, m.Name)
	if err != nil {
		return nil, err
	}

	for _, cp := range cps {
		n, err := r.Nodes.Dial(ctx, cp.Spec.Address, b)
		if err != nil {
			continue
		}

		if n.EtcdHealthy(ctx) {
			return n, nil
		}

		n.Close()
	}

	return nil, nil
}

// nodeByAddress finds the Kubernetes Node whose InternalIP is address.
func nodeByAddress(ctx context.Context, k kubernetes.Interface, address string) (*corev1.Node, error) {
	nodes, err := k.CoreV1().Nodes().List(ctx, listAll)
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}

	want := net.ParseIP(address)

	for i := range nodes.Items {
		for _, a := range nodes.Items[i].Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).Equal(want) {
				return &nodes.Items[i], nil
			}
		}
	}

	return nil, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}
