package netpol

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const ns = "ichor-system"

// TestNetworkPolicyFlows checks the policy set against the flows Ichor's
// pods use: each is allowed by the one policy it names, and the flows that
// must not happen are refused.
func TestNetworkPolicyFlows(t *testing.T) {
	for _, opts := range []Options{{}, {MetricsNamespace: "monitoring"}} {
		policies := Policies(ns, opts)

		for _, f := range Flows(ns, opts) {
			policy, ok, err := Allows(policies, f)
			if err != nil {
				t.Fatalf("metrics namespace %q: %s: %v", opts.MetricsNamespace, f, err)
			}

			if !ok || policy != f.Policy {
				t.Errorf("metrics namespace %q: %s (%s): allowed %v by %q, want allowed by %s only",
					opts.MetricsNamespace, f, f.Why, ok, policy, f.Policy)
			}
		}
	}

	controller, ui, installer := App(ns, ControllerPolicy), App(ns, UIPolicy), App(ns, InstallerPolicy)
	world, host, apiserver, remoteNode := Entity(EntityWorld), Entity(EntityHost), Entity(EntityKubeAPIServer), Entity(EntityRemoteNode)
	prometheus := Pod("monitoring", AppLabel, "prometheus")
	otherPod := Pod("tenant", AppLabel, "anything")

	refused := []struct {
		opts Options
		flow Flow
		why  string
	}{
		{Options{}, Flow{From: controller, To: world, Port: 443, Protocol: TCP}, "no world egress: S3 stores are the controller's dynamic policies'"},
		{Options{}, Flow{From: controller, To: world, Port: 50000, Protocol: TCP}, "no world egress: Talos nodes are the controller's dynamic policies'"},
		{Options{}, Flow{From: controller, To: remoteNode, Port: 50000, Protocol: TCP}, "the static set opens no Talos API port, not even the cluster's own nodes'"},
		{Options{}, Flow{From: controller, To: otherPod, Port: 80, Protocol: TCP}, "the controller calls no pod but DNS"},
		{Options{}, Flow{From: controller, To: KubeDNS(), Port: 5353, Protocol: UDP}, "DNS is port 53 only"},
		{Options{}, Flow{From: ui, To: world, Port: 443, Protocol: TCP}, "no world egress from ichor-ui"},
		{Options{}, Flow{From: ui, To: host, Port: 50000, Protocol: TCP}, "ichor-ui → a node is not in the static set"},
		{Options{}, Flow{From: ui, To: controller, Port: ControllerWebhookPort, Protocol: TCP}, "ichor-ui does not call the controller"},
		{Options{}, Flow{From: ui, To: controller, Port: ControllerMetricsPort, Protocol: TCP}, "ichor-ui does not call the controller"},
		{Options{}, Flow{From: ui, To: otherPod, Port: 443, Protocol: TCP}, "ichor-ui calls no pod but DNS"},
		{Options{}, Flow{From: installer, To: KubeDNS(), Port: DNSPort, Protocol: UDP}, "the installer looks no name up"},
		{Options{}, Flow{From: installer, To: world, Port: 443, Protocol: TCP}, "no world egress from the installer"},
		{Options{}, Flow{From: apiserver, To: installer, Port: 8080, Protocol: TCP}, "nothing calls the installer"},
		{Options{}, Flow{From: otherPod, To: controller, Port: ControllerWebhookPort, Protocol: TCP}, "only the API server calls the webhooks"},
		{Options{}, Flow{From: Pod(ns, AppLabel, "intruder"), To: controller, Port: ControllerWebhookPort, Protocol: TCP}, "not even a pod of Ichor's namespace"},
		{Options{}, Flow{From: host, To: controller, Port: ControllerWebhookPort, Protocol: TCP}, "the webhooks are the API server's"},
		{Options{}, Flow{From: world, To: controller, Port: ControllerWebhookPort, Protocol: TCP}, "the webhooks are the API server's"},
		{Options{}, Flow{From: remoteNode, To: controller, Port: ControllerHealthPort, Protocol: TCP}, "probes come from the pod's own node"},
		{Options{}, Flow{From: prometheus, To: controller, Port: ControllerMetricsPort, Protocol: TCP}, "no metrics namespace named: no scraper"},
		{Options{}, Flow{From: prometheus, To: ui, Port: UIMetricsPort, Protocol: TCP}, "no metrics namespace named: no scraper"},
		{Options{}, Flow{From: host, To: controller, Port: ControllerMetricsPort, Protocol: TCP}, "metrics are not the host's"},
		{Options{}, Flow{From: world, To: ui, Port: UIOIDCPort, Protocol: TCP}, "the issuer listener is the API server's"},
		{Options{}, Flow{From: otherPod, To: ui, Port: UIOIDCPort, Protocol: TCP}, "the issuer listener is the API server's"},
		{Options{}, Flow{From: world, To: ui, Port: UIMetricsPort, Protocol: TCP}, "metrics are not the console's"},
		{Options{}, Flow{From: Pod(ns, AppLabel, "intruder"), To: apiserver, Port: KubeAPIServerPort, Protocol: TCP}, "default deny: an unknown pod of the namespace"},
		{Options{MetricsNamespace: "monitoring"}, Flow{From: otherPod, To: controller, Port: ControllerMetricsPort, Protocol: TCP}, "metrics only from the named namespace"},
		{Options{MetricsNamespace: "monitoring"}, Flow{From: otherPod, To: ui, Port: UIMetricsPort, Protocol: TCP}, "metrics only from the named namespace"},
		{Options{MetricsNamespace: "monitoring"}, Flow{From: prometheus, To: controller, Port: ControllerWebhookPort, Protocol: TCP}, "the named namespace gets metrics only"},
		{Options{MetricsNamespace: "monitoring"}, Flow{From: prometheus, To: ui, Port: UIOIDCPort, Protocol: TCP}, "the named namespace gets metrics only"},
	}

	for _, r := range refused {
		policy, ok, err := Allows(Policies(ns, r.opts), r.flow)
		if err != nil {
			t.Fatalf("%s: %v", r.flow, err)
		}

		if ok {
			t.Errorf("%s is allowed by %s; it must not be: %s", r.flow, policy, r.why)
		}
	}
}

// No policy of the set allows world egress, whatever the flow's port.
func TestNoWorldEgress(t *testing.T) {
	for _, o := range Policies(ns, Options{MetricsNamespace: "monitoring"}) {
		rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "egress")
		for _, r := range rules {
			ents, _ := r.(map[string]any)["toEntities"].([]any)
			for _, e := range ents {
				if e == "world" || e == "all" {
					t.Errorf("%s allows egress to %s", o.GetName(), e)
				}
			}
		}
	}
}

// The policies come in order: the allows first, the default deny last, each
// in the namespace asked for; the metrics policies only with a namespace.
func TestPolicies(t *testing.T) {
	names := func(objs []*unstructured.Unstructured) []string {
		out := make([]string, 0, len(objs))

		for _, o := range objs {
			if o.GetNamespace() != "tenant-ichor" || o.GroupVersionKind() != GVK {
				t.Errorf("%s %s/%s: want a %s in tenant-ichor", o.GetKind(), o.GetNamespace(), o.GetName(), GVK.Kind)
			}

			out = append(out, o.GetName())
		}

		return out
	}

	got := names(Policies("tenant-ichor", Options{}))
	want := []string{ControllerPolicy, UIPolicy, InstallerPolicy, DefaultDenyName}

	if !slices.Equal(got, want) {
		t.Errorf("policies: %v, want %v", got, want)
	}

	got = names(Policies("tenant-ichor", Options{MetricsNamespace: "prom"}))
	want = []string{ControllerPolicy, UIPolicy, InstallerPolicy, ControllerMetricsPolicy, UIMetricsPolicy, DefaultDenyName}

	if !slices.Equal(got, want) {
		t.Errorf("policies with metrics: %v, want %v", got, want)
	}

	// Each call is a fresh copy: changing one does not change the next.
	first := Policies(ns, Options{})
	first[0].SetName("changed")

	if Policies(ns, Options{})[0].GetName() != ControllerPolicy {
		t.Error("Policies returned shared objects")
	}

	// The metrics namespace lands in the selector.
	for _, o := range Policies(ns, Options{MetricsNamespace: "prom"}) {
		if !strings.HasSuffix(o.GetName(), "-metrics") {
			continue
		}

		raw, _ := yaml.Marshal(o.Object)
		if !strings.Contains(string(raw), namespaceLabel+": prom") || strings.Contains(string(raw), metricsPlaceholder) {
			t.Errorf("%s does not select namespace prom:\n%s", o.GetName(), raw)
		}
	}
}

// Allows refuses the shapes it does not understand, so that a policy it
// cannot read never passes a test by accident.
func TestAllowsRefusesUnknownShapes(t *testing.T) {
	flow := Flows(ns, Options{})[0]

	for _, c := range []struct {
		name string
		spec string
	}{
		{"toFQDNs matchPattern", `{endpointSelector: {}, egress: [{toFQDNs: [{matchPattern: "*.example"}]}]}`},
		{"toFQDNs on ingress", `{endpointSelector: {}, ingress: [{toFQDNs: [{matchName: s3.example}]}]}`},
		{"toCIDR not a prefix", `{endpointSelector: {}, egress: [{toCIDR: [10.0.0.300/8]}]}`},
		{"toCIDRSet", `{endpointSelector: {}, egress: [{toCIDRSet: [{cidr: 10.0.0.0/8, except: [10.1.0.0/16]}]}]}`},
		{"toCIDR and toFQDNs in one rule", `{endpointSelector: {}, egress: [{toCIDR: [10.0.0.0/8], toFQDNs: [{matchName: s3.example}]}]}`},
		{"matchExpressions", `{endpointSelector: {matchExpressions: [{key: a, operator: Exists}]}, ingress: [{}]}`},
		{"deny rules", `{endpointSelector: {}, ingressDeny: [{fromEntities: [world]}]}`},
		{"enableDefaultDeny", `{endpointSelector: {}, enableDefaultDeny: {ingress: false}, ingress: [{fromEntities: [host]}]}`},
		{"an unknown entity", `{endpointSelector: {}, ingress: [{fromEntities: [health]}]}`},
		{"a named port", `{endpointSelector: {}, ingress: [{fromEntities: [host], toPorts: [{ports: [{port: webhook}]}]}]}`},
		{"a port range", `{endpointSelector: {}, ingress: [{fromEntities: [host], toPorts: [{ports: [{port: "80", endPort: 90}]}]}]}`},
		{"an HTTP rule", `{endpointSelector: {}, ingress: [{fromEntities: [host], toPorts: [{ports: [{port: "80"}], rules: {http: [{method: GET}]}}]}]}`},
		{"a DNS rule for some names", `{endpointSelector: {}, egress: [{toEntities: [cluster], toPorts: [{ports: [{port: "53"}], rules: {dns: [{matchName: a.example}]}}]}]}`},
		{"ports only", `{endpointSelector: {}, ingress: [{toPorts: [{ports: [{port: "80"}]}]}]}`},
		{"entities and endpoints in one rule", `{endpointSelector: {}, ingress: [{fromEntities: [host], fromEndpoints: [{}]}]}`},
		{"an empty rule list", `{endpointSelector: {}, ingress: []}`},
		{"a cilium label", `{endpointSelector: {}, ingress: [{fromEndpoints: [{matchLabels: {"k8s:io.cilium.k8s.namespace.labels.team": a}}]}]}`},
	} {
		var spec map[string]any
		if err := yaml.Unmarshal([]byte(c.spec), &spec); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}

		bad := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		bad.SetGroupVersionKind(GVK)
		bad.SetNamespace(ns)
		bad.SetName("bad")

		if _, _, err := Allows(append(Policies(ns, Options{}), bad), flow); err == nil {
			t.Errorf("%s: Allows gave a verdict on a shape it does not understand", c.name)
		}
	}

	if _, _, err := Allows(Policies(ns, Options{}), Flow{From: Entity(EntityWorld), To: Entity(EntityHost), Port: 22, Protocol: TCP}); err == nil {
		t.Error("a flow no policy selects an end of must be an error")
	}
}

// A broken policy fails the flows: the test is not vacuous.
func TestAllowsSeesABrokenPolicy(t *testing.T) {
	policies := Policies(ns, Options{})

	for _, o := range policies {
		if o.GetName() != ControllerPolicy {
			continue
		}

		rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
		// The webhook rule admits the API server only from its own node.
		rules[0].(map[string]any)["fromEntities"] = []any{"kube-apiserver"}
		_ = unstructured.SetNestedSlice(o.Object, rules, "spec", "ingress")
	}

	f := Flow{From: Entity(EntityRemoteNode), To: App(ns, ControllerPolicy), Port: ControllerWebhookPort, Protocol: TCP}
	if _, ok, err := Allows(policies, f); err != nil || ok {
		t.Errorf("%s: allowed %v (%v) after remote-node was taken out of the webhook rule", f, ok, err)
	}

	// Two policies allowing one flow are both named.
	extra := Policies(ns, Options{})[0]
	extra.SetName("ichor-controller-copy")

	policy, ok, err := Allows(append(Policies(ns, Options{}), extra), Flows(ns, Options{})[0])
	if err != nil || !ok || policy != "ichor-controller, ichor-controller-copy" {
		t.Errorf("a flow two policies allow: %q %v %v", policy, ok, err)
	}
}
