package workload

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test API server: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// requests counts the requests a client sends, by verb and path.
type requests struct {
	mu   sync.Mutex
	seen []string
	next http.RoundTripper
}

func (r *requests) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.seen = append(r.seen, req.Method+" "+req.URL.Path)
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *requests) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	r.seen = nil
	return s
}

// TestNodeAt: a Node named and at the address is read alone, never by a list
// of every Node; a wrong, unknown or missing name still finds the Node at the
// address by listing; an address no Node has is nil.
func TestNodeAt(t *testing.T) {
	ctx := context.Background()
	cfg := rest.CopyConfig(env.Config)
	counted := &requests{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counted.next = rt; return counted })
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	for i, addr := range []string{"10.9.0.1", "10.9.0.2", "10.9.0.3"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nodeat-%d", i+1)}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}, {Type: corev1.NodeInternalIP, Address: addr}}
		if err := env.Client.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	}

	for _, tc := range []struct {
		name, address, want string
		lists               bool
	}{
		{"nodeat-2", "10.9.0.2", "nodeat-2", false},
		{"nodeat-1", "10.9.0.2", "nodeat-2", true},
		{"nodeat-missing", "10.9.0.3", "nodeat-3", true},
		{"", "10.9.0.1", "nodeat-1", true},
		{"nodeat-1", "10.9.0.99", "", true},
	} {
		counted.take()
		n, err := NodeAt(ctx, k, tc.name, tc.address)
		if err != nil {
			t.Fatalf("NodeAt(%q, %s): %v", tc.name, tc.address, err)
		}
		got := ""
		if n != nil {
			got = n.Name
		}
		if got != tc.want {
			t.Errorf("NodeAt(%q, %s) = %q, want %q", tc.name, tc.address, got, tc.want)
		}
		listed := false
		for _, r := range counted.take() {
			if r == "GET /api/v1/nodes" {
				listed = true
			}
		}
		if listed != tc.lists {
			t.Errorf("NodeAt(%q, %s) listed every Node: %v, want %v", tc.name, tc.address, listed, tc.lists)
		}
	}
}

// TestCacheKeepsAClientPerClusterAndCA: within CacheTTL a cluster's client is
// built once; after it, or for another cluster or another Kubernetes CA (a CA
// rotation), it is built again; a failed build is not kept.
func TestCacheKeepsAClientPerClusterAndCA(t *testing.T) {
	var c Cache
	built := 0
	build := func() (kubernetes.Interface, error) { built++; return kubernetes.NewForConfig(env.Config) }
	fail := func() (kubernetes.Interface, error) { built++; return nil, fmt.Errorf("no control plane answers") }

	cl := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"}}
	other := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "uid-b"}}
	b, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersionCurrent)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersionCurrent)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()

	for _, step := range []struct {
		what  string
		cl    *ichorv1alpha1.TalosCluster
		b     *secrets.Bundle
		at    time.Duration
		build func() (kubernetes.Interface, error)
		built int
	}{
		{"first look", cl, b, 0, build, 1},
		{"within the TTL", cl, b, CacheTTL - time.Second, build, 1},
		{"another cluster", other, b, time.Second, build, 2},
		{"another Kubernetes CA", cl, rotated, time.Second, build, 3},
		{"after the TTL", cl, b, CacheTTL, build, 4},
		{"a failed build", other, b, 2 * CacheTTL, fail, 5},
		{"after a failed build", other, b, 2 * CacheTTL, build, 6},
	} {
		_, err := c.Client(step.cl, step.b, t0.Add(step.at), step.build)
		if (err != nil) != (step.what == "a failed build") {
			t.Fatalf("%s: %v", step.what, err)
		}
		if built != step.built {
			t.Fatalf("%s: built %d clients, want %d", step.what, built, step.built)
		}
	}
}
