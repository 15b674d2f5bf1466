package reclaim

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// ManagedClusters lists the clusters Ichor manages with their cluster IDs and
// Talos API CA certificates, read from each cluster's bundle Secret through
// secrets. A bundle the caller may not read (the CLI of a user without
// access to Secrets) leaves the cluster ID of the TalosCluster's status; a
// missing or unloadable bundle cannot have configured a machine and is skipped.
func ManagedClusters(ctx context.Context, clusters, secrets client.Reader) ([]ManagedCluster, error) {
	var list ichorv1alpha1.TalosClusterList
	if err := clusters.List(ctx, &list); err != nil {
		return nil, err
	}

	var out []ManagedCluster

	for i := range list.Items {
		c := &list.Items[i]
		s := &corev1.Secret{}

		if err := secrets.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.SecretsBundleRef.Name}, s); err != nil {
			switch {
			case apierrors.IsNotFound(err):
				continue
			case apierrors.IsForbidden(err) && c.Status.ClusterID != "":
				out = append(out, ManagedCluster{Namespace: c.Namespace, Name: c.Name, ClusterID: c.Status.ClusterID})

				continue
			}

			return nil, err
		}

		b, err := bundle.LoadForCluster(s, c)
		if err != nil || b.Certs == nil || b.Certs.OS == nil || b.Cluster == nil {
			continue
		}

		out = append(out, ManagedCluster{Namespace: c.Namespace, Name: c.Name, ClusterID: b.Cluster.ID, OSCACert: b.Certs.OS.Crt})
	}

	return out, nil
}
