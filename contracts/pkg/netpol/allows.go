package netpol

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The label Cilium gives every pod for its namespace; an endpoint selector
// without it selects pods of the policy's own namespace.
const (
	namespaceLabel     = "k8s:io.kubernetes.pod.namespace"
	namespaceLabelBare = "io.kubernetes.pod.namespace"
	// protoANY is Cilium's protocol for both TCP and UDP, and its default.
	protoANY = "ANY"
	// Rule keys.
	keyToEntities = "toEntities"
	keyToPorts    = "toPorts"
)

// Allows evaluates f against policies as Cilium would, for the rule shapes
// the set uses, and says whether f is allowed and by which policy.
//
// Each end of f that is a pod selected by a policy is enforced in its
// direction (egress for From, ingress for To) when a policy selecting it has
// rules for that direction: then f must match a rule of a policy selecting
// it, or it is denied (default deny). policy names the policies that allowed
// f, joined by ", " (more than one name means more than one policy allows
// it). A flow neither end of which is enforced is an error: the policies say
// nothing about it.
//
// The shapes understood: a CiliumNetworkPolicy (cilium.io/v2) whose spec has
// description, endpointSelector (matchLabels), ingress and egress; rules
// with fromEntities/toEntities (all, cluster, world, host, remote-node,
// kube-apiserver) or fromEndpoints/toEndpoints (matchLabels, with the
// namespace label or without), or on egress toCIDR (single prefixes, no
// except) and toFQDNs (matchName), each with or without toPorts (numbered
// ports, TCP, UDP or ANY; on egress, a DNS rule matching every name), and
// the empty rule {} that allows nothing. Any other shape is an error, never
// a verdict.
//
// A toCIDR rule selects an External peer whose host is an address in one of
// its prefixes, never an entity (Cilium's CIDR rules do not select the
// cluster's nodes: cilium/cilium Documentation/security/policy/layer3.rst).
// A toFQDNs rule selects an External peer whose host is the name, and only
// when a policy selecting the subject also has the DNS rule: Cilium learns a
// name's addresses from the answers its DNS proxy sees, and without the DNS
// rule it sees none (layer3.rst, "DNS based").
//
// An entity peer is one identity here; Cilium gives a kube-apiserver on the
// pod's own node both the host and the kube-apiserver identity, which this
// evaluation does not model.
func Allows(policies []*unstructured.Unstructured, f Flow) (policy string, ok bool, err error) {
	parsed := make([]*cnp, 0, len(policies))

	for _, o := range policies {
		p, err := parseCNP(o)
		if err != nil {
			return "", false, err
		}

		parsed = append(parsed, p)
	}

	if f.Protocol != TCP && f.Protocol != UDP {
		return "", false, fmt.Errorf("flow %s: protocol %q is neither TCP nor UDP", f, f.Protocol)
	}

	var (
		names    []string
		enforced bool
	)

	for _, dir := range []direction{egress, ingress} {
		subject, peer := f.From, f.To
		if dir == ingress {
			subject, peer = f.To, f.From
		}

		by, enforcing := side(parsed, dir, subject, peer, f)
		if !enforcing {
			continue
		}

		enforced = true

		if len(by) == 0 {
			return "", false, nil
		}

		for _, n := range by {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}

	if !enforced {
		return "", false, fmt.Errorf("flow %s: no policy selects either end", f)
	}

	return strings.Join(names, ", "), true, nil
}

type direction int

const (
	egress direction = iota
	ingress
)

// side evaluates one direction: whether subject's policies enforce it, and
// which of them allow the connection to (egress) or from (ingress) peer.
func side(policies []*cnp, dir direction, subject, peer Peer, f Flow) (allowedBy []string, enforcing bool) {
	if subject.Entity != "" {
		return nil, false
	}

	for _, p := range policies {
		if p.namespace != subject.Namespace || !p.selector.selects(subject.Labels) {
			continue
		}

		rules := p.ingress
		if dir == egress {
			rules = p.egress
		}

		if rules == nil {
			continue
		}

		enforcing = true

		for _, r := range rules {
			if r.fqdns != nil && !dnsProxied(policies, subject) {
				continue
			}

			if r.matches(p.namespace, peer, f) {
				allowedBy = append(allowedBy, p.name)

				break
			}
		}
	}

	return allowedBy, enforcing
}

// dnsProxied says whether a policy selecting subject sends its DNS through
// Cilium's DNS proxy (an egress DNS rule).
func dnsProxied(policies []*cnp, subject Peer) bool {
	for _, p := range policies {
		if p.namespace == subject.Namespace && p.selector.selects(subject.Labels) && p.dnsRule {
			return true
		}
	}

	return false
}

// cnp is a parsed policy.
type cnp struct {
	name, namespace string
	selector        labelSelector
	// ingress and egress are nil when the policy has no rules for the direction.
	ingress, egress []rule
	// dnsRule: an egress rule has the DNS rule.
	dnsRule bool
}

type labelSelector map[string]string

// selects matches a policy's endpointSelector against a pod's labels (of
// the policy's namespace).
func (s labelSelector) selects(labels map[string]string) bool {
	for k, v := range s {
		if labels[k] != v {
			return false
		}
	}

	return true
}

type rule struct {
	// empty is the rule {}, which allows nothing.
	empty     bool
	entities  []string
	endpoints []endpointSelector
	cidrs     []netip.Prefix
	// fqdns is the toFQDNs names; nil when the rule has none.
	fqdns []string
	// dns: the rule has the DNS L7 rule.
	dns bool
	// ports is nil for every port.
	ports []port
}

type endpointSelector struct {
	// namespace is the selected pods' namespace; empty means the policy's.
	namespace string
	labels    labelSelector
}

type port struct {
	number   int
	protocol string
}

func (r rule) matches(policyNamespace string, peer Peer, f Flow) bool {
	if r.empty {
		return false
	}

	peerOK := false

	for _, e := range r.entities {
		if entityMatches(e, peer) {
			peerOK = true
		}
	}

	if peer.Host != "" {
		if a, err := netip.ParseAddr(peer.Host); err == nil {
			for _, c := range r.cidrs {
				if c.Contains(a.Unmap()) {
					peerOK = true
				}
			}
		}

		for _, n := range r.fqdns {
			if strings.EqualFold(n, strings.TrimSuffix(peer.Host, ".")) {
				peerOK = true
			}
		}
	}

	if peer.Entity == "" {
		for _, s := range r.endpoints {
			ns := s.namespace
			if ns == "" {
				ns = policyNamespace
			}

			if peer.Namespace == ns && s.labels.selects(peer.Labels) {
				peerOK = true
			}
		}
	}

	if !peerOK {
		return false
	}

	if r.ports == nil {
		return true
	}

	for _, p := range r.ports {
		if p.number == f.Port && (p.protocol == protoANY || p.protocol == f.Protocol) {
			return true
		}
	}

	return false
}

// entityMatches says whether Cilium's entity e covers peer.
func entityMatches(e string, peer Peer) bool {
	switch e {
	case "all":
		return true
	case "cluster":
		// Every pod of the cluster, the nodes and the kube-apiserver.
		return peer.Entity != EntityWorld
	}

	return peer.Entity == e
}

var knownEntities = []string{"all", "cluster", EntityWorld, EntityHost, EntityRemoteNode, EntityKubeAPIServer}

// parseCNP reads a policy, refusing what the evaluation does not understand.
func parseCNP(o *unstructured.Unstructured) (*cnp, error) {
	where := fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	if o.GroupVersionKind() != GVK {
		return nil, fmt.Errorf("%s: only %s is understood", where, GVK)
	}

	if o.GetNamespace() == "" {
		return nil, fmt.Errorf("%s: no namespace", where)
	}

	spec, ok := o.Object["spec"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: no spec (or specs, which is not understood)", where)
	}

	if err := onlyKeys(where+" spec", spec, "description", "endpointSelector", "ingress", "egress"); err != nil {
		return nil, err
	}

	p := &cnp{name: o.GetName(), namespace: o.GetNamespace()}

	sel, ok := spec["endpointSelector"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: no endpointSelector", where)
	}

	var err error
	if p.selector, err = matchLabels(where+" endpointSelector", sel); err != nil {
		return nil, err
	}

	for k := range p.selector {
		if strings.Contains(k, namespaceLabelBare) {
			return nil, fmt.Errorf("%s: endpointSelector names a namespace, which a namespaced policy does not", where)
		}
	}

	for _, d := range []struct {
		key      string
		dir      direction
		peerKeys [2]string
		into     *[]rule
	}{
		{"ingress", ingress, [2]string{"fromEntities", "fromEndpoints"}, &p.ingress},
		{"egress", egress, [2]string{keyToEntities, "toEndpoints"}, &p.egress},
	} {
		raw, present := spec[d.key]
		if !present {
			continue
		}

		list, ok := raw.([]any)
		if !ok || len(list) == 0 {
			return nil, fmt.Errorf("%s: %s is not a list of rules (an empty list is not understood)", where, d.key)
		}

		rules := make([]rule, 0, len(list))

		for i, item := range list {
			r, err := parseRule(fmt.Sprintf("%s %s[%d]", where, d.key, i), item, d.dir, d.peerKeys)
			if err != nil {
				return nil, err
			}

			rules = append(rules, r)
			p.dnsRule = p.dnsRule || r.dns
		}

		*d.into = rules
	}

	return p, nil
}

func parseRule(where string, item any, dir direction, peerKeys [2]string) (rule, error) {
	m, ok := item.(map[string]any)
	if !ok {
		return rule{}, fmt.Errorf("%s: not a rule", where)
	}

	if len(m) == 0 {
		return rule{empty: true}, nil
	}

	entitiesKey, endpointsKey := peerKeys[0], peerKeys[1]
	peerKinds := []string{entitiesKey, endpointsKey}

	if dir == egress {
		peerKinds = append(peerKinds, "toCIDR", "toFQDNs")
	}

	if err := onlyKeys(where, m, append(slices.Clone(peerKinds), keyToPorts)...); err != nil {
		return rule{}, err
	}

	kinds := 0

	for _, k := range peerKinds {
		if _, ok := m[k]; ok {
			kinds++
		}
	}

	if kinds != 1 {
		return rule{}, fmt.Errorf("%s: want exactly one of %s (a rule of ports only, or of several, is not understood)", where, strings.Join(peerKinds, ", "))
	}

	_, hasEntities := m[entitiesKey]
	_, hasEndpoints := m[endpointsKey]

	var r rule

	if err := parseExternal(where, m, &r); err != nil {
		return rule{}, err
	}

	if hasEntities {
		list, ok := m[entitiesKey].([]any)
		if !ok || len(list) == 0 {
			return rule{}, fmt.Errorf("%s: %s is not a list of entities", where, entitiesKey)
		}

		for _, e := range list {
			s, _ := e.(string)
			if !slices.Contains(knownEntities, s) {
				return rule{}, fmt.Errorf("%s: entity %v is not understood (only %s)", where, e, strings.Join(knownEntities, ", "))
			}

			r.entities = append(r.entities, s)
		}
	}

	if hasEndpoints {
		list, ok := m[endpointsKey].([]any)
		if !ok || len(list) == 0 {
			return rule{}, fmt.Errorf("%s: %s is not a list of selectors", where, endpointsKey)
		}

		for i, e := range list {
			sm, ok := e.(map[string]any)
			if !ok {
				return rule{}, fmt.Errorf("%s: %s[%d] is not a selector", where, endpointsKey, i)
			}

			labels, err := matchLabels(fmt.Sprintf("%s %s[%d]", where, endpointsKey, i), sm)
			if err != nil {
				return rule{}, err
			}

			s := endpointSelector{labels: labelSelector{}}

			for k, v := range labels {
				if k == namespaceLabelBare {
					s.namespace = v

					continue
				}

				s.labels[k] = v
			}

			r.endpoints = append(r.endpoints, s)
		}
	}

	if raw, ok := m[keyToPorts]; ok {
		ports, dns, err := parsePorts(where, raw, dir)
		if err != nil {
			return rule{}, err
		}

		r.ports, r.dns = ports, dns
	}

	return r, nil
}

// parseExternal reads a rule's toCIDR (prefixes) or toFQDNs (matchName).
func parseExternal(where string, m map[string]any, r *rule) error {
	if raw, ok := m["toCIDR"]; ok {
		list, ok := raw.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("%s: toCIDR is not a list of prefixes", where)
		}

		for _, c := range list {
			s, _ := c.(string)

			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return fmt.Errorf("%s: toCIDR %v is not a prefix", where, c)
			}

			r.cidrs = append(r.cidrs, pfx)
		}
	}

	if raw, ok := m["toFQDNs"]; ok {
		list, ok := raw.([]any)
		if !ok || len(list) == 0 {
			return fmt.Errorf("%s: toFQDNs is not a list of selectors", where)
		}

		r.fqdns = []string{}

		for i, e := range list {
			sel, ok := e.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: toFQDNs[%d] is not a selector", where, i)
			}

			if err := onlyKeys(fmt.Sprintf("%s toFQDNs[%d]", where, i), sel, "matchName"); err != nil {
				return err
			}

			name, _ := sel["matchName"].(string)
			if name == "" {
				return fmt.Errorf("%s: toFQDNs[%d] has no matchName", where, i)
			}

			r.fqdns = append(r.fqdns, name)
		}
	}

	return nil
}

func parsePorts(where string, raw any, dir direction) (out []port, dns bool, err error) {
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return nil, false, fmt.Errorf("%s: toPorts is not a list", where)
	}

	for i, item := range list {
		w := fmt.Sprintf("%s toPorts[%d]", where, i)

		m, ok := item.(map[string]any)
		if !ok {
			return nil, false, fmt.Errorf("%s: not a port rule", w)
		}

		if err := onlyKeys(w, m, "ports", "rules"); err != nil {
			return nil, false, err
		}

		if rules, ok := m["rules"]; ok {
			if dir != egress || !dnsEveryName(rules) {
				return nil, false, fmt.Errorf("%s: only the egress rule dns: [{matchPattern: \"*\"}] is understood among L7 rules", w)
			}

			dns = true
		}

		ports, ok := m["ports"].([]any)
		if !ok || len(ports) == 0 {
			return nil, false, fmt.Errorf("%s: no ports", w)
		}

		for j, pp := range ports {
			pm, ok := pp.(map[string]any)
			if !ok {
				return nil, false, fmt.Errorf("%s ports[%d]: not a port", w, j)
			}

			if err := onlyKeys(fmt.Sprintf("%s ports[%d]", w, j), pm, "port", "protocol"); err != nil {
				return nil, false, err
			}

			s, _ := pm["port"].(string)

			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 65535 {
				return nil, false, fmt.Errorf("%s ports[%d]: port %v is not a number from 1 to 65535 (names and ranges are not understood)", w, j, pm["port"])
			}

			proto := protoANY
			if v, ok := pm["protocol"]; ok {
				proto, _ = v.(string)
			}

			if proto != TCP && proto != UDP && proto != protoANY {
				return nil, false, fmt.Errorf("%s ports[%d]: protocol %v is not understood", w, j, pm["protocol"])
			}

			out = append(out, port{number: n, protocol: proto})
		}
	}

	return out, dns, nil
}

// dnsEveryName is the L7 rule dns: [{matchPattern: "*"}]: every name may be
// looked up (through Cilium's DNS proxy), which allows what the port allows.
func dnsEveryName(raw any) bool {
	m, ok := raw.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}

	list, ok := m["dns"].([]any)
	if !ok || len(list) != 1 {
		return false
	}

	pat, ok := list[0].(map[string]any)

	return ok && len(pat) == 1 && pat["matchPattern"] == "*"
}

// matchLabels reads a label selector of matchLabels only; the namespace
// label is returned under its bare key, other keys without Cilium's k8s:
// source prefix.
func matchLabels(where string, sel map[string]any) (labelSelector, error) {
	if err := onlyKeys(where, sel, "matchLabels"); err != nil {
		return nil, err
	}

	out := labelSelector{}

	raw, ok := sel["matchLabels"]
	if !ok {
		return out, nil
	}

	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: matchLabels is not a map", where)
	}

	for k, v := range m {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: label %s is not a string", where, k)
		}

		key := strings.TrimPrefix(k, "k8s:")
		if strings.Contains(key, ":") || strings.HasPrefix(key, "io.cilium.") ||
			(strings.HasPrefix(key, "io.kubernetes.") && key != namespaceLabelBare) {
			return nil, fmt.Errorf("%s: label %s is not understood (only pod labels and the namespace label)", where, k)
		}

		out[key] = s
	}

	return out, nil
}

func onlyKeys(where string, m map[string]any, allowed ...string) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s: %s is not understood (only %s)", where, k, strings.Join(allowed, ", "))
		}
	}

	return nil
}
