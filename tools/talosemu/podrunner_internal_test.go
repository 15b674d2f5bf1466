package talosemu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/utils/lifecycle"
)

func TestIchorBinary(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/maeshinshin/ichor-controller:latest": "ichor-controller",
		"ichor-ui": "ichor-ui",
		"localhost:5000/x/ichor-installer:v0.3.0":          "ichor-installer",
		"registry.example:5000/ichor-ui@sha256:abcd":       "ichor-ui",
		"registry.example:5000/ichor-ui:v1@sha256:abcd":    "ichor-ui",
		"ghcr.io/maeshinshin/ichor-controller-extra:1":     "",
		"registry.k8s.io/pause:3.10":                       "",
		"ghcr.io/ichor-ui/nginx:1":                         "",
		"registry.example:5000/ichor-controller-debug:dev": "",
	} {
		if got := ichorBinary(image); got != want {
			t.Errorf("ichorBinary(%q) = %q, want %q", image, got, want)
		}
	}
}

// TestImageBinary: a tag runs the tree's build, a digest only the build written for that
// digest, and a digest of another form (or a path in disguise) runs nothing.
func TestImageBinary(t *testing.T) {
	w := &World{}
	w.podBinDir = "/bins"
	hex := strings.Repeat("ab", 32)

	for image, want := range map[string]string{
		"ghcr.io/maeshinshin/ichor-controller:latest":                  "/bins/ichor-controller",
		"127.0.0.1:5000/maeshinshin/ichor-controller@sha256:" + hex:    "/bins/sha256/" + hex + "/ichor-controller",
		"127.0.0.1:5000/maeshinshin/ichor-controller:v1@sha256:" + hex: "/bins/sha256/" + hex + "/ichor-controller",
		"127.0.0.1:5000/maeshinshin/ichor-controller@sha256:abcd":      "",
		"127.0.0.1:5000/maeshinshin/ichor-controller@sha512:" + hex:    "",
		"127.0.0.1:5000/maeshinshin/ichor-controller@sha256:../../x":   "",
	} {
		got, err := w.imageBinary(image, "ichor-controller")
		if want == "" {
			if err == nil {
				t.Errorf("imageBinary(%q) = %q, want an error", image, got)
			}

			continue
		}

		if err != nil || got != want {
			t.Errorf("imageBinary(%q) = %q, %v; want %q", image, got, err, want)
		}
	}
}

// TestKwokStagesSkipRunnerPods evaluates kwok's own stage matching (the JQ selector runs in
// kwok's lifecycle package): with the pod runner on, no pod stage takes a pod of an Ichor
// image, in a container or an init container; other pods still match; with it off every pod
// matches as before.
func TestKwokStagesSkipRunnerPods(t *testing.T) {
	pending := func(images ...string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: "n"},
			Status:     corev1.PodStatus{Phase: corev1.PodPending},
		}

		for i, img := range images {
			c := corev1.Container{Name: fmt.Sprint("c", i), Image: img}
			if strings.HasPrefix(img, "init:") {
				c.Image = strings.TrimPrefix(img, "init:")
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
			} else {
				p.Spec.Containers = append(p.Spec.Containers, c)
			}
		}

		return p
	}

	deleting := pending("ghcr.io/maeshinshin/ichor-ui:v1")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}

	for _, tc := range []struct {
		name      string
		runner    bool
		pod       *corev1.Pod
		wantStage string
	}{
		{"pause pod, runner on", true, pending("registry.k8s.io/pause:3.10"), "pod-ready"},
		{"ichor pod, runner on", true, pending("ghcr.io/maeshinshin/ichor-ui:v1"), ""},
		{"ichor pod with a digest, runner on", true, pending("r.example:5000/ichor-controller@sha256:00"), ""},
		{"ichor init container, runner on", true, pending("init:ghcr.io/x/ichor-installer:v1", "registry.k8s.io/pause:3.10"), ""},
		{"ichor sidecar, runner on", true, pending("registry.k8s.io/pause:3.10", "ichor-ui"), ""},
		{"deleted ichor pod, runner on", true, deleting, ""},
		{"ichor pod, runner off", false, pending("ghcr.io/maeshinshin/ichor-ui:v1"), "pod-ready"},
		{"deleted ichor pod, runner off", false, deleting, "pod-delete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stages, err := kwokStages(tc.runner)
			if err != nil {
				t.Fatal(err)
			}

			lc, err := lifecycle.NewLifecycle(stages[internalversion.StageResourceRef{APIGroup: "v1", Kind: "Pod"}])
			if err != nil {
				t.Fatal(err)
			}

			st, err := lc.Match(t.Context(), &lifecycle.Event{Labels: tc.pod.Labels, Annotations: tc.pod.Annotations, Data: tc.pod})
			if err != nil {
				t.Fatal(err)
			}

			got := ""
			if st != nil {
				got = st.Name()
			}

			if got != tc.wantStage {
				t.Fatalf("stage %q, want %q", got, tc.wantStage)
			}
		})
	}
}

func TestExpandRewriteBind(t *testing.T) {
	vars := map[string]string{"A": "x", "DIR": "/host/vol"}

	for in, want := range map[string]string{
		"$(A)":          "x",
		"--a=$(A)/$(B)": "--a=x/$(B)",
		"$$(A)":         "$(A)",
		"$(A":           "$(A",
		"cost $5":       "cost $5",
		"$(DIR)/f":      "/host/vol/f",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}

	mounts := []mountMap{{ctr: "/tmp/k8s-webhook-server/serving-certs", host: "/h/certs"}, {ctr: "/etc/x", host: "/h/x"}, {ctr: "/tmp", host: "/h/tmp"}}

	for in, want := range map[string]string{
		"--cert-dir=/tmp/k8s-webhook-server/serving-certs": "--cert-dir=/h/certs",
		"/etc/x/a.yaml":          "/h/x/a.yaml",
		"/etc/xy/a.yaml":         "/etc/xy/a.yaml",
		"/tmp/other":             "/h/tmp/other",
		"--flag":                 "--flag",
		"name=/etc/x":            "name=/etc/x",
		"-f=/etc/x":              "-f=/h/x",
		"/etc/x":                 "/h/x",
		"--kubeconfig=/etc/x/kc": "--kubeconfig=/h/x/kc",
	} {
		if got := rewriteArg(in, mounts); got != want {
			t.Errorf("rewriteArg(%q) = %q, want %q", in, got, want)
		}
	}

	for in, want := range map[string]string{
		":8081":                             "127.9.0.5:8081",
		"--health-probe-bind-address=:8081": "--health-probe-bind-address=127.9.0.5:8081",
		"--listen=0.0.0.0:8443":             "--listen=127.9.0.5:8443",
		"--listen=[::]:8443":                "--listen=127.9.0.5:8443",
		"--listen=127.0.0.1:8443":           "--listen=127.0.0.1:8443",
		"--metrics-bind-address=0":          "--metrics-bind-address=0",
		"--port=:x":                         "--port=:x",
	} {
		if got := bindLoopback(in, "127.9.0.5"); got != want {
			t.Errorf("bindLoopback(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteAtomicDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")

	read := func(name string) string {
		t.Helper()

		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}

		return string(b)
	}

	if err := writeAtomicDir(dir, map[string]volFile{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o600}}); err != nil {
		t.Fatal(err)
	}

	if read("a") != "1" || read("sub/b") != "2" {
		t.Fatalf("first write: a=%q sub/b=%q", read("a"), read("sub/b"))
	}

	first, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatal(err)
	}

	// the same payload writes nothing
	if err := writeAtomicDir(dir, map[string]volFile{"a": {data: []byte("1")}, "sub/b": {data: []byte("2")}}); err != nil {
		t.Fatal(err)
	}

	if again, _ := os.Readlink(filepath.Join(dir, "..data")); again != first {
		t.Fatalf("an unchanged payload was rewritten: %s → %s", first, again)
	}

	// a change swaps ..data, drops the removed key and the old directory
	if err := writeAtomicDir(dir, map[string]volFile{"a": {data: []byte("3"), mode: 0o644}}); err != nil {
		t.Fatal(err)
	}

	if read("a") != "3" || !strings.HasPrefix(read("sub/b"), "<") {
		t.Fatalf("second write: a=%q sub/b=%q", read("a"), read("sub/b"))
	}

	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Fatalf("old payload directory %s left: %v", first, err)
	}
}

func TestStreamLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	var content strings.Builder
	for i := range 5 {
		fmt.Fprintf(&content, "%s stdout F line %d\n", t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i)
	}

	if err := os.WriteFile(path, []byte(content.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	read := func(opts logOptions, live <-chan struct{}) string {
		var b bytes.Buffer
		if err := streamLog(t.Context(), &b, path, live, opts); err != nil && !errors.Is(err, errLimit) {
			t.Fatal(err)
		}

		return b.String()
	}

	if got := read(logOptions{tail: -1}, nil); got != "line 0\nline 1\nline 2\nline 3\nline 4\n" {
		t.Fatalf("all: %q", got)
	}

	if got := read(logOptions{tail: 2}, nil); got != "line 3\nline 4\n" {
		t.Fatalf("tail 2: %q", got)
	}

	if got := read(logOptions{tail: -1, since: t0.Add(3 * time.Second)}, nil); got != "line 3\nline 4\n" {
		t.Fatalf("since: %q", got)
	}

	if got := read(logOptions{tail: 1, timestamps: true}, nil); got != t0.Add(4*time.Second).Format(time.RFC3339Nano)+" line 4\n" {
		t.Fatalf("timestamps: %q", got)
	}

	if got := read(logOptions{tail: -1, limit: 10}, nil); got != "line 0\nlin" {
		t.Fatalf("limit: %q", got)
	}

	// follow: a line written later comes through; the stream ends with the run
	live := make(chan struct{})
	out := make(chan string, 1)

	go func() { out <- read(logOptions{tail: 0}, live) }()

	time.Sleep(50 * time.Millisecond) // lets the reader reach the end of the file first; the assert holds either way

	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}

	_, _ = fmt.Fprintf(f, "%s stderr F later\n", time.Now().UTC().Format(time.RFC3339Nano))
	_ = f.Close()

	close(live)

	select {
	case got := <-out:
		if got != "later\n" {
			t.Fatalf("follow: %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follow did not end with the run")
	}
}

// TestEgressProxy runs the proxy the API servers dial through: a pod address reaches the
// pod's loopback address, a loopback address is dialled as it is, anything else is refused
// without a connection.
func TestEgressProxy(t *testing.T) {
	w := &World{kubernetes: true}
	if err := w.startPodNet(t.Context(), Options{PodSubnet: "127.77.252.0/24"}); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(w.stopPodNet)

	loop, err := w.allocLoopback("10.244.1.254")
	if err != nil {
		t.Fatal(err)
	}

	if !strings.HasPrefix(loop, "127.77.252.") {
		t.Fatalf("loopback address %s outside the pod subnet", loop)
	}

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", net.JoinHostPort(loop, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close() //nolint:errcheck

	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}

			go func() {
				defer c.Close() //nolint:errcheck

				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "echo "+line)
			}()
		}
	}()

	_, port, _ := net.SplitHostPort(lis.Addr().String())

	// the pod address is checked and taken at once: a second pod set up with the same
	// one is refused, and the first pod's mapping stays
	if other, err := w.allocLoopback("10.244.1.254"); !errors.Is(err, errPodIPTaken) {
		t.Fatalf("a second pod with the pod address 10.244.1.254 was given %q (%v)", other, err)
	}

	if got := w.podLoopback("10.244.1.254"); got != loop {
		t.Fatalf("10.244.1.254 maps to %q after the refused second pod; want %q", got, loop)
	}

	// a second pod gets another address; the listening one is skipped
	if other, err := w.allocLoopback("10.244.1.253"); err != nil || other == loop {
		t.Fatalf("second pod: %s, %v", other, err)
	}

	connect := func(target string) (int, string) {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "unix", w.egressLis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() //nolint:errcheck

		_, _ = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", target)

		br := bufio.NewReader(c)

		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() //nolint:errcheck

		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)

			return resp.StatusCode, string(b)
		}

		_, _ = fmt.Fprintf(c, "ping\n")

		line, _ := br.ReadString('\n')

		return resp.StatusCode, line
	}

	if code, got := connect(net.JoinHostPort("10.244.1.254", port)); code != http.StatusOK || got != "echo ping\n" {
		t.Fatalf("pod address: %d %q", code, got)
	}

	if code, got := connect(net.JoinHostPort(loop, port)); code != http.StatusOK || got != "echo ping\n" {
		t.Fatalf("loopback address: %d %q", code, got)
	}

	if code, got := connect("10.244.9.9:443"); code != http.StatusForbidden || !strings.Contains(got, "no pod run by talosemu has address 10.244.9.9") {
		t.Fatalf("unknown address: %d %q", code, got)
	}

	w.releaseLoopback("10.244.1.254", loop)

	if code, _ := connect(net.JoinHostPort("10.244.1.254", port)); code != http.StatusForbidden {
		t.Fatalf("released pod address: %d, want 403", code)
	}
}

// TestSocketsOfAProcess: the flow sampler's reading of /proc finds this process's own
// connection, an IPv4 one and one on a dual-stack socket, with both ends and the listener.
func TestSocketsOfAProcess(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp"} {
		lis, err := (&net.ListenConfig{}).Listen(t.Context(), network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}

		conn, err := (&net.Dialer{}).DialContext(t.Context(), network, lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}

		server, err := lis.Accept()
		if err != nil {
			t.Fatal(err)
		}

		socks, err := readTCPTables()
		if err != nil {
			t.Fatal(err)
		}

		var listening, outbound, accepted bool

		for ino := range socketInodes(os.Getpid()) {
			s, ok := socks[ino]
			if !ok {
				continue
			}

			switch {
			case s.listen && s.local.String() == lis.Addr().String():
				listening = true
			case s.established && s.local.String() == conn.LocalAddr().String() && s.remote.String() == lis.Addr().String():
				outbound = true
			case s.established && s.local.String() == lis.Addr().String() && s.remote.String() == conn.LocalAddr().String():
				accepted = true
			}
		}

		_ = server.Close()
		_ = conn.Close()
		_ = lis.Close()

		if !listening || !outbound || !accepted {
			t.Fatalf("%s: listener %t, outbound %t, accepted %t in this process's sockets", network, listening, outbound, accepted)
		}
	}
}
