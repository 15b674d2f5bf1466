// Package netpol is Ichor's static set of CiliumNetworkPolicies for its own
// namespace (architecture, "Deployment", Network policy): a default deny
// plus one policy per pod Ichor runs there (ichor-controller, ichor-ui, the
// installer Job), each rule one flow, and the opt-in metrics ingress from
// one named namespace.
//
// The policies are written in kustomize/optional/cilium-network-policy; the
// chart generator (tools/chart, `go tool task generate`) builds them into
// policies.yaml and metrics.yaml here, which this package embeds, and into
// the chart's templates. Flows lists the flows Ichor's pods use, with the
// policy that allows each, and Allows evaluates a flow against policies of
// the shapes the set uses, so a test can check the one against the other.
//
// Egress to what lies outside the cluster (Talos nodes, S3 stores, release
// sources, an external OIDC provider) is not here: no policy of this set
// allows `world` egress.
package netpol

import (
	"bytes"
	_ "embed" // the generated policy set
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Names of the policies and what selects them.
const (
	// DefaultDenyName is the policy that puts every pod of the namespace into
	// default deny, both directions.
	DefaultDenyName = "ichor-default-deny"
	// ControllerPolicy allows ichor-controller's flows.
	ControllerPolicy = "ichor-controller"
	// UIPolicy allows ichor-ui's flows.
	UIPolicy = "ichor-ui"
	// InstallerPolicy allows the installer Job's flows.
	InstallerPolicy = "ichor-installer"
	// ControllerMetricsPolicy allows the metrics namespace to scrape the controller.
	ControllerMetricsPolicy = "ichor-controller-metrics"
	// UIMetricsPolicy allows the metrics namespace to scrape ichor-ui.
	UIMetricsPolicy = "ichor-ui-metrics"
	// CRDName is Cilium's CustomResourceDefinition of CiliumNetworkPolicy.
	CRDName = "ciliumnetworkpolicies.cilium.io"
	// metricsPlaceholder is the namespace metrics.yaml names, which
	// Options.MetricsNamespace replaces.
	metricsPlaceholder = "monitoring"
)

// GVK is the kind of every policy of the set.
var GVK = schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}

var (
	//go:embed policies.yaml
	policiesYAML []byte
	//go:embed metrics.yaml
	metricsYAML []byte
)

// Options shape the set.
type Options struct {
	// MetricsNamespace is the namespace whose pods may reach both /metrics
	// ports (where Prometheus runs). Empty: no pod may.
	MetricsNamespace string
}

// Policies returns the policy set for namespace, default deny last, so that
// applying them in order never denies a flow before its allow exists.
func Policies(namespace string, opts Options) []*unstructured.Unstructured {
	objs := mustParse(policiesYAML)

	if opts.MetricsNamespace != "" {
		metrics := mustParse(metricsYAML)
		for _, m := range metrics {
			setMetricsNamespace(m, opts.MetricsNamespace)
		}

		// Before the default deny, which is last.
		objs = append(objs[:len(objs)-1:len(objs)-1], append(metrics, objs[len(objs)-1])...)
	}

	for _, o := range objs {
		o.SetNamespace(namespace)
	}

	return objs
}

// setMetricsNamespace replaces the placeholder namespace of every
// fromEndpoints selector of a metrics policy.
func setMetricsNamespace(o *unstructured.Unstructured, namespace string) {
	rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
	for _, r := range rules {
		peers, _ := r.(map[string]any)["fromEndpoints"].([]any)
		for _, p := range peers {
			labels, _ := p.(map[string]any)["matchLabels"].(map[string]any)
			if labels[namespaceLabel] == metricsPlaceholder {
				labels[namespaceLabel] = namespace
			}
		}
	}

	_ = unstructured.SetNestedSlice(o.Object, rules, "spec", "ingress")
}

// mustParse parses embedded multi-document YAML; the files are generated
// and tested, so a failure is a broken build.
func mustParse(data []byte) []*unstructured.Unstructured {
	objs, err := parse(data)
	if err != nil {
		panic(fmt.Sprintf("netpol: the embedded policy set does not parse: %v", err))
	}

	if len(objs) == 0 {
		panic("netpol: the embedded policy set is empty")
	}

	return objs
}

func parse(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)

	var out []*unstructured.Unstructured

	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}

			return nil, err
		}

		if len(obj) == 0 {
			continue
		}

		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}
