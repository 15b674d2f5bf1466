package render

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
)

// ErrClusterNotFound is returned by LoadInput when the machine's TalosCluster does not exist.
var ErrClusterNotFound = fmt.Errorf("TalosCluster not found")

// LoadInput reads what a render of m needs besides the secrets bundle: its
// TalosCluster and the namespace's TalosConfigPatches and TalosStorages
// (Render keeps those of the cluster that apply to m), and, while a
// Kubernetes upgrade goes on, the namespace's TalosOperations, from which the
// versions pinned for m come (Input.Kubernetes). The controller, the
// CLI and ichor-ui all gather the input here, so the console's effective
// configuration is the one the controller applies; each adds the bundle it
// may hold (the real one, or ichor-ui's synthetic one). A missing cluster is
// ErrClusterNotFound (wrapped, with its name); other errors are the reader's.
// A control plane of a cluster whose Cilium is not handed over yet gets the
// bootstrap Cilium as its inline manifest (cilium.BootstrapManifest).
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

	// A Kubernetes upgrade keeps the components it has not reached at the
	// version they run (kubeupgrade.Pins), as its kubernetes operation says.
	var ops ichorv1alpha1.TalosOperationList

	if running := c.Status.KubernetesUpgrade.Version; running != "" && !kubeupgrade.Same(running, c.Spec.KubernetesVersion) {
		if err := r.List(ctx, &ops, client.InNamespace(m.Namespace)); err != nil {
			return Input{}, fmt.Errorf("listing TalosOperations in %s (a Kubernetes upgrade decides which version each component runs): %w", m.Namespace, err)
		}
	}

	in := Input{
		Cluster: c, Machine: m, Patches: patches.Items, Storages: storages.Items,
		Kubernetes: kubeupgrade.Pins(c, m, ops.Items),
	}

	// ichor-ui's issuer, for the kube-apiserver to trust Ichor's users.
	if c.Spec.Authentication.IchorUsers && m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		ii := &ichorv1alpha1.IchorInstallation{}
		switch err := r.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); {
		case err == nil:
			in.Issuer = ii.Status.Issuer
		case !apierrors.IsNotFound(err):
			return Input{}, fmt.Errorf("reading the IchorInstallation (spec.authentication.ichorUsers trusts the issuer it publishes): %w", err)
		}
	}

	// Until Cilium's Helm release has taken it over, a control plane keeps
	// the bootstrap Cilium `ichor init` sent, byte for byte (Talos applies an
	// inline manifest create-only, so the entry only matters should an
	// object of it go missing, but dropping it is a config change on every
	// control plane for nothing).
	if m.Spec.Role == ichorv1alpha1.RoleControlPlane && cilium.NeedsBootstrapManifest(c) {
		ch, err := cilium.BootstrapManifest(ctx, c)
		if err != nil {
			return Input{}, fmt.Errorf("rendering the bootstrap Cilium of TalosCluster %s/%s: %w", c.Namespace, c.Name, err)
		}

		in.InlineManifests = []InlineManifest{{Name: cilium.InlineManifestName, Contents: ch.Manifest}}
	}

	return in, nil
}
