package ciliumvalues

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name, raw string
		want      map[string]any
		wantErr   string
	}{
		{name: "empty", raw: "  \n", want: map[string]any{}},
		{name: "JSON", raw: `{"hubble":{"enabled":true}}`, want: map[string]any{"hubble": map[string]any{"enabled": true}}},
		{name: "YAML", raw: "hubble:\n  enabled: true\n", want: map[string]any{"hubble": map[string]any{"enabled": true}}},
		{name: "null", raw: "null", want: map[string]any{}},
		{name: "a list", raw: "[1, 2]", wantErr: "must be a map"},
		{name: "not YAML", raw: "a: [", wantErr: "not valid JSON or YAML"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		raw  string
		want []string // nil: accepted
	}{
		{name: "the user's own keys", raw: `{"hubble":{"relay":{"enabled":true}},"debug":{"enabled":true},"ipam":{"operator":{"clusterPoolIPv4MaskSize":24}}}`},
		{name: "an empty map over an owned parent is harmless", raw: `{"cgroup":{}}`},
		{name: "a sibling of an owned key", raw: `{"securityContext":{"privileged":true}}`},
		{name: "every top-level owned key", raw: `{"kubeProxyReplacement":"true","tunnelProtocol":"geneve","routingMode":"native","k8sServiceHost":"x","k8sServicePort":1}`,
			want: []string{"k8sServiceHost", "k8sServicePort", "kubeProxyReplacement", "routingMode", "tunnelProtocol"}},
		{name: "a nested owned key", raw: `{"ipam":{"mode":"cluster-pool"}}`, want: []string{"ipam.mode"}},
		{name: "under an owned key", raw: `{"k8sServiceHostRef":{"name":"cm"}}`, want: []string{"k8sServiceHostRef.name"}},
		{name: "a parent of owned keys replaced by null", raw: `{"cgroup":null}`, want: []string{"cgroup"}},
		{name: "a parent of owned keys replaced by a scalar", raw: `{"securityContext":{"capabilities":"all"}}`, want: []string{"securityContext.capabilities"}},
		{name: "secrets namespaces anywhere", raw: `{"tls":{"secretsNamespace":{"name":"kube-system"}},"foo":{"bar":{"secretsNamespace":{"name":"y"}}},"gatewayAPI":{"secretsNamespace":null}}`,
			want: []string{"foo.bar.secretsNamespace.name", "gatewayAPI.secretsNamespace", "tls.secretsNamespace.name"}},
		{name: "secretsNamespace.create is the user's", raw: `{"tls":{"secretsNamespace":{"create":false}}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRaw([]byte(tt.raw))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				return
			}
			var owned *OwnedKeyError
			if !errors.As(err, &owned) {
				t.Fatalf("want an *OwnedKeyError, got %v", err)
			}
			if !slices.Equal(owned.Keys, tt.want) {
				t.Fatalf("refused %v, want %v", owned.Keys, tt.want)
			}
			for _, k := range tt.want {
				if !strings.Contains(err.Error(), `"`+k+`"`) {
					t.Errorf("the message %q does not name %q", err, k)
				}
			}
		})
	}
	if err := ValidateRaw([]byte("[")); err == nil || errors.As(err, new(*OwnedKeyError)) {
		t.Errorf("unparseable values must fail as a parse error, got %v", err)
	}
}

func TestEffectiveLayersDefaultsUserOwned(t *testing.T) {
	user := map[string]any{
		"hubble":   map[string]any{"relay": map[string]any{"enabled": true}},
		"operator": map[string]any{"replicas": 3},
		"bpf":      nil,
	}
	got, err := Effective(user, Choices{Tunnel: TunnelGeneve, KubeProxy: ichorv1alpha1.KubeProxyReplaced, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"hubble", "relay", "enabled"}, true},                  // the user's
		{[]string{"hubble", "tls", "auto", "method"}, "cronJob"},        // Ichor's default beside it
		{[]string{"operator", "replicas"}, 3},                           // the user's over Ichor's default
		{[]string{"tunnelProtocol"}, TunnelGeneve},                      // owned
		{[]string{"kubeProxyReplacement"}, true},                        // owned
		{[]string{"k8sServicePort"}, KubePrismPort},                     // owned
		{[]string{"ipam", "mode"}, "kubernetes"},                        // owned
		{[]string{"cgroup", "autoMount", "enabled"}, false},             // owned
		{[]string{"tls", "secretsNamespace", "name"}, SecretsNamespace}, // owned
	} {
		if v := lookup(got, c.path...); !reflect.DeepEqual(v, c.want) {
			t.Errorf("%s = %#v, want %#v", strings.Join(c.path, "."), v, c.want)
		}
	}
	if v, ok := got["bpf"]; !ok || v != nil {
		t.Errorf("the user's null must stay for Helm to remove the default, got %#v (present %v)", v, ok)
	}
	// The caller's map is not changed, and later changes to the result do not reach it.
	lookup(got, "hubble").(map[string]any)["x"] = 1
	if _, ok := user["hubble"].(map[string]any)["x"]; ok || len(user) != 3 {
		t.Errorf("Effective shares or changed the user's map: %v", user)
	}

	if _, err := Effective(map[string]any{"tunnelProtocol": "vxlan"}, Choices{}); !errors.As(err, new(*OwnedKeyError)) {
		t.Errorf("Effective must validate the user's layer, got %v", err)
	}
}

func TestChoices(t *testing.T) {
	o, err := Owned(Choices{})
	if err != nil {
		t.Fatal(err)
	}
	if o["tunnelProtocol"] != TunnelVXLAN || o["kubeProxyReplacement"] != false {
		t.Errorf("empty choices: tunnel %v, kubeProxyReplacement %v; want vxlan and false", o["tunnelProtocol"], o["kubeProxyReplacement"])
	}
	for _, c := range []Choices{{Tunnel: "gre"}, {KubeProxy: "off"}} {
		if _, err := Owned(c); !errors.Is(err, ErrChoice) {
			t.Errorf("Owned(%+v): want ErrChoice, got %v", c, err)
		}
	}
	if d := Defaults(Choices{Nodes: 1}); lookup(d, "operator", "replicas") != 1 {
		t.Errorf("one Node: operator replicas %v, want 1", lookup(d, "operator", "replicas"))
	}
	if d := Defaults(Choices{Nodes: 2}); lookup(d, "operator") != nil {
		t.Errorf("two Nodes: Ichor must leave the chart's operator replicas, got %v", lookup(d, "operator"))
	}
}

// Every key Owned sets is one Validate refuses, so the user cannot set what Ichor overwrites.
func TestEverythingOwnedIsRefused(t *testing.T) {
	o, err := Owned(Choices{})
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	walk("", o, func(p string, _ any) { set = append(set, p) })
	slices.Sort(set)
	err = Validate(o)
	var owned *OwnedKeyError
	if !errors.As(err, &owned) || !slices.Equal(owned.Keys, set) {
		t.Fatalf("Validate(Owned()) refused %v, want every owned path %v", owned, set)
	}
}

func lookup(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}
