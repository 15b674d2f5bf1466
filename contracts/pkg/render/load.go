package render

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// ErrClusterNotFound is returned by LoadInput when the machine's TalosCluster does not exist.
var ErrClusterNotFound = fmt.Errorf("TalosCluster not found")

// LoadInput reads what a render of m needs besides the secrets bundle: its
// TalosCluster and the namespace's TalosConfigPatches and TalosStorages
// (Render keeps those of the cluster that apply to m). The controller, the
// CLI and ichor-ui all gather the input here, so the console's effective
// configuration is the one the controller applies; each adds the bundle it
// may hold (the real one, or ichor-ui's synthetic one). A missing cluster is
// ErrClusterNotFound (wrapped, with its name); other errors are the reader's.
func LoadInput(ctx context.Context, r client.Reader, m *ichorv1alpha1.TalosMachine) (Input, error) {
	c := &ichorv1alpha1.TalosCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: m.Spec.ClusterName}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return Input{}, fmt.Errorf("%w: %q in namespace %q", ErrClusterNotFound, m.Spec.ClusterName, m.Namespace)
		}

		return Input{}, fmt.Errorf("reading TalosCluster %s/%s: %w", m.Namespace, m.Spec.ClusterName, err)
	}

	var patches ichorv1alpha1.TalosConfigPatchList
	if err := r.List(ctx, &patches, client.InNamespace(m.Namespace)); err != nil {
		return Input{}, fmt.Errorf("listing TalosConfigPatches in %s: %w", m.Namespace, err)
	}

	var storages ichorv1alpha1.TalosStorageList
	if err := r.List(ctx, &storages, client.InNamespace(m.Namespace)); err != nil {
		return Input{}, fmt.Errorf("listing TalosStorages in %s (their presets are part of the system layer): %w", m.Namespace, err)
	}

	return Input{Cluster: c, Machine: m, Patches: patches.Items, Storages: storages.Items}, nil
}
