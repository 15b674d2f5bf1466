package guard

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// The fact loaders: the one way the webhook, the CLI and ichor-ui read what
// the checks above decide on, so that the three count alike. Each takes a
// client.Reader: the webhook passes the API server itself (admission must
// not decide on a stale cache), the CLI its client and ichor-ui its cache.
// Read errors are returned wrapped with what was being read; the callers
// turn them into their own kind of error.

// ApprovedCounts is the number of approved machines of one cluster.
type ApprovedCounts struct {
	// ControlPlanes is the number of approved control planes.
	ControlPlanes int
	// Workers is the number of approved workers.
	Workers int
}

// LoadCluster returns the TalosCluster name in namespace, or nil when it does not exist.
func LoadCluster(ctx context.Context, r client.Reader, namespace, name string) (*ichorv1alpha1.TalosCluster, error) {
	c := &ichorv1alpha1.TalosCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading TalosCluster %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// CountApproved counts the approved control planes and workers of cluster in
// namespace, leaving out the machine named except and every machine being
// deleted: a machine whose removal has begun does not stay, so it counts
// neither toward quorum nor as the control plane or worker that remains.
func CountApproved(ctx context.Context, r client.Reader, namespace, cluster, except string) (ApprovedCounts, error) {
	var n ApprovedCounts
	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return n, fmt.Errorf("listing TalosMachines in %s: %w", namespace, err)
	}
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName != cluster || m.Name == except || m.DeletionTimestamp != nil {
			continue
		}
		switch {
		case IsApprovedControlPlane(m):
			n.ControlPlanes++
		case IsApprovedWorker(m):
			n.Workers++
		}
	}
	return n, nil
}

// LoadMachineFacts reads the facts of the machine checks for m: its cluster
// and the other approved machines of that cluster (see CountApproved).
func LoadMachineFacts(ctx context.Context, r client.Reader, m *ichorv1alpha1.TalosMachine) (MachineFacts, error) {
	c, err := LoadCluster(ctx, r, m.Namespace, m.Spec.ClusterName)
	if err != nil {
		return MachineFacts{}, err
	}
	n, err := CountApproved(ctx, r, m.Namespace, m.Spec.ClusterName, m.Name)
	if err != nil {
		return MachineFacts{}, err
	}
	return MachineFacts{Cluster: c, OtherApprovedControlPlanes: n.ControlPlanes, OtherApprovedWorkers: n.Workers}, nil
}

// LoadClusterFacts reads the facts of the cluster checks for c: its approved
// machines (see CountApproved) and its unfinished cni and kube-proxy operations.
func LoadClusterFacts(ctx context.Context, r client.Reader, c *ichorv1alpha1.TalosCluster) (ClusterFacts, error) {
	n, err := CountApproved(ctx, r, c.Namespace, c.Name, "")
	if err != nil {
		return ClusterFacts{}, err
	}
	facts := ClusterFacts{ApprovedControlPlanes: n.ControlPlanes, ApprovedWorkers: n.Workers}
	var ops ichorv1alpha1.TalosOperationList
	if err := r.List(ctx, &ops, client.InNamespace(c.Namespace)); err != nil {
		return ClusterFacts{}, fmt.Errorf("listing TalosOperations in %s: %w", c.Namespace, err)
	}
	facts.UnfinishedCNI = UnfinishedCNI(c.Name, "", ops.Items)
	if c.Spec.Authentication.IchorUsers {
		ii := &ichorv1alpha1.IchorInstallation{}
		switch err := r.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); {
		case err == nil:
			facts.UIURL = ii.Annotations[install.UIURLAnnotation]
		case !apierrors.IsNotFound(err):
			return ClusterFacts{}, fmt.Errorf("reading the IchorInstallation: %w", err)
		}
	}
	return facts, nil
}

// LoadOperationFacts reads the facts of the operation checks for op: its
// cluster, a node operation's machine and the cluster's other approved
// machines, the cluster's unfinished shutdown, and an etcd restore's backup
// and lock, the small-cluster facts (every approved machine, the
// backups, the Node loads; see smallcluster.go), and an ichor operation's
// IchorInstallation.
func LoadOperationFacts(ctx context.Context, r client.Reader, op *ichorv1alpha1.TalosOperation) (OperationFacts, error) {
	c, err := LoadCluster(ctx, r, op.Namespace, op.Spec.ClusterName)
	if err != nil {
		return OperationFacts{}, err
	}
	facts := OperationFacts{Cluster: c}
	if err := loadNodeFacts(ctx, r, op, &facts); err != nil {
		return OperationFacts{}, err
	}
	if err := loadShutdownFacts(ctx, r, op, &facts); err != nil {
		return OperationFacts{}, err
	}
	if err := loadRestoreFacts(ctx, r, op, &facts); err != nil {
		return OperationFacts{}, err
	}
	if err := loadCNIFacts(ctx, r, op, &facts); err != nil {
		return OperationFacts{}, err
	}
	if err := loadSmallClusterFacts(ctx, r, op, &facts); err != nil {
		return OperationFacts{}, err
	}
	if op.Spec.Type == ichorv1alpha1.OperationIchor {
		ii, err := LoadInstallation(ctx, r)
		if err != nil {
			return OperationFacts{}, err
		}
		facts.Installation = ii
	}
	return facts, nil
}

// LoadInstallation returns the IchorInstallation, or nil when there is none.
func LoadInstallation(ctx context.Context, r client.Reader) (*ichorv1alpha1.IchorInstallation, error) {
	ii := &ichorv1alpha1.IchorInstallation{}
	if err := r.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading IchorInstallation %s: %w", ichorv1alpha1.IchorInstallationName, err)
	}
	return ii, nil
}
