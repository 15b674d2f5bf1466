// Package ciliumvalues holds Cilium's Helm values as Ichor layers them: Ichor's
// defaults, then the user's layer (spec.cni.cilium.values), then the
// Ichor-owned keys (architecture "Cilium", "Values"). Validate is the one
// check of a user layer that the webhook, the UI backend, the CLI and the
// controller share, so that a refusal reads the same everywhere.
//
// The package is plain data and does not import Helm, so the admission
// webhook can validate without embedding the charts; contracts/pkg/cilium
// renders the charts with these values.
package ciliumvalues

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The Ichor-owned settings that are plain constants.
const (
	// KubePrismHost and KubePrismPort are the KubePrism endpoint on every
	// Talos node: Cilium reaches the API server through it, with no kube-proxy
	// and no Service network (Talos guide "Deploying Cilium CNI",
	// https://docs.siderolabs.com/kubernetes-guides/cni/deploying-cilium;
	// the port is machinery constants.DefaultKubePrismPort).
	KubePrismHost = "localhost"
	KubePrismPort = 7445
	// secretsNamespaceKey is the key under which the chart names a secrets namespace.
	secretsNamespaceKey = "secretsNamespace"
	// SecretsNamespace is the namespace every *.secretsNamespace.name is pinned to.
	SecretsNamespace = "cilium-secrets"
	// CgroupHostRoot is where Talos mounts cgroup v2; Cilium must use it
	// rather than mount its own (Talos guide, cgroup.autoMount.enabled=false).
	CgroupHostRoot = "/sys/fs/cgroup"
	// TunnelVXLAN and TunnelGeneve are the tunnel protocols spec.cni.tunnel offers.
	TunnelVXLAN  = "vxlan"
	TunnelGeneve = "geneve"
)

// OwnedKeys are the value paths Ichor sets itself; a user layer may set
// none of them, nor anything under them. Any path ending in
// secretsNamespace.name is owned too (SecretsNamespaceOwners lists the ones
// the embedded charts have).
var ownedKeys = []string{
	"cgroup.autoMount.enabled",
	"cgroup.hostRoot",
	// With method "helm" the chart generates CAs and private keys at render
	// time: the manifest would carry private keys and change on every render.
	// Ichor pins the chart's CronJob, which creates them in the cluster.
	"clustermesh.apiserver.tls.auto.method",
	"hubble.tls.auto.method",
	"ipam.mode",
	"k8sServiceHost",
	"k8sServiceHostRef",
	"k8sServicePort",
	"kubeProxyReplacement",
	"routingMode",
	"securityContext.capabilities.ciliumAgent",
	"securityContext.capabilities.cleanCiliumState",
	"tunnelProtocol",
}

// OwnedKeys returns the value paths Ichor owns, sorted, plus the pattern
// "*.secretsNamespace.name".
func OwnedKeys() []string {
	return append(slices.Clone(ownedKeys), "*.secretsNamespace.name")
}

// SecretsNamespaceOwners are the top-level keys of the embedded charts that
// carry a secretsNamespace.name (a test of contracts/pkg/cilium checks the
// list against every embedded chart's values.yaml).
var SecretsNamespaceOwners = []string{"bgpControlPlane", "envoyConfig", "gatewayAPI", "ingressController", "tls"}

// CiliumAgentCapabilities is the chart's default capability set of the agent
// without SYS_MODULE: Talos does not let workloads load kernel modules
// (Talos guide "Deploying Cilium CNI"). SYSLOG is in the default of the charts
// Ichor embeds (newer than the guide's v1.18.0 list); a test of
// contracts/pkg/cilium checks this list against every embedded chart.
var CiliumAgentCapabilities = []string{
	"CHOWN", "KILL", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "SYS_ADMIN",
	"SYS_RESOURCE", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID", "SYSLOG",
}

// CleanCiliumStateCapabilities is the chart's default capability set of the
// clean-cilium-state init container without SYS_MODULE (Talos guide
// "Deploying Cilium CNI"; checked against every embedded chart like the agent's).
var CleanCiliumStateCapabilities = []string{"NET_ADMIN", "SYS_ADMIN", "SYS_RESOURCE"}

// Choices are the cluster's settings that steer the values Ichor sets.
type Choices struct {
	// Tunnel is spec.cni.tunnel: vxlan or geneve; empty means vxlan.
	Tunnel string
	// KubeProxy is spec.cni.kubeProxy: enabled or replaced; empty means enabled.
	KubeProxy string
	// Nodes is the number of Nodes of the cluster; with one (or an unknown
	// count, zero) the operator runs one replica, from two on the chart's two.
	Nodes int
}

// ErrChoice wraps a Choices value Ichor does not offer.
var ErrChoice = errors.New("unsupported choice")

func (c Choices) normalize() (Choices, error) {
	switch c.Tunnel {
	case "":
		c.Tunnel = TunnelVXLAN
	case TunnelVXLAN, TunnelGeneve:
	default:
		return c, fmt.Errorf("%w: tunnel protocol %q (use %s or %s)", ErrChoice, c.Tunnel, TunnelVXLAN, TunnelGeneve)
	}
	switch c.KubeProxy {
	case "":
		c.KubeProxy = ichorv1alpha1.KubeProxyEnabled
	case ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced:
	default:
		return c, fmt.Errorf("%w: kube-proxy mode %q (use %s or %s)", ErrChoice, c.KubeProxy, ichorv1alpha1.KubeProxyEnabled, ichorv1alpha1.KubeProxyReplaced)
	}
	return c, nil
}

// OwnedKeyError is the refusal of a user layer that sets Ichor-owned keys.
type OwnedKeyError struct {
	// Keys are the offending paths of the user layer, sorted.
	Keys []string
}

func (e *OwnedKeyError) Error() string {
	q := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return "the Cilium values may not set the Ichor-owned key(s) " + strings.Join(q, ", ") +
		": Ichor sets them itself; remove them (spec.cni.tunnel and spec.cni.kubeProxy are the choices Ichor offers)"
}

// Parse reads a user layer written as JSON or YAML; it must be a map.
// Empty input is an empty layer.
func Parse(raw []byte) (map[string]any, error) {
	if len(strings.TrimSpace(string(raw))) == 0 {
		return map[string]any{}, nil
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("the Cilium values are not valid JSON or YAML: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("the Cilium values must be a map of Helm values: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// Validate refuses a user layer that sets an Ichor-owned key, something under
// one, or replaces a map on the way to one with a non-map (for example
// `cgroup: null`). The error is an *OwnedKeyError naming every such path.
func Validate(user map[string]any) error {
	var bad []string
	walk("", user, func(p string, v any) {
		if ownedPath(p) || (!isMap(v) && ancestorOfOwned(p)) {
			bad = append(bad, p)
		}
	})
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return &OwnedKeyError{Keys: bad}
}

// ValidateRaw is Parse then Validate.
func ValidateRaw(raw []byte) error {
	m, err := Parse(raw)
	if err != nil {
		return err
	}
	return Validate(m)
}

// walk calls fn for every leaf of m (a value that is not a non-empty map) with its dotted path.
func walk(prefix string, m map[string]any, fn func(string, any)) {
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			walk(p, sub, fn)
			continue
		}
		fn(p, v)
	}
}

func isMap(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}

func ownedPath(p string) bool {
	for _, k := range ownedKeys {
		if p == k || strings.HasPrefix(p, k+".") {
			return true
		}
	}
	segs := strings.Split(p, ".")
	for i := 0; i+1 < len(segs); i++ {
		if segs[i] == secretsNamespaceKey && segs[i+1] == "name" {
			return true
		}
	}
	return false
}

func ancestorOfOwned(p string) bool {
	for _, k := range ownedKeys {
		if strings.HasPrefix(k, p+".") {
			return true
		}
	}
	segs := strings.Split(p, ".")
	return segs[len(segs)-1] == secretsNamespaceKey
}

// Defaults is Ichor's layer under the user's: the operator runs one replica on
// a one-node cluster (architecture "Cilium").
func Defaults(c Choices) map[string]any {
	d := map[string]any{}
	if c.Nodes <= 1 {
		d["operator"] = map[string]any{"replicas": 1}
	}
	return d
}

// Owned is the layer of Ichor-owned keys, over the user's: the Talos-required
// values (Talos guide "Deploying Cilium CNI": ipam.mode kubernetes, Talos's
// cgroup v2 mount, capabilities without SYS_MODULE, the KubePrism endpoint),
// kubeProxyReplacement from spec.cni.kubeProxy, the tunnel from spec.cni.tunnel
// and every secretsNamespace.name pinned to cilium-secrets.
func Owned(c Choices) (map[string]any, error) {
	c, err := c.normalize()
	if err != nil {
		return nil, err
	}
	o := map[string]any{
		"ipam":                 map[string]any{"mode": "kubernetes"},
		"kubeProxyReplacement": c.KubeProxy == ichorv1alpha1.KubeProxyReplaced,
		"routingMode":          "tunnel",
		"tunnelProtocol":       c.Tunnel,
		"k8sServiceHost":       KubePrismHost,
		"k8sServicePort":       KubePrismPort,
		"cgroup": map[string]any{
			"autoMount": map[string]any{"enabled": false},
			"hostRoot":  CgroupHostRoot,
		},
		"securityContext": map[string]any{"capabilities": map[string]any{
			"ciliumAgent":      toAny(CiliumAgentCapabilities),
			"cleanCiliumState": toAny(CleanCiliumStateCapabilities),
		}},
		// Certificates come from the chart's CronJob, never from Helm at
		// render time, so a render holds no private key and gives the same
		// bytes every time (architecture "CNI").
		"hubble":      certsByCronJob(),
		"clustermesh": map[string]any{"apiserver": certsByCronJob()},
	}
	for _, k := range SecretsNamespaceOwners {
		o[k] = map[string]any{secretsNamespaceKey: map[string]any{"name": SecretsNamespace}}
	}
	return o, nil
}

// certsByCronJob is the chart's switch that has its CronJob, not Helm, make
// TLS certificates.
func certsByCronJob() map[string]any {
	return map[string]any{"tls": map[string]any{"auto": map[string]any{"method": "cronJob"}}}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// Effective layers Ichor's defaults, the user's layer and the Ichor-owned
// keys, in that order, after validating the user's layer. The result is a new
// map; user is not changed. A null in the user's layer stays, so that Helm
// removes the chart default under it, as `helm --set key=null` would.
func Effective(user map[string]any, c Choices) (map[string]any, error) {
	if err := Validate(user); err != nil {
		return nil, err
	}
	owned, err := Owned(c)
	if err != nil {
		return nil, err
	}
	out := Defaults(c)
	merge(out, deepCopy(user))
	merge(out, owned)
	return out, nil
}

// StripOwned is user without the Ichor-owned keys (a copy), and the paths it
// dropped, sorted: the user's layer of a Cilium installed by someone else,
// whose owned keys Ichor sets itself.
func StripOwned(user map[string]any) (map[string]any, []string) {
	var dropped []string
	out := stripOwned("", deepCopy(user), &dropped)
	slices.Sort(dropped)
	return out, dropped
}

func stripOwned(prefix string, m map[string]any, dropped *[]string) map[string]any {
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if ownedPath(p) {
			*dropped = append(*dropped, p)
			delete(m, k)
			continue
		}
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 {
			if left := stripOwned(p, sub, dropped); len(left) == 0 {
				delete(m, k)
			}
		}
	}
	return m
}

// WithoutOwned layers Ichor's defaults and the user's layer, leaving every
// Ichor-owned key at the chart's default: Effective without its last layer.
func WithoutOwned(user map[string]any, c Choices) (map[string]any, error) {
	if err := Validate(user); err != nil {
		return nil, err
	}
	out := Defaults(c)
	merge(out, deepCopy(user))
	return out, nil
}

// merge writes src over dst: maps merge key by key, anything else replaces.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
			dst[k] = deepCopy(sm)
			continue
		}
		dst[k] = v
	}
}

func deepCopy(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return deepCopy(t)
	case []any:
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = copyValue(e)
		}
		return s
	default:
		return v
	}
}
