package cilium

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

const (
	// ReleaseName is the name of Ichor's Cilium Helm release.
	ReleaseName = "cilium"
	// Namespace is the namespace of the release, as in Talos's guide.
	Namespace = "kube-system"
)

// Options say what to render.
type Options struct {
	// Version is the chart version; empty is release.DefaultCiliumVersion.
	Version string
	// KubernetesVersion is the cluster's Kubernetes version, which the chart's
	// templates test; empty is release.DefaultKubernetesVersion.
	KubernetesVersion string
	// Choices are the cluster's tunnel, kube-proxy mode and Node count.
	Choices ciliumvalues.Choices
	// UserValues is the user's layer (spec.cni.cilium.values); it may not set
	// an Ichor-owned key.
	UserValues map[string]any
}

// Rendered is the output of a render.
type Rendered struct {
	// Version is the chart version rendered.
	Version string
	// Values are the effective values the chart was rendered with (before the
	// chart's own defaults).
	Values map[string]any
	// Manifest is the multi-document YAML of the release's objects, in Helm's
	// install order (hooks are not included).
	Manifest string
	// SHA256 is the hex SHA-256 of Manifest.
	SHA256 string
}

// Render renders the embedded chart with the effective values, offline: it
// never reads a kubeconfig nor opens a connection (Helm's client-only dry
// run, `helm template`), so it needs no cluster and gives the same bytes for
// the same options. A user layer that sets an Ichor-owned key fails with a
// *ciliumvalues.OwnedKeyError, an unknown version with an *UnknownVersionError.
func Render(ctx context.Context, opts Options) (*Rendered, error) {
	in, err := prepare(opts)
	if err != nil {
		return nil, err
	}

	return renderInputs(ctx, in)
}

// RenderWithoutOwned renders the chart of opts with Ichor's defaults and the
// user's layer but none of the Ichor-owned keys, which keep the chart's own
// defaults. Compared with Render's manifest, it shows which parts of each
// object the Ichor-owned keys decide (the adoption's takeover check).
func RenderWithoutOwned(ctx context.Context, opts Options) (*Rendered, error) {
	in, err := prepare(opts)
	if err != nil {
		return nil, err
	}

	if in.values, err = ciliumvalues.WithoutOwned(opts.UserValues, opts.Choices); err != nil {
		return nil, err
	}

	return renderInputs(ctx, in)
}

func renderInputs(ctx context.Context, in *inputs) (*Rendered, error) {
	// ClientOnly with DryRun is `helm template`: Helm swaps in a printing
	// client and in-memory release storage and renders with default
	// capabilities at KubeVersion (helm.sh/helm/v3 pkg/action/install.go,
	// RunWithContext), which are in.capabilities(). No RESTClientGetter is
	// set, so `lookup` finds nothing.
	cfg := &action.Configuration{Log: func(string, ...any) {}}
	install := action.NewInstall(cfg)
	install.DryRun = true
	install.DryRunOption = "client"
	install.ClientOnly = true
	install.ReleaseName = ReleaseName
	install.Namespace = Namespace
	install.KubeVersion = in.kubeVersion

	rel, err := install.RunWithContext(ctx, in.chart, copyValues(in.values))
	if err != nil {
		return nil, fmt.Errorf("render the Cilium chart %s: %w", in.version, err)
	}
	manifest := strings.TrimSpace(rel.Manifest) + "\n"
	sum := sha256.Sum256([]byte(manifest))
	return &Rendered{Version: in.version, Values: in.values, Manifest: manifest, SHA256: hex.EncodeToString(sum[:])}, nil
}

// inputs are what a render of Options needs: Render and Apply share them,
// so the release Apply installs is the manifest Render gives.
type inputs struct {
	version     string
	kubeVersion *chartutil.KubeVersion
	values      map[string]any
	chart       *chart.Chart
}

// prepare resolves the defaults of opts, computes the effective values and
// loads the chart. A user layer that sets an Ichor-owned key fails with a
// *ciliumvalues.OwnedKeyError, an unknown version with an *UnknownVersionError.
func prepare(opts Options) (*inputs, error) {
	version := opts.Version
	if version == "" {
		version = release.DefaultCiliumVersion
	}
	kubeVersion := opts.KubernetesVersion
	if kubeVersion == "" {
		kubeVersion = release.DefaultKubernetesVersion
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q: %w", kubeVersion, err)
	}
	values, err := ciliumvalues.Effective(opts.UserValues, opts.Choices)
	if err != nil {
		return nil, err
	}
	ch, err := LoadChart(version)
	if err != nil {
		return nil, err
	}
	return &inputs{version: version, kubeVersion: kv, values: values, chart: ch}, nil
}

// capabilities are what a client-only render sees (Helm's default
// capabilities at the Kubernetes version; install.go RunWithContext): Apply
// renders against the cluster with these rather than the cluster's
// discovery, so a CRD that happens to be installed (Gateway API, Prometheus
// operator) cannot make the release differ from Render's manifest, which
// Talos applied at bootstrap.
func (in *inputs) capabilities() *chartutil.Capabilities {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *in.kubeVersion
	return caps
}

// Helm's engine may change the values it is given (coalescing the chart's
// defaults into them), so every use gets its own copy.
func copyValues(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch t := v.(type) {
		case map[string]any:
			out[k] = copyValues(t)
		case []any:
			s := make([]any, len(t))
			for i, e := range t {
				if mm, ok := e.(map[string]any); ok {
					s[i] = copyValues(mm)
				} else {
					s[i] = e
				}
			}
			out[k] = s
		default:
			out[k] = v
		}
	}
	return out
}
