package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
)

// Listeners are the listeners Serve uses; nil ones are not served.
type Listeners struct {
	// Console serves the console, the API and the issuer (8443).
	Console net.Listener
	// OIDC serves only the issuer's discovery document and keys (8444).
	OIDC net.Listener
	// Metrics serves only /metrics (8445).
	Metrics net.Listener
}

// ServeListeners serves the console on ln and, when oidcLn is not nil, the
// issuer's discovery document and keys on oidcLn (see Run). When either
// listener fails, or ctx ends, both terminate gracefully.
func (s *Server) ServeListeners(ctx context.Context, ln, oidcLn net.Listener) error {
	return s.ServeAll(ctx, Listeners{Console: ln, OIDC: oidcLn})
}

// ServeAll serves each listener of l (see Run). When one fails, or ctx
// ends, all terminate gracefully.
func (s *Server) ServeAll(ctx context.Context, l Listeners) error {
	servers := []*http.Server{s.httpServer(s.handler, s.opts.GetCertificate)}
	listeners := []net.Listener{l.Console}
	internalCert := s.opts.OIDCGetCertificate
	if internalCert == nil {
		internalCert = s.opts.GetCertificate
	}
	if l.OIDC != nil {
		servers = append(servers, s.httpServer(s.oidcHandler(), internalCert))
		listeners = append(listeners, l.OIDC)
	}
	if l.Metrics != nil {
		servers = append(servers, s.httpServer(s.metricsOnly(), internalCert))
		listeners = append(listeners, l.Metrics)
	}
	errc := make(chan error, len(servers))
	for i := range servers {
		go func() { errc <- servers[i].ServeTLS(listeners[i], "", "") }()
	}
	var runErr error
	pending := len(servers)
	select {
	case runErr = <-errc:
		pending--
	case <-ctx.Done():
	}
	s.stopped.Store(true)
	close(s.stopping)
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	var shutdownErr error
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			shutdownErr = errors.Join(shutdownErr, err)
		}
	}
	// A server whose Serve had not yet started when Shutdown ran still holds
	// its listener open: close every listener, and wait for each Serve to
	// return (at once, now that its server is shut down), so that nothing
	// accepts connections once ServeAll has returned.
	for _, ln := range listeners {
		_ = ln.Close()
	}
	for ; pending > 0; pending-- {
		// ErrServerClosed, or the error of a server that failed meanwhile.
		if err := <-errc; runErr == nil && !errors.Is(err, http.ErrServerClosed) {
			runErr = err
		}
	}
	s.grpc.GracefulStop()
	_ = s.gwConn.Close()
	if runErr != nil && !errors.Is(runErr, http.ErrServerClosed) {
		return runErr
	}
	return shutdownErr
}

// metricsOnly serves GET /metrics and nothing else.
func (s *Server) metricsOnly() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		s.metricsHandler.ServeHTTP(w, r)
	})
}

// httpServer bounds what a slow or idle client may hold: the headers (10 s),
// the whole request (ReadTimeout) and an idle keep-alive connection
// (IdleTimeout). There is no WriteTimeout: it would cut log streams and
// watches, which last as long as the client reads them.
func (s *Server) httpServer(h http.Handler, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *http.Server {
	readTimeout, idleTimeout := s.opts.ReadTimeout, s.opts.IdleTimeout
	if readTimeout == 0 {
		readTimeout = 60 * time.Second
	}
	if idleTimeout == 0 {
		idleTimeout = 120 * time.Second
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: getCert,
			NextProtos:     []string{"h2", "http/1.1"},
		},
		ErrorLog: slog.NewLogLogger(s.opts.Log.Handler(), slog.LevelWarn),
	}
}

// oidcHandler serves the OIDC listener (8444): GET or HEAD of the issuer's
// discovery document and keys, nothing else (404). They come from the
// console's router, so they exist only when the issuer is mounted. The
// discovery document's jwks_uri names this listener, as reached (the Host of
// the request, a Service name), because the kube-apiserver, given this
// listener as its discoveryURL, fetches the keys from jwks_uri and may not
// reach the external URL; the issuer itself stays the external URL the tokens
// carry.
func (s *Server) oidcHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method != http.MethodGet && r.Method != http.MethodHead) ||
			(r.URL.Path != issuer.DiscoveryPath && r.URL.Path != issuer.KeysPath) {
			http.NotFound(w, r)
			return
		}
		inner := r.Clone(r.Context())
		inner.Method = http.MethodGet
		buf := &bufferedResponse{header: http.Header{}}
		s.handler.ServeHTTP(buf, inner)
		// Without the issuer the console's router answers the SPA: not a document.
		if buf.status != http.StatusOK || !strings.HasPrefix(buf.header.Get("Content-Type"), "application/json") {
			http.NotFound(w, r)
			return
		}
		body := buf.body.Bytes()
		if r.URL.Path == issuer.DiscoveryPath {
			if !validHost(r.Host) {
				http.Error(w, "bad Host header", http.StatusBadRequest)
				return
			}
			doc := map[string]any{}
			if err := json.Unmarshal(body, &doc); err != nil {
				http.Error(w, "the discovery document does not parse", http.StatusInternalServerError)
				return
			}
			doc["jwks_uri"] = "https://" + r.Host + issuer.KeysPath
			var err error
			if body, err = json.Marshal(doc); err != nil {
				http.Error(w, "encoding the discovery document", http.StatusInternalServerError)
				return
			}
		}
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if v := buf.header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}

// validHost accepts host[:port] as a client may send it, nothing that could
// change the meaning of a URL.
func validHost(h string) bool {
	if h == "" || strings.ContainsAny(h, "/\\?#@ \t\r\n\"'<>") {
		return false
	}
	host, _, err := net.SplitHostPort(h)
	if err != nil {
		host = h
	}
	return host != ""
}

// bufferedResponse keeps a response in memory.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
