package cilium

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// The lists ciliumvalues keeps by hand must match every embedded chart, so
// that a new chart pin that adds a secrets namespace or a capability fails
// here instead of rendering without it.
func TestOwnedListsMatchEveryEmbeddedChart(t *testing.T) {
	if len(Versions()) == 0 {
		t.Fatal("no chart is embedded")
	}
	for _, v := range Versions() {
		ch, err := LoadChart(v)
		if err != nil {
			t.Fatal(err)
		}
		var owners []string
		walkValues("", ch.Values, func(p string) {
			if owner, ok := strings.CutSuffix(p, ".secretsNamespace.name"); ok {
				owners = append(owners, owner)
			}
		})
		slices.Sort(owners)
		if !slices.Equal(owners, ciliumvalues.SecretsNamespaceOwners) {
			t.Errorf("cilium %s: the chart has secretsNamespace.name under %v, ciliumvalues.SecretsNamespaceOwners is %v", v, owners, ciliumvalues.SecretsNamespaceOwners)
		}
		agent := strings2(get(ch.Values, "securityContext", "capabilities", "ciliumAgent"))
		agent = slices.DeleteFunc(agent, func(c string) bool { return c == "SYS_MODULE" })
		if !slices.Equal(agent, ciliumvalues.CiliumAgentCapabilities) {
			t.Errorf("cilium %s: the chart's agent capabilities without SYS_MODULE are %v, ciliumvalues has %v", v, agent, ciliumvalues.CiliumAgentCapabilities)
		}
		clean := strings2(get(ch.Values, "securityContext", "capabilities", "cleanCiliumState"))
		clean = slices.DeleteFunc(clean, func(c string) bool { return c == "SYS_MODULE" })
		if !slices.Equal(clean, ciliumvalues.CleanCiliumStateCapabilities) {
			t.Errorf("cilium %s: the chart's clean-cilium-state capabilities without SYS_MODULE are %v, ciliumvalues has %v", v, clean, ciliumvalues.CleanCiliumStateCapabilities)
		}
		// Every owned key is a key the chart knows (no typo owns nothing).
		for _, k := range ciliumvalues.OwnedKeys() {
			if strings.HasPrefix(k, "*") {
				continue
			}
			if m, ok := get(ch.Values, strings.Split(k, ".")[:strings.Count(k, ".")]...).(map[string]any); !ok || !hasKey(m, k[strings.LastIndex(k, ".")+1:]) {
				t.Errorf("cilium %s: the owned key %s is not in the chart's values.yaml", v, k)
			}
		}
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

func walkValues(prefix string, m map[string]any, fn func(string)) {
	for k, v := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			walkValues(p, sub, fn)
			continue
		}
		fn(p)
	}
}

func TestEmbeddedChartsMatchTheReleasePins(t *testing.T) {
	if got, want := Versions(), release.CiliumVersions(); !slices.Equal(got, want) {
		t.Fatalf("embedded %v, release.CiliumVersions() %v: update the go:generate directive in chart.go and run `go tool task generate`", got, want)
	}
	for _, v := range Versions() {
		ch, err := LoadChart(v)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.Dependencies()) != 0 {
			t.Errorf("cilium %s has subcharts %d; the render assumes none", v, len(ch.Dependencies()))
		}
	}
}

// The render must need no network and no cluster: a kubeconfig in the
// environment points at a listener that counts connections, and the default
// HTTP transport and the resolver's dialer fail and count any use.
func TestRenderNeedsNoNetworkAndNoCluster(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: trap, cluster: {server: "https://`+ln.Addr().String()+`"}}]
contexts: [{name: trap, context: {cluster: trap, user: trap}}]
current-context: trap
users: [{name: trap, user: {token: x}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("HTTPS_PROXY", "http://"+ln.Addr().String())
	t.Setenv("HTTP_PROXY", "http://"+ln.Addr().String())

	var dials atomic.Int32
	oldTransport := http.DefaultTransport
	http.DefaultTransport = roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		dials.Add(1)
		return nil, &net.OpError{Op: "dial", Err: os.ErrPermission}
	})
	oldResolver := net.DefaultResolver
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, os.ErrPermission
	}}
	t.Cleanup(func() {
		http.DefaultTransport = oldTransport
		net.DefaultResolver = oldResolver
	})

	for _, v := range Versions() {
		r := render(t, Options{Version: v, UserValues: map[string]any{"hubble": map[string]any{"relay": map[string]any{"enabled": true}}}})
		if r.SHA256 == "" || len(objects(t, r.Manifest)) == 0 {
			t.Fatalf("cilium %s rendered nothing", v)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the render opened %d connection(s) to the API server in KUBECONFIG", n)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("the render used the network %d time(s)", n)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func BenchmarkRender(b *testing.B) {
	for b.Loop() {
		if _, err := Render(context.Background(), Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
