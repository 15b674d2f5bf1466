package server

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	streams  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ichor_ui_http_requests_total", Help: "HTTP and gRPC requests served, by route, method and status.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ichor_ui_http_request_duration_seconds", Help: "Time to serve a request, by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		streams: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ichor_ui_active_streams",
			Help: "Server streams open now (watches, log streams; gRPC and REST alike), by gRPC method.",
		}, []string{"method"}),
	}
	reg.MustRegister(m.requests, m.duration, m.streams)
	return m
}

type userKey struct{}

// logUser carries the signed-in user's name from the authentication of a call
// back to the access log line of its request.
type logUser struct {
	mu   sync.Mutex
	name string
}

// userSetter returns the function that records the user of the request in ctx, if any.
func userSetter(ctx context.Context) func(string) {
	u, ok := ctx.Value(userKey{}).(*logUser)
	if !ok {
		return nil
	}
	return func(name string) {
		u.mu.Lock()
		u.name = name
		u.mu.Unlock()
	}
}

type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush lets streams (gRPC, server-sent REST) through.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// accessLog logs one line per request: method, path (never the query, which
// may carry an authorization code), route, status, size, duration, the
// signed-in user's name and the client address. No header is logged: not
// Authorization, not Cookie, no token.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		u := &logUser{}
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "other"
		}
		if r.ProtoMajor == 2 && len(r.Header.Get("Content-Type")) >= 16 && r.Header.Get("Content-Type")[:16] == "application/grpc" {
			route = "grpc"
		}
		d := time.Since(start)
		s.metrics.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.status)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(d.Seconds())
		u.mu.Lock()
		user := u.name
		u.mu.Unlock()
		if user == "" {
			// A REST call is authenticated behind the in-process gRPC
			// connection; its user is found by the token's verification.
			if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				if id, ok := s.verified.get(strings.TrimSpace(t)); ok {
					user = id.Username
				}
			}
		}
		s.opts.Log.Info("request",
			"method", r.Method, "path", r.URL.Path, "route", route, "proto", r.Proto,
			"status", rec.status, "bytes", rec.bytes, "duration_ms", float64(d.Microseconds())/1000,
			"user", user, "remote", r.RemoteAddr)
	})
}

// tokenCache remembers verified tokens for a few seconds, keyed by their
// SHA-256 (the token itself is not kept), so that a REST call verifies its
// token once and many calls of one session verify it rarely.
type tokenCache struct {
	ttl     time.Duration
	mu      sync.Mutex
	entries map[[32]byte]tokenEntry
}

type tokenEntry struct {
	id    identity.Identity
	until time.Time
}

const (
	defaultTokenCacheTTL = 5 * time.Second
	tokenCacheMax        = 4096
)

func (c *tokenCache) get(token string) (identity.Identity, bool) {
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || time.Now().After(e.until) {
		return identity.Identity{}, false
	}
	return e.id, true
}

func (c *tokenCache) put(token string, id identity.Identity) {
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= tokenCacheMax {
		c.entries = map[[32]byte]tokenEntry{}
	}
	c.entries[k] = tokenEntry{id: id, until: time.Now().Add(c.ttl)}
}
