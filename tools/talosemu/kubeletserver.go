package talosemu

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// The kubelet API (port 10250 of the machine's address), for the pods the runner runs:
// GET /containerLogs/{namespace}/{pod}/{container} (`kubectl logs`: follow, previous,
// timestamps, tailLines, limitBytes, sinceSeconds, sinceTime) and /portForward/{namespace}/{pod}
// (`kubectl port-forward`, served by the kubelet's own port-forward protocol handler,
// k8s.io/cri-streaming/pkg/streaming/portforward, which the API server proxies SPDY to).
// As on Talos (anonymous access off, webhook authorization), a request needs a client
// certificate of the cluster's Kubernetes CA — the API server's is apiserver-kubelet-client —
// and a SubjectAccessReview allowing the verb on nodes/<subresource> of this Node
// (k:pkg/kubelet/server/auth.go). The serving certificate is issued from the cluster CA.
// exec, attach and the stats endpoints are not served.

const (
	kubeletPort = 10250
	verbGet     = "get"
)

// serveKubeletAPI serves the kubelet API until ctx ends, retrying the listener while the
// address is taken.
func (r *podRunner) serveKubeletAPI(ctx context.Context) {
	var lastErr string

	for ctx.Err() == nil {
		err := r.serveKubeletOnce(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}

		if msg := err.Error(); msg != lastErr {
			r.m.world.logf("machine %s: kubelet API: %v", r.m.Name(), err)
			lastErr = msg
		}

		sleepCtx(ctx, 2*time.Second)
	}
}

func (r *podRunner) serveKubeletOnce(ctx context.Context) error {
	caCrt := kubeCACert(r.m.activeConfig())
	if caCrt == nil {
		return errors.New("no Kubernetes CA in the machine configuration")
	}

	ca := r.m.world.kubeCAKeyFor(caCrt)
	if ca == nil {
		return errors.New("no control plane holds the Kubernetes CA key")
	}

	crtPEM, keyPEM, err := signCert(ca, kubeletUserPrefix+r.node, []string{groupNodes}, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth},
		[]net.IP{net.ParseIP(r.m.IP())}, []string{r.node})
	if err != nil {
		return err
	}

	cert, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		return err
	}

	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(r.m.IP(), strconv.Itoa(kubeletPort)))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", r.containerLogs)
	mux.HandleFunc("/portForward/{ns}/{pod}", r.portForward)
	mux.HandleFunc("/portForward/{ns}/{pod}/{uid}", r.portForward)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		http.Error(w, "talosemu's kubelet serves containerLogs and portForward only; not "+req.URL.Path, http.StatusNotFound)
	})

	az := &kubeletAuthz{r: r, cache: map[string]authzEntry{}}

	srv := &http.Server{
		Handler:           az.wrap(mux),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			// the client CAs are the accepted bundle of the running config, read
			// at each handshake: Talos rewrites the kubelet's client CA file and
			// restarts it whenever the accepted CAs change
			// (t:internal/app/machined/pkg/controllers/k8s/kubelet_service.go)
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				pool := stdx509.NewCertPool()
				if !pool.AppendCertsFromPEM(kubeAcceptedCAs(r.m.activeConfig())) {
					pool.AppendCertsFromPEM(caCrt)
				}

				return &tls.Config{
					Certificates: []tls.Certificate{cert},
					ClientAuth:   tls.VerifyClientCertIfGiven,
					ClientCAs:    pool,
					MinVersion:   tls.VersionTLS12,
					NextProtos:   []string{"http/1.1"},
				}, nil
			},
		},
		ErrorLog: nil,
	}

	go func() {
		<-ctx.Done()

		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()

		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()

	err = srv.Serve(tls.NewListener(lis, srv.TLSConfig))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}

	return err
}

// kubeletAuthz authenticates the client certificate and authorizes with SubjectAccessReviews,
// caching each decision for a minute (the kubelet caches them too).
type kubeletAuthz struct {
	r     *podRunner
	mu    sync.Mutex
	cache map[string]authzEntry
}

type authzEntry struct {
	allowed bool
	reason  string
	at      time.Time
}

func (a *kubeletAuthz) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/healthz" {
			next.ServeHTTP(w, req)

			return
		}

		if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)

			return
		}

		leaf := req.TLS.VerifiedChains[0][0]
		user, groups := leaf.Subject.CommonName, leaf.Subject.Organization

		// the verb of the request's method (k:pkg/kubelet/server/auth.go GetRequestAttributes)
		verb := map[string]string{
			http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete",
		}[req.Method]
		if verb == "" {
			verb = verbGet
		}

		sub := "proxy"

		for prefix, s := range map[string]string{"/stats": "stats", "/metrics": "metrics", "/logs": "log", "/spec": "spec", "/checkpoint": "checkpoint"} {
			if strings.HasPrefix(req.URL.Path, prefix) {
				sub = s
			}
		}

		ok, reason, err := a.allowed(req.Context(), user, groups, verb, sub)
		if err != nil {
			http.Error(w, "Authorization error (user="+user+", verb="+verb+", resource=nodes, subresource="+sub+"): "+err.Error(), http.StatusInternalServerError)

			return
		}

		if !ok {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s) %s", user, verb, sub, reason), http.StatusForbidden)

			return
		}

		next.ServeHTTP(w, req)
	})
}

func (a *kubeletAuthz) allowed(ctx context.Context, user string, groups []string, verb, sub string) (bool, string, error) {
	key := strings.Join([]string{user, strings.Join(groups, ","), verb, sub}, "\x00")

	a.mu.Lock()
	e, ok := a.cache[key]
	a.mu.Unlock()

	if ok && time.Since(e.at) < time.Minute {
		return e.allowed, e.reason, nil
	}

	admin, err := a.r.m.adminClient()
	if err != nil {
		return false, "", err
	}

	sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes", Subresource: sub, Name: a.r.node},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}

	e = authzEntry{allowed: sar.Status.Allowed, reason: sar.Status.Reason, at: time.Now()}

	a.mu.Lock()
	a.cache[key] = e
	a.mu.Unlock()

	return e.allowed, e.reason, nil
}

// findContainer is the pod and container a kubelet API path names.
func (r *podRunner) findContainer(ns, name, ctr string) (*runPod, *runCtr, int, string) {
	p := r.lookup(ns, name)
	if p == nil {
		return nil, nil, http.StatusNotFound, fmt.Sprintf("pod %q in namespace %q is not run by talosemu's pod runner on node %s (kwok simulates the pods of other images)", name, ns, r.node)
	}

	for _, c := range slices2(p.inits, p.ctrs) {
		if c.spec.Name == ctr {
			return p, c, 0, ""
		}
	}

	return p, nil, http.StatusBadRequest, fmt.Sprintf("container %s is not valid for pod %s", ctr, name)
}

// logOptions are the query parameters of containerLogs (k8s.io/api/core/v1 PodLogOptions).
type logOptions struct {
	follow, timestamps bool
	tail               int64 // -1: all
	limit              int64 // 0: none
	since              time.Time
}

func (r *podRunner) containerLogs(w http.ResponseWriter, req *http.Request) {
	ns, name, ctrName := req.PathValue("ns"), req.PathValue("pod"), req.PathValue("container")

	_, c, code, msg := r.findContainer(ns, name, ctrName)
	if c == nil {
		http.Error(w, msg, code)

		return
	}

	q := req.URL.Query()
	opts := logOptions{follow: q.Get("follow") == argTrue, timestamps: q.Get("timestamps") == argTrue, tail: -1}

	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, "tailLines: "+v+" is not a number ≥ 0", http.StatusBadRequest)

			return
		}

		opts.tail = n
	}

	if v := q.Get("limitBytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			http.Error(w, "limitBytes: "+v+" is not a number > 0", http.StatusBadRequest)

			return
		}

		opts.limit = n
	}

	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			http.Error(w, "sinceSeconds: "+v+" is not a number > 0", http.StatusBadRequest)

			return
		}

		opts.since = time.Now().Add(-time.Duration(n) * time.Second)
	}

	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			http.Error(w, "sinceTime: "+err.Error(), http.StatusBadRequest)

			return
		}

		opts.since = t
	}

	path, live, err := c.logFile(q.Get("previous") == argTrue)

	switch {
	case errors.Is(err, errWaiting):
		st := c.apiStatus("")
		reason := "ContainerCreating"

		if st.State.Waiting != nil {
			reason = st.State.Waiting.Reason
		}

		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start: %s", ctrName, name, reason), http.StatusBadRequest)

		return
	case errors.Is(err, errNoPrevious):
		http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", ctrName, name), http.StatusBadRequest)

		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)

		return
	}

	if !opts.follow {
		live = nil
	}

	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)

	if err := streamLog(req.Context(), w, path, live, opts); err != nil && !errors.Is(err, errLimit) && req.Context().Err() == nil {
		r.m.world.logf("machine %s: logs of %s/%s/%s: %v", r.m.Name(), ns, name, ctrName, err)
	}
}

var errLimit = errors.New("limitBytes reached")

// streamLog writes a CRI log file as the kubelet returns it: the lines' content, with their
// time first when asked, the last tail lines, from since on; with live it goes on writing new
// lines until the run ends.
func streamLog(ctx context.Context, w io.Writer, path string, live <-chan struct{}, opts logOptions) error {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}

		return err
	}
	defer f.Close() //nolint:errcheck

	var written int64

	flush := func() {
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
	}

	emit := func(line string) error {
		out, ok := formatLogLine(line, opts)
		if !ok {
			return nil
		}

		if opts.limit > 0 && written+int64(len(out)) > opts.limit {
			out = out[:opts.limit-written]
		}

		n, err := io.WriteString(w, out)
		written += int64(n)

		if err != nil {
			return err
		}

		if opts.limit > 0 && written >= opts.limit {
			return errLimit
		}

		return nil
	}

	br := bufio.NewReader(f)

	var lines []string

	pending := ""

	for {
		s, err := br.ReadString('\n')
		if err != nil {
			pending = s

			break
		}

		lines = append(lines, s)
	}

	if opts.tail >= 0 && int64(len(lines)) > opts.tail {
		lines = lines[int64(len(lines))-opts.tail:]
	}

	for _, l := range lines {
		if err := emit(l); err != nil {
			return err
		}
	}

	flush()

	if live == nil {
		return nil
	}

	for {
		s, err := br.ReadString('\n')
		pending += s

		if err == nil {
			if err := emit(pending); err != nil {
				return err
			}

			pending = ""

			flush()

			continue
		}

		select {
		case <-ctx.Done():
			return nil
		case <-live:
			// the run ended: what it wrote is in the file; read to the end once more
			rest, _ := io.ReadAll(br)
			for _, l := range bytes.SplitAfter(append([]byte(pending), rest...), []byte("\n")) {
				if len(l) > 0 && l[len(l)-1] == '\n' {
					if err := emit(string(l)); err != nil {
						return err
					}
				}
			}

			flush()

			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// formatLogLine turns "<time> <stream> <tag> <content>" into what the kubelet returns.
func formatLogLine(line string, opts logOptions) (string, bool) {
	line = strings.TrimSuffix(line, "\n")

	parts := strings.SplitN(line, " ", 4)
	if len(parts) < 3 {
		return "", false
	}

	content := ""
	if len(parts) == 4 {
		content = parts[3]
	}

	ts, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return "", false
	}

	if !opts.since.IsZero() && ts.Before(opts.since) {
		return "", false
	}

	if parts[2] == "F" {
		content += "\n"
	}

	if opts.timestamps {
		return parts[0] + " " + content, true
	}

	return content, true
}

func (r *podRunner) portForward(w http.ResponseWriter, req *http.Request) {
	ns, name := req.PathValue("ns"), req.PathValue("pod")

	p := r.lookup(ns, name)
	if p == nil {
		http.Error(w, fmt.Sprintf("pod %q in namespace %q is not run by talosemu's pod runner on node %s", name, ns, r.node), http.StatusNotFound)

		return
	}

	if uid := req.PathValue("uid"); uid != "" && uid != string(p.uid) {
		http.Error(w, "pod "+name+" has another UID", http.StatusNotFound)

		return
	}

	opts, err := portforward.NewV4Options(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)

		return
	}

	portforward.ServePortForward(w, req, podForwarder{p: p}, ns+"/"+name, string(p.uid), opts, 4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
}

// podForwarder connects a port-forward stream to a port of the pod's loopback address, as
// the runtime connects it inside the pod's network namespace.
type podForwarder struct{ p *runPod }

func (f podForwarder) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close() //nolint:errcheck

	f.p.mu.Lock()
	addr := f.p.loopback
	f.p.mu.Unlock()

	if addr == "" {
		return fmt.Errorf("pod %s/%s is not running", f.p.ns, f.p.name)
	}

	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(int(port))))

	cancel()

	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %s/%s: %w", port, f.p.ns, f.p.name, err)
	}

	pipe(ctx, stream, conn)

	return nil
}
