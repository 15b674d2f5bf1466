package netpol

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func egressTargets() Targets {
	return Targets{
		Controller: []Target{
			{Host: "192.0.2.10", Port: TalosAPIPort, Source: "TalosMachine a/cp-1 spec.address"},
			{Host: "192.0.2.10", Port: KubeAPIServerPort, Source: "TalosMachine a/cp-1 spec.address (control plane)"},
			{Host: "192.0.2.11", Port: TalosAPIPort, Source: "TalosMachine a/w-1 spec.address"},
			{Host: "192.0.2.11", Port: TalosAPIPort, Source: "the same address again"},
			{Host: "2001:db8::5", Port: TalosAPIPort, Source: "TalosMachine b/cp-1 spec.address"},
			{Host: "api.b.example.com", Port: 6443, Source: "TalosCluster b spec.endpoint"},
			{Host: "S3.Example.com.", Port: 443, Source: "TalosEtcdBackup a/nightly spec.s3.endpoint"},
		},
		UI:           []Target{{Host: "login.example.org", Port: 8443, Source: "Deployment ichor-ui --oidc-issuer-url"}},
		ClusterNodes: true,
	}
}

// TestEgressPolicies: every flow to a target is allowed by its pod's egress
// policy, the static set's flows stay allowed with the egress policies in
// place, and what no object names is refused.
func TestEgressPolicies(t *testing.T) {
	tg := egressTargets()

	egress, err := EgressPolicies(ns, tg)
	if err != nil {
		t.Fatal(err)
	}

	all := Ordered(egress, Policies(ns, Options{}))

	for _, f := range EgressFlows(ns, tg) {
		policy, ok, err := Allows(all, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}

		if !ok || policy != f.Policy {
			t.Errorf("%s (%s): allowed %v by %q, want by %s", f, f.Why, ok, policy, f.Policy)
		}
	}

	for _, f := range Flows(ns, Options{}) {
		policy, ok, err := Allows(all, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}

		if !ok || !slices.Contains(strings.Split(policy, ", "), f.Policy) {
			t.Errorf("%s (%s): with the egress policies, allowed %v by %q, want by %s among them", f, f.Why, ok, policy, f.Policy)
		}
	}

	controller, ui := App(ns, ControllerPolicy), App(ns, UIPolicy)

	for _, f := range []Flow{
		{From: controller, To: External("192.0.2.99"), Port: TalosAPIPort, Protocol: TCP, Why: "an address no machine has"},
		{From: controller, To: External("192.0.2.11"), Port: 22, Protocol: TCP, Why: "a machine's address on another port"},
		{From: controller, To: External("192.0.2.11"), Port: KubeAPIServerPort, Protocol: TCP, Why: "a worker's address on the API server's port"},
		{From: controller, To: External("other.example.com"), Port: 443, Protocol: TCP, Why: "a name nothing names"},
		{From: controller, To: External("api.b.example.com"), Port: 443, Protocol: TCP, Why: "a named host on another port"},
		{From: ui, To: External("192.0.2.10"), Port: TalosAPIPort, Protocol: TCP, Why: "ichor-ui calls no Talos node"},
		{From: ui, To: External("s3.example.com"), Port: 443, Protocol: TCP, Why: "ichor-ui calls no S3 store"},
		{From: ui, To: Entity(EntityRemoteNode), Port: TalosAPIPort, Protocol: TCP, Why: "only the controller reaches the cluster's nodes"},
		{From: controller, To: Entity(EntityRemoteNode), Port: 10250, Protocol: TCP, Why: "the cluster's nodes on the Talos API's port only"},
		{From: App(ns, InstallerPolicy), To: External("192.0.2.10"), Port: TalosAPIPort, Protocol: TCP, Why: "the installer calls no Talos node"},
	} {
		policy, ok, err := Allows(all, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}

		if ok {
			t.Errorf("%s (%s) is allowed by %s", f, f.Why, policy)
		}
	}

	t.Run("NodesOnlyByEntity", func(t *testing.T) {
		// Without ClusterNodes, a node of the cluster is not reached even at
		// an address a toCIDR rule names: CIDR rules never select nodes.
		tg := egressTargets()
		tg.ClusterNodes = false

		egress, err := EgressPolicies(ns, tg)
		if err != nil {
			t.Fatal(err)
		}

		f := Flow{From: controller, To: Entity(EntityRemoteNode), Port: TalosAPIPort, Protocol: TCP}
		if policy, ok, err := Allows(Ordered(egress, Policies(ns, Options{})), f); err != nil || ok {
			t.Fatalf("%s: allowed %v by %q (%v), want refused", f, ok, policy, err)
		}
	})

	t.Run("FQDNNeedsTheDNSRule", func(t *testing.T) {
		// Cilium learns a name's addresses only through its DNS proxy: with
		// the DNS rules removed from every policy, the name is not reached.
		all := Ordered(egress, Policies(ns, Options{}))
		stripped := make([]*unstructured.Unstructured, 0, len(all))

		for _, o := range all {
			o = o.DeepCopy()
			rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "egress")
			rules = slices.DeleteFunc(rules, func(r any) bool { _, ok := r.(map[string]any)["toEndpoints"]; return ok })

			if len(rules) > 0 {
				_ = unstructured.SetNestedSlice(o.Object, rules, "spec", "egress")
			}

			stripped = append(stripped, o)
		}

		f := Flow{From: controller, To: External("s3.example.com"), Port: 443, Protocol: TCP}
		if policy, ok, err := Allows(stripped, f); err != nil || ok {
			t.Fatalf("%s: allowed %v by %q (%v) without a DNS rule, want refused", f, ok, policy, err)
		}

		f.To = External("192.0.2.10")
		f.Port = TalosAPIPort

		if _, ok, err := Allows(stripped, f); err != nil || !ok {
			t.Fatalf("%s: refused (%v) without a DNS rule; an address needs none", f, err)
		}
	})
}

// TestEgressPolicyShape pins the rules written for each kind of target.
func TestEgressPolicyShape(t *testing.T) {
	egress, err := EgressPolicies(ns, egressTargets())
	if err != nil {
		t.Fatal(err)
	}

	if len(egress) != 2 || egress[0].GetName() != ControllerEgressPolicy || egress[1].GetName() != UIEgressPolicy {
		t.Fatalf("got %v", policyNames(egress))
	}

	got, err := json.Marshal(egress[0].Object["spec"].(map[string]any)["egress"]) //nolint:forcetypeassert // built here
	if err != nil {
		t.Fatal(err)
	}

	want := `[{"toEntities":["kube-apiserver"]},` +
		`{"toEndpoints":[{"matchLabels":{"k8s-app":"kube-dns","k8s:io.kubernetes.pod.namespace":"kube-system"}}],` +
		`"toPorts":[{"ports":[{"port":"53","protocol":"ANY"}],"rules":{"dns":[{"matchPattern":"*"}]}}]},` +
		`{"toEntities":["host","remote-node"],"toPorts":[{"ports":[{"port":"50000","protocol":"TCP"}]}]},` +
		`{"toFQDNs":[{"matchName":"s3.example.com"}],"toPorts":[{"ports":[{"port":"443","protocol":"TCP"}]}]},` +
		`{"toCIDR":["192.0.2.10/32"],"toPorts":[{"ports":[{"port":"6443","protocol":"TCP"}]}]},` +
		`{"toFQDNs":[{"matchName":"api.b.example.com"}],"toPorts":[{"ports":[{"port":"6443","protocol":"TCP"}]}]},` +
		`{"toCIDR":["192.0.2.10/32","192.0.2.11/32","2001:db8::5/128"],"toPorts":[{"ports":[{"port":"50000","protocol":"TCP"}]}]}]`

	if string(got) != want {
		t.Fatalf("controller egress rules:\n%s\nwant\n%s", got, want)
	}

	if o := Ordered(egress, Policies(ns, Options{MetricsNamespace: "monitoring"})); o[0].GetName() != ControllerEgressPolicy ||
		o[1].GetName() != UIEgressPolicy || o[len(o)-1].GetName() != DefaultDenyName {
		t.Fatalf("order: %v, want the egress policies first and the default deny last", policyNames(o))
	}
}

// TestEgressPoliciesRefuseBadTargets: a target no rule can be written for is
// an error that names where it comes from, and nothing is built.
func TestEgressPoliciesRefuseBadTargets(t *testing.T) {
	for _, tc := range []struct {
		target Target
		want   string
	}{
		{Target{Host: "not a name", Port: 443, Source: "TalosEtcdBackup a/x spec.s3.endpoint"}, "TalosEtcdBackup a/x spec.s3.endpoint: \"not a name\" is neither"},
		{Target{Host: "s3.example.com", Port: 0, Source: "src"}, "src: port 0 of s3.example.com is not from 1 to 65535"},
		{Target{Host: "s3.example.com", Port: 70000, Source: "src"}, "port 70000"},
		{Target{Host: "", Port: 443, Source: "empty"}, "empty: \"\" is neither"},
		{Target{Host: "nodots", Port: 443, Source: "single label"}, "single label: \"nodots\" is neither"},
	} {
		tg := egressTargets()
		tg.UI = append(tg.UI, tc.target)

		got, err := EgressPolicies(ns, tg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.target, err, tc.want)
		}

		if got != nil {
			t.Errorf("%+v: built %d policies along with the error", tc.target, len(got))
		}
	}

	if _, err := EgressPolicies("", Targets{}); err == nil {
		t.Error("no namespace: no error")
	}
}

func policyNames(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetName())
	}

	return out
}
