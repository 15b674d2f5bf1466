package cilium

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
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

// TakesOver says whether a cluster's Cilium was running before Ichor, and
// `ichor adopt` wrote the cluster to take it over (CNIBootstrapTakeover).
func TakesOver(c *ichorv1alpha1.TalosCluster) bool {
	return c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetCilium &&
		c.Annotations[ichorv1alpha1.CNIBootstrapAnnotation] == ichorv1alpha1.CNIBootstrapTakeover
}

// HandsOver says whether the hand-over controller makes a cluster's running
// Cilium Ichor's Helm release: one `ichor init` booted, or one adopted.
func HandsOver(c *ichorv1alpha1.TalosCluster) bool {
	return BootstrappedInline(c) || TakesOver(c)
}

// TakeoverChart is the embedded chart a running Cilium of version running is
// taken over with: the same version when Ichor embeds it, else the embedded
// chart of the same minor, which must be the pinned chart's minor or the one
// below it (architecture, "Cilium", "Takeover").
func TakeoverChart(running string) (string, error) {
	embedded := Versions()
	if slices.Contains(embedded, running) {
		return running, nil
	}

	minor := func(v string) (int, int, bool) {
		parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
		if len(parts) < 2 {
			return 0, 0, false
		}

		maj, err1 := strconv.Atoi(parts[0])
		mn, err2 := strconv.Atoi(parts[1])

		return maj, mn, err1 == nil && err2 == nil
	}

	rMaj, rMin, ok := minor(running)
	pMaj, pMin, _ := minor(release.DefaultCiliumVersion)

	if !ok || rMaj != pMaj || (rMin != pMin && rMin != pMin-1) {
		return "", fmt.Errorf("the Cilium that runs is %s: Ichor takes over Cilium %d.%d or %d.%d (the pinned chart %s's minor or the one below); "+
			"upgrade or downgrade Cilium to one of them first", orUnknown(running), pMaj, pMin, pMaj, pMin-1, release.DefaultCiliumVersion)
	}

	for i := len(embedded) - 1; i >= 0; i-- {
		if m, n, _ := minor(embedded[i]); m == rMaj && n == rMin {
			return embedded[i], nil
		}
	}

	return "", fmt.Errorf("the Cilium that runs is %s and this Ichor embeds no chart of its minor (it has %s)", running, strings.Join(embedded, ", "))
}

func orUnknown(v string) string {
	if v == "" {
		return "of an unknown version (the agent image's tag is not a version)"
	}

	return v
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
