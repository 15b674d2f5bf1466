package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
	"github.com/maeshinshin/ichor/uiserver/internal/certs"
)

var (
	k8s   client.Client
	nsSeq atomic.Int32
)

func TestMain(m *testing.M) {
	clusterCheckInterval = 100 * time.Millisecond
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(_ context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client
		return nil, nil
	}))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("only-cluster-%d", nsSeq.Add(1))
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func createCluster(t *testing.T, ns, name string) *ichorv1alpha1.TalosCluster {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:         ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.5.0.10"},
			SecretsBundleRef: ichorv1alpha1.SecretReference{Name: name + "-secrets"},
			ControlPlane:     ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: ptr.To(false)},
			CNI:              ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "vxlan", KubeProxy: ichorv1alpha1.KubeProxyEnabled},
			Network:          ichorv1alpha1.ClusterNetwork{PodSubnets: []string{"10.244.0.0/16"}, ServiceSubnets: []string{"10.96.0.0/12"}},
		},
	}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func deleteCluster(t *testing.T, c *ichorv1alpha1.TalosCluster) {
	t.Helper()
	if err := k8s.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func probe(addr, path string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // the test's self-signed certificate
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+addr+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Without --cluster, ichor-ui is alive but not ready while its namespace
// holds no TalosCluster or more than one, says why, and serves the only one
// once there is one.
func TestWaitForTheOnlyCluster(t *testing.T) {
	ns := namespace(t)
	cert, _, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	addr := freeAddr(t)
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		name, err := waitForCluster(context.Background(), k8s, ns, addr,
			func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }, slog.New(slog.NewJSONHandler(logs, nil)))
		done <- result{name, err}
	}()

	testenv.Eventually(t, 0, "the waiting server answers", testenv.Holds(func() bool { code, _ := probe(addr, "/healthz"); return code == http.StatusOK }))
	testenv.Eventually(t, 0, "readiness explains that there is no cluster", testenv.Holds(func() bool {
		code, body := probe(addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "no TalosCluster in namespace "+ns)
	}))
	if code, _ := probe(addr, "/api/v1/machines"); code != http.StatusServiceUnavailable {
		t.Errorf("the API while waiting: %d, want 503", code)
	}

	a := createCluster(t, ns, "alpha")
	b := createCluster(t, ns, "beta")
	select {
	case r := <-done:
		// The two creations may be seen between checks: alpha alone is a valid answer.
		if r.err != nil || r.name != "alpha" {
			t.Fatalf("waitForCluster: %q, %v", r.name, r.err)
		}
		t.Log("alpha was seen alone before beta was created")
		deleteCluster(t, a)
		deleteCluster(t, b)
		return
	case <-time.After(500 * time.Millisecond):
	}
	testenv.Eventually(t, 0, "readiness explains that there are two clusters", testenv.Holds(func() bool {
		code, body := probe(addr, "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "2 TalosClusters") &&
			strings.Contains(body, "alpha, beta") && strings.Contains(body, "pass --cluster")
	}))
	deleteCluster(t, b)
	select {
	case r := <-done:
		if r.err != nil || r.name != "alpha" {
			t.Fatalf("waitForCluster: %q, %v; want alpha", r.name, r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("waitForCluster did not return once alpha was the only cluster")
	}
	// Its listener is released for the real server.
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("the waiting server still holds %s: %v", addr, err)
	}
	_ = ln.Close()
	out := logs.String()
	if strings.Count(out, "no TalosCluster in namespace") != 1 {
		t.Errorf("want the reason logged once per change, got:\n%s", out)
	}
	if !strings.Contains(out, "2 TalosClusters") {
		t.Errorf("the log does not say there were two clusters:\n%s", out)
	}
}

func TestWaitForClusterStopsWithTheContext(t *testing.T) {
	ns := namespace(t)
	cert, _, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := waitForCluster(ctx, k8s, ns, freeAddr(t), func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
			slog.New(slog.DiscardHandler))
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("waitForCluster returned no error when stopped")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waitForCluster did not stop")
	}
}

// Once serving, readiness follows whether the served cluster is still the
// only one, and a cluster that replaces it restarts ichor-ui.
func TestClusterWatch(t *testing.T) {
	ns := namespace(t)
	a := createCluster(t, ns, "alpha")
	logs := &syncBuffer{}
	restarted := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name, w, err := clusterToServe(ctx, "", k8s, ns, freeAddr(t), func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil },
		slog.New(slog.NewJSONHandler(logs, nil)), func(reason string) { restarted <- reason })
	if err != nil || name != "alpha" {
		t.Fatalf("clusterToServe: %q, %v", name, err)
	}
	go w.run(ctx) // main's loop
	if !w.Ready() {
		t.Fatal("not ready while alpha is the only cluster")
	}
	b := createCluster(t, ns, "beta")
	testenv.Eventually(t, 0, "not ready with two clusters", testenv.Holds(func() bool { return !w.Ready() }))
	deleteCluster(t, b)
	testenv.Eventually(t, 0, "ready again with one cluster", testenv.Holds(func() bool { return w.Ready() }))
	if out := logs.String(); !strings.Contains(out, "2 TalosClusters") || !strings.Contains(out, "ready again") {
		t.Errorf("the changes are not logged:\n%s", out)
	}

	deleteCluster(t, a)
	testenv.Eventually(t, 0, "not ready without a cluster", testenv.Holds(func() bool { return !w.Ready() }))
	createCluster(t, ns, "gamma")
	select {
	case reason := <-restarted:
		if !strings.Contains(reason, "alpha") || !strings.Contains(reason, "gamma") {
			t.Errorf("restart reason %q names neither cluster", reason)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("gamma replaced alpha and ichor-ui did not restart to serve it")
	}

	// --cluster given: no wait, no watch.
	name, w, err = clusterToServe(ctx, "given", k8s, ns, "", nil, slog.New(slog.DiscardHandler), nil)
	if err != nil || name != "given" || !w.Ready() {
		t.Fatalf("--cluster given: %q, %v, ready %v", name, err, w.Ready())
	}
}
