package netpol

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The egress policies the controller writes from the objects that name what
// lies outside the cluster (architecture, "Deployment", Network policy: no
// policy allows `world` egress).
const (
	// ControllerEgressPolicy allows ichor-controller's egress.
	ControllerEgressPolicy = "ichor-controller-egress"
	// UIEgressPolicy allows ichor-ui's egress.
	UIEgressPolicy = "ichor-ui-egress"
	// TalosAPIPort is apid's port on a Talos node, in maintenance mode too.
	TalosAPIPort = 50000
)

// Target is a peer outside the cluster that one of Ichor's pods opens
// connections to.
type Target struct {
	// Host is an IP address, a prefix (a subnet discovery scans) or a DNS name.
	Host string
	// Port is the TCP port.
	Port int
	// Source names what names the target (an object and its field), for
	// messages.
	Source string
}

func (t Target) String() string { return hostPort(t.Host, t.Port) }

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}

	return host + ":" + strconv.Itoa(port)
}

// Targets are the egress peers of ichor-controller and ichor-ui.
type Targets struct {
	// Controller are the controller's: Talos nodes, the Kubernetes API of
	// the clusters it manages, S3 stores, release sources.
	Controller []Target
	// UI are ichor-ui's: an external OIDC provider.
	UI []Target
	// ClusterNodes says that the controller manages the cluster it runs in:
	// its nodes' Talos API is then allowed by entity (host, remote-node; a
	// control plane's kube-apiserver identity is allowed every port by the
	// API server rule already), because Cilium's CIDR rules never select the address
	// of a node of the cluster (cilium/cilium
	// Documentation/security/policy/layer3.rst, "CIDR rules do not apply to
	// traffic where both sides of the connection are either managed by
	// Cilium or use an IP belonging to a node in the cluster").
	ClusterNodes bool
}

// EgressPolicies builds the egress policies of namespace from t: one per
// pod (ichor-controller-egress, ichor-ui-egress), each complete for the
// pod's egress on its own. Besides the targets (an address: toCIDR /32 or
// /128; a name: toFQDNs matchName, each on its port, TCP) each carries the
// pod's in-cluster egress again, the API server and DNS, so that
//
//   - whichever policy selecting the pod for egress Cilium sees first
//     (Cilium puts a pod in default deny for a direction once a policy with
//     rules for it selects the pod), none of the pod's flows is cut: the
//     egress policies are applied before the rest of the set (Ordered);
//   - toFQDNs works: Cilium learns the addresses of a name only from the DNS
//     answers its DNS proxy sees, which needs a DNS rule on the pod
//     (Documentation/security/policy/layer3.rst, "DNS based").
//
// A target that is neither an IP address nor a DNS name, or whose port is
// not from 1 to 65535, is an error naming its source, and nothing is built.
func EgressPolicies(namespace string, t Targets) ([]*unstructured.Unstructured, error) {
	if namespace == "" {
		return nil, errors.New("egress policies: no namespace")
	}

	var errs []error

	for _, list := range [][]Target{t.Controller, t.UI} {
		for _, tg := range list {
			if err := checkTarget(tg); err != nil {
				errs = append(errs, err)
			}
		}
	}

	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	controller := egressPolicy(namespace, ControllerEgressPolicy, ControllerPolicy,
		"ichor-controller's egress, written by the controller from the objects that name it: the API server, DNS, "+
			"Talos nodes, the Kubernetes API of the clusters it manages, S3 stores, release sources.", t.Controller)

	if t.ClusterNodes {
		rules, _, _ := unstructured.NestedSlice(controller.Object, "spec", "egress")
		rules = slices.Insert(rules, 2, any(map[string]any{
			keyToEntities: []any{EntityHost, EntityRemoteNode},
			keyToPorts:    tcpPorts(TalosAPIPort),
		}))
		_ = unstructured.SetNestedSlice(controller.Object, rules, "spec", "egress")
	}

	ui := egressPolicy(namespace, UIEgressPolicy, UIPolicy,
		"ichor-ui's egress, written by the controller from its Deployment: the API server, DNS, an external OIDC provider.", t.UI)

	return []*unstructured.Unstructured{controller, ui}, nil
}

// checkTarget refuses a target no rule can be written for.
func checkTarget(t Target) error {
	if t.Port < 1 || t.Port > 65535 {
		return fmt.Errorf("%s: port %d of %s is not from 1 to 65535", t.Source, t.Port, t.Host)
	}

	if _, err := netip.ParseAddr(t.Host); err == nil {
		return nil
	}

	if _, err := netip.ParsePrefix(t.Host); err == nil {
		return nil
	}

	name := strings.TrimSuffix(strings.ToLower(t.Host), ".")
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 || !strings.Contains(name, ".") && name != "localhost" {
		return fmt.Errorf("%s: %q is neither an IP address nor a DNS name: %s", t.Source, t.Host, strings.Join(msgs, "; "))
	}

	return nil
}

// egressPolicy is one pod's egress policy: the API server, DNS, then the
// targets grouped by port, addresses before names, in a stable order.
func egressPolicy(namespace, name, app, description string, targets []Target) *unstructured.Unstructured {
	rules := []any{
		map[string]any{keyToEntities: []any{EntityKubeAPIServer}},
		dnsRule(),
	}

	byPort := map[int][2][]string{}

	for _, t := range targets {
		g := byPort[t.Port]

		if a, err := netip.ParseAddr(t.Host); err == nil {
			g[0] = append(g[0], netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String())
		} else if p, err := netip.ParsePrefix(t.Host); err == nil {
			g[0] = append(g[0], p.Masked().String())
		} else {
			g[1] = append(g[1], strings.TrimSuffix(strings.ToLower(t.Host), "."))
		}

		byPort[t.Port] = g
	}

	ports := make([]int, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}

	slices.Sort(ports)

	for _, p := range ports {
		g := byPort[p]

		if cidrs := sortedUnique(g[0]); len(cidrs) > 0 {
			rules = append(rules, map[string]any{"toCIDR": toAny(cidrs), keyToPorts: tcpPorts(p)})
		}

		if names := sortedUnique(g[1]); len(names) > 0 {
			fqdns := make([]any, 0, len(names))
			for _, n := range names {
				fqdns = append(fqdns, map[string]any{"matchName": n})
			}

			rules = append(rules, map[string]any{"toFQDNs": fqdns, keyToPorts: tcpPorts(p)})
		}
	}

	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVK.GroupVersion().String(),
		"kind":       GVK.Kind,
		"metadata": map[string]any{
			"name":      name,
			"namespace": namespace,
			"labels":    map[string]any{"app.kubernetes.io/part-of": "ichor"},
		},
		"spec": map[string]any{
			"description":      description,
			"endpointSelector": map[string]any{"matchLabels": map[string]any{AppLabel: app}},
			"egress":           rules,
		},
	}}

	return o
}

// dnsRule is the static set's DNS egress: kube-dns on 53, every name
// through Cilium's DNS proxy.
func dnsRule() map[string]any {
	return map[string]any{
		"toEndpoints": []any{map[string]any{"matchLabels": map[string]any{
			"k8s-app": "kube-dns", namespaceLabel: "kube-system",
		}}},
		keyToPorts: []any{map[string]any{
			"ports": []any{map[string]any{"port": strconv.Itoa(DNSPort), "protocol": protoANY}},
			"rules": map[string]any{"dns": []any{map[string]any{"matchPattern": "*"}}},
		}},
	}
}

func tcpPorts(p int) []any {
	return []any{map[string]any{"ports": []any{map[string]any{"port": strconv.Itoa(p), "protocol": TCP}}}}
}

func sortedUnique(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)

	return slices.Compact(s)
}

func toAny(s []string) []any {
	out := make([]any, 0, len(s))
	for _, v := range s {
		out = append(out, v)
	}

	return out
}

// Ordered is the order to apply a policy set in, so that no flow in use is
// cut on the way: the egress policies first (each complete for its pod's
// egress), then the allows of the static set, the default deny last.
func Ordered(egress, static []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := append(slices.Clone(egress), static...)

	slices.SortStableFunc(out, func(a, b *unstructured.Unstructured) int {
		return cmp.Compare(rank(a), rank(b))
	})

	return out
}

func rank(o *unstructured.Unstructured) int {
	switch o.GetName() {
	case ControllerEgressPolicy, UIEgressPolicy:
		return 0
	case DefaultDenyName:
		return 2
	}

	return 1
}

// EgressFlows are the flows to t's targets, each with the egress policy
// that allows it.
func EgressFlows(namespace string, t Targets) []Flow {
	var flows []Flow

	for _, p := range []struct {
		targets []Target
		app     string
		policy  string
	}{{t.Controller, ControllerPolicy, ControllerEgressPolicy}, {t.UI, UIPolicy, UIEgressPolicy}} {
		for _, tg := range p.targets {
			flows = append(flows, Flow{
				From: App(namespace, p.app), To: External(tg.Host), Port: tg.Port, Protocol: TCP,
				Policy: p.policy, Why: tg.Source,
			})
		}
	}

	if t.ClusterNodes {
		for _, e := range []string{EntityHost, EntityRemoteNode} {
			flows = append(flows, Flow{
				From: App(namespace, ControllerPolicy), To: Entity(e), Port: TalosAPIPort, Protocol: TCP,
				Policy: ControllerEgressPolicy, Why: "the Talos API of a node of the cluster Ichor runs in",
			})
		}
	}

	return flows
}
