// Package server assembles ichor-ui: the gRPC services and their grpc-gateway
// REST mapping, mounted in-process on a chi router beside the embedded SPA,
// health, metrics and the sign-in endpoints, served over HTTPS only.
package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/frontend"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/restjson"
)

// Options configure New.
type Options struct {
	// Addr is the HTTPS listen address, :8443 in a cluster.
	Addr string
	// TLS serves the certificate.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// OIDCAddr is the second HTTPS listener, :8444 in a cluster, that serves
	// only the issuer's discovery document and keys to the kube-apiserver
	// (through the ClusterIP Service); empty serves none.
	OIDCAddr string
	// OIDCGetCertificate is that listener's certificate (the Ichor leaf);
	// nil means GetCertificate.
	OIDCGetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// The UI API, one service each (contracts/proto/ichor/v1), registered
	// one by one with their REST mapping (services.go); nil serves none.
	//
	// Cluster implements ClusterService.
	Cluster ichorv1.ClusterServiceServer
	// Machines implements MachineService.
	Machines ichorv1.MachineServiceServer
	// Nodes implements NodeService.
	Nodes ichorv1.NodeServiceServer
	// Operations implements OperationService.
	Operations ichorv1.OperationServiceServer
	// Settings implements SettingsService.
	Settings ichorv1.SettingsServiceServer
	// Reclaims implements ReclaimService ("Reset and add").
	Reclaims ichorv1.ReclaimServiceServer
	// Patches implements PatchService (the Configuration page).
	Patches ichorv1.PatchServiceServer
	// Health implements HealthService (needs attention, control-plane health).
	Health ichorv1.HealthServiceServer
	// Backups implements BackupService (the Backups page).
	Backups ichorv1.BackupServiceServer
	// Users implements UserService (the Users page); nil while Ichor's own users are off.
	Users ichorv1.UserServiceServer
	// Downloads serves the admin-gated downloads of a node (support bundle,
	// etcd snapshot, packet capture) at GET /api/v1/nodes/{name}/{kind} and
	// the reader talosconfig at GET /api/v1/cluster/talosconfig, as the
	// signed-in user (nodes.Downloads); nil serves none.
	Downloads http.Handler
	// Encodings, when set with Machines, serves the shared list of machines
	// from encodings made once per change (gRPC and REST).
	Encodings Encodings
	// Authenticator checks bearer tokens.
	Authenticator auth.Authenticator
	// Ready reports whether the backend can serve (its cache synced).
	Ready func() bool
	// Frontend is the built SPA; nil serves none.
	Frontend fs.FS
	// Mount adds routes (the OIDC issuer) to the router.
	Mount func(r chi.Router)
	// Log receives the access log and errors; it never gets a header value.
	Log *slog.Logger
	// Registry receives the metrics; nil makes one.
	Registry *prometheus.Registry
	// ShutdownTimeout bounds the graceful termination; zero means 25 s.
	ShutdownTimeout time.Duration
	// MetricsAddr is the HTTPS listener that serves /metrics (the Ichor
	// leaf, OIDCGetCertificate, when set); the console's listener never
	// serves it. Empty serves no metrics.
	MetricsAddr string
	// MetricsAuth wraps the /metrics handler with the check of its callers
	// (ichor-ui's main: a bearer token the API server reviews, and get on
	// the non-resource URL /metrics); nil serves /metrics to anyone who
	// reaches MetricsAddr.
	MetricsAuth func(http.Handler) (http.Handler, error)
	// ReadTimeout bounds reading one request, its body included; zero
	// means 60 s. Responses have no write timeout: log streams and watches
	// last as long as the client keeps them.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request; zero means 120 s.
	IdleTimeout time.Duration
	// TokenCacheTTL is how long a verified access token is trusted without
	// verifying it again, and so how long a revoked session's access token
	// may still pass; zero means 5 s.
	TokenCacheTTL time.Duration
}

// Server is ichor-ui's HTTPS server.
type Server struct {
	opts      Options
	grpc      *grpc.Server
	handler   http.Handler
	stopping  chan struct{}
	stopped   atomic.Bool
	inproc    *bufconn.Listener
	gwConn    *grpc.ClientConn
	gw        *runtime.ServeMux
	marshaler runtime.Marshaler
	metrics   *metrics
	verified  tokenCache

	metricsHandler http.Handler
}

// Stopping is closed when the server starts to shut down; give it to the
// services so that their streams end and clients reconnect.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// New builds the server; Run serves it.
func New(opts Options) (*Server, error) {
	if opts.Registry == nil {
		opts.Registry = NewRegistry()
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 25 * time.Second
	}
	if opts.TokenCacheTTL == 0 {
		opts.TokenCacheTTL = defaultTokenCacheTTL
	}
	s := &Server{opts: opts, stopping: make(chan struct{}), metrics: newMetrics(opts.Registry)}
	s.verified.ttl = opts.TokenCacheTTL
	grpcOpts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRequestBody),
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
	}
	if opts.Encodings != nil && opts.Machines != nil {
		grpcOpts = append(grpcOpts, grpc.ForceServerCodecV2(cachingCodec{base: encoding.GetCodecV2(grpcproto.Name), cache: opts.Encodings}))
	}
	s.grpc = grpc.NewServer(grpcOpts...)
	services := opts.services()
	for _, svc := range services {
		svc.grpc(s.grpc)
	}

	// grpc-gateway calls the same gRPC server in-process, through an
	// in-memory connection, so REST and gRPC share the interceptors.
	s.inproc = bufconn.Listen(1 << 20)
	go func() { _ = s.grpc.Serve(s.inproc) }()
	conn, err := grpc.NewClient("passthrough:///ichor-ui-inprocess",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.inproc.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	s.gwConn = conn
	s.marshaler = restjson.Marshaler()
	gw := runtime.NewServeMux(
		// Only the bearer token crosses from HTTP to gRPC: no cookie, no other header.
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			if strings.EqualFold(key, "Authorization") {
				return "authorization", true
			}
			return "", false
		}),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, s.marshaler),
	)
	s.gw = gw
	for _, svc := range services {
		if err := svc.rest(context.Background(), gw, conn); err != nil {
			return nil, fmt.Errorf("the REST mapping of %s: %w", svc.name, err)
		}
	}

	r := chi.NewRouter()
	r.Use(s.accessLog, securityHeaders, s.grpcDispatch)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.stopped.Load() || (opts.Ready != nil && !opts.Ready()) {
			http.Error(w, "not ready\n", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// Metrics are served on their own listener (MetricsAddr), never to
	// whoever reaches the console.
	r.Handle("/metrics", http.NotFoundHandler())
	s.metricsHandler = promhttp.HandlerFor(opts.Registry, promhttp.HandlerOpts{})
	if opts.MetricsAuth != nil {
		if s.metricsHandler, err = opts.MetricsAuth(s.metricsHandler); err != nil {
			return nil, fmt.Errorf("the metrics endpoint's authentication: %w", err)
		}
	}
	r.Route("/api", func(api chi.Router) {
		api.Use(limitBody, frontend.CompressJSON)
		if opts.Encodings != nil && opts.Machines != nil {
			api.Get("/v1/machines", s.listMachinesREST)
		}
		if opts.Downloads != nil {
			for _, kind := range DownloadRoutes {
				api.Get("/v1/nodes/{name}/"+kind, s.httpAuth(opts.Downloads))
			}
			api.Get("/v1/cluster/talosconfig", s.httpAuth(opts.Downloads)) // nodes.TalosconfigPath
		}
		api.Mount("/", gw)
	})
	if opts.Mount != nil {
		opts.Mount(r)
	}
	if opts.Frontend != nil {
		console, err := frontend.NewHandler(opts.Frontend, consoleHeaders)
		if err != nil {
			return nil, fmt.Errorf("the console's files: %w", err)
		}
		r.NotFound(console.ServeHTTP)
	}
	s.handler = r
	return s, nil
}

// Handler returns the router (for tests that serve it themselves).
func (s *Server) Handler() http.Handler { return s.handler }

// DownloadRoutes are the download routes below /api/v1/nodes/{name}/.
var DownloadRoutes = []string{"support-bundle", "etcd-snapshot", "packet-capture"}

// httpAuth authenticates a plain HTTP request (a download) with the same
// bearer token check as the API's calls and puts the user in its context.
func (s *Server) httpAuth(next http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		md := metadata.MD{}
		if v := r.Header.Get("Authorization"); v != "" {
			md.Set("authorization", v)
		}
		ctx, err := s.authenticate(metadata.NewIncomingContext(r.Context(), md))
		if err != nil {
			writeAPIError(w, http.StatusUnauthorized, codes.Unauthenticated, status.Convert(err).Message())
			return
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	}
}

// grpcDispatch sends gRPC requests (HTTP/2, application/grpc) to the gRPC server.
func (s *Server) grpcDispatch(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate resolves the bearer token of the call's metadata.
func (s *Server) authenticate(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return nil, status.Error(codes.Unauthenticated, "sign in first: the request carries no bearer token")
	}
	id, ok := s.verified.get(token)
	if !ok {
		var err error
		id, err = s.opts.Authenticator.Authenticate(ctx, token)
		if err != nil {
			// The error names what was wrong with the token, never the token.
			return nil, status.Errorf(codes.Unauthenticated, "sign in again: %v", err)
		}
		s.verified.put(token, id)
	}
	if setUser := userSetter(ctx); setUser != nil {
		setUser(id.Username)
	}
	return identity.With(ctx, id), nil
}

func (s *Server) unaryAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

type wrappedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authenticate(ss.Context())
	if err != nil {
		return err
	}
	open := s.metrics.streams.WithLabelValues(info.FullMethod)
	open.Inc()
	defer open.Dec()
	return handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
}

// Run listens on Addr (and OIDCAddr) and serves until ctx ends, then
// terminates gracefully: /readyz fails, streams end with UNAVAILABLE (clients
// reconnect and resume), HTTP/2 connections get GOAWAY, and in-flight calls
// finish.
func (s *Server) Run(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		return err
	}
	l := Listeners{Console: ln}
	if s.opts.OIDCAddr != "" {
		if l.OIDC, err = (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.OIDCAddr); err != nil {
			_ = ln.Close()
			return err
		}
	}
	if s.opts.MetricsAddr != "" {
		if l.Metrics, err = (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.MetricsAddr); err != nil {
			_ = ln.Close()
			if l.OIDC != nil {
				_ = l.OIDC.Close()
			}
			return err
		}
	}
	return s.ServeAll(ctx, l)
}

// Serve serves on ln (see Run).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.ServeListeners(ctx, ln, nil)
}

// consoleHeaders are the security headers of the console's pages and assets.
func consoleHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", ConsoleCSP)
}

// MaxRequestBody bounds the body of an /api request (REST) and a gRPC
// request message: the largest is a configuration patch, far below it.
const MaxRequestBody = 256 << 10

// limitBody refuses an /api request whose body is larger than
// MaxRequestBody with 413, before anything decodes it: by its
// Content-Length, or, without one, by reading at most one byte more than
// the limit into memory.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxRequestBody {
			tooLarge(w)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBody+1))
			if err != nil {
				writeAPIError(w, http.StatusBadRequest, codes.InvalidArgument, "the request body could not be read: "+err.Error())
				return
			}
			if len(b) > MaxRequestBody {
				tooLarge(w)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	writeAPIError(w, http.StatusRequestEntityTooLarge, codes.InvalidArgument,
		fmt.Sprintf("the request body is larger than %d KiB, the most ichor-ui accepts; send a smaller request", MaxRequestBody>>10))
}

// apiErrorBody is the REST API's error shape (grpc-gateway's).
type apiErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeAPIError answers in the REST API's error shape.
func writeAPIError(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	if err := json.NewEncoder(w).Encode(apiErrorBody{Code: int(code), Message: msg}); err != nil {
		return // the client is gone; there is no one left to tell
	}
}

// ConsoleCSP is the console's Content-Security-Policy: its own scripts,
// styles and API only; no frames, plugins or foreign forms.
const ConsoleCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders marks every answer of the HTTPS listener: HSTS (ichor-ui
// is HTTPS only) and no Referer, so a URL holding an authorization code
// never leaves in a header.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Strict-Transport-Security", "max-age=31536000")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}
