package cilium

import (
	"context"
	"strings"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
)

// InlineManifestName is the name of the Talos inline manifest that carries
// the bootstrap Cilium on the control planes until the hand-over.
const InlineManifestName = "cilium"

// BootstrapOptions are the options of the bootstrap Cilium of a cluster: the
// chart init booted (CNIBootstrapChartAnnotation, else the embedded default)
// at the cluster's Kubernetes version, its tunnel and
// kube-proxy mode, one Node and no user values. `ichor init` sends it as an
// inline manifest, and the controller's render keeps the same bytes on the
// control planes until CNIHandover is True (BootstrapManifest), so the
// controller's first apply changes nothing.
func BootstrapOptions(c *ichorv1alpha1.TalosCluster) Options {
	return Options{
		Version:           c.Annotations[ichorv1alpha1.CNIBootstrapChartAnnotation],
		KubernetesVersion: strings.TrimPrefix(c.Spec.KubernetesVersion, "v"),
		Choices:           ciliumvalues.Choices{Tunnel: c.Spec.CNI.Tunnel, KubeProxy: c.Spec.CNI.KubeProxy, Nodes: 1},
	}
}

// BootstrappedInline says whether a cluster's Cilium was booted by `ichor
// init` as an inline manifest (the annotation init writes): the Cilium Ichor
// hands over to its Helm release.
func BootstrappedInline(c *ichorv1alpha1.TalosCluster) bool {
	return c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetCilium &&
		c.Annotations[ichorv1alpha1.CNIBootstrapAnnotation] == ichorv1alpha1.CNIBootstrapInline
}

// NeedsBootstrapManifest says whether a cluster's control planes still carry
// the bootstrap Cilium inline manifest: init booted Cilium that way and its
// Helm release has not taken it over yet.
func NeedsBootstrapManifest(c *ichorv1alpha1.TalosCluster) bool {
	return BootstrappedInline(c) && !apimeta.IsStatusConditionTrue(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition)
}

// bootstrapCache keeps the bootstrap renders by options: the render of a
// control plane asks for the same one on every reconcile until the hand-over.
// A bootstrap render has no user values, so the rest of its options are a
// comparable key.
var bootstrapCache = struct {
	sync.Mutex
	m map[bootstrapKey]*Rendered
}{m: map[bootstrapKey]*Rendered{}}

type bootstrapKey struct {
	version, kubernetesVersion string
	choices                    ciliumvalues.Choices
}

// BootstrapManifest renders the bootstrap Cilium of a cluster
// (BootstrapOptions), from a cache of the last few.
func BootstrapManifest(ctx context.Context, c *ichorv1alpha1.TalosCluster) (*Rendered, error) {
	o := BootstrapOptions(c)
	key := bootstrapKey{o.Version, o.KubernetesVersion, o.Choices}

	bootstrapCache.Lock()
	r, ok := bootstrapCache.m[key]
	bootstrapCache.Unlock()

	if ok {
		return r, nil
	}

	r, err := Render(ctx, o)
	if err != nil {
		return nil, err
	}

	bootstrapCache.Lock()
	if len(bootstrapCache.m) >= 8 {
		clear(bootstrapCache.m)
	}
	bootstrapCache.m[key] = r
	bootstrapCache.Unlock()

	return r, nil
}
