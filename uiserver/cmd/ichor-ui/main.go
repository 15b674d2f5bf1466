// Command ichor-ui is Ichor's web console backend: the UI API over gRPC and
// REST (grpc-gateway, in-process), the embedded single-page application,
// health and metrics, HTTPS only. It reads Ichor's objects with its own
// identity, writes them only as the signed-in user (impersonation), and never
// writes to a node.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/authn"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/api"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/frontend"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	oidcissuer "github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
	"github.com/maeshinshin/ichor/uiserver/internal/nodes"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
	ichorusers "github.com/maeshinshin/ichor/uiserver/internal/users"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ichor-ui:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		showVersion = flag.Bool("version", false, "Print the version and exit.")
		addr        = flag.String("listen", ":8443", "HTTPS listen address.")
		namespace   = flag.String("namespace", "ichor-system", "Namespace of the TalosCluster and its machines.")
		cluster     = flag.String("cluster", "", "Name of the TalosCluster this ichor-ui serves. Empty serves the only TalosCluster of --namespace (not ready while there is none or more than one).")
		certFile    = flag.String("tls-cert-file", "", "PEM certificate of the operator (ichorUI.tls.secretName), served for names other than the Service's; reloaded when it changes.")
		keyFile     = flag.String("tls-key-file", "", "PEM private key of --tls-cert-file.")
		servingCert = flag.String("serving-cert-file", "", "PEM leaf of the Ichor serving CA (the Secret ichor-ui-tls), served for the Service's names and on --issuer-listen; reloaded when it changes. With neither this nor --tls-cert-file a self-signed certificate is made.")
		servingKey  = flag.String("serving-key-file", "", "PEM private key of --serving-cert-file.")
		metricsAddr = flag.String("metrics-listen", ":8445", "HTTPS address serving only /metrics (with the Ichor leaf when --serving-cert-file is given) to callers with a bearer token the API server allows get on /metrics (the ClusterRole ichor-metrics-reader); empty turns it off. The console's listener never serves metrics.")
		issuerAddr  = flag.String("issuer-listen", ":8444", "HTTPS address serving only the issuer's discovery document and keys, with the Ichor leaf, for the kube-apiserver (through the ClusterIP Service); empty turns it off.")
		issuer      = flag.String("issuer", "https://localhost:8443", "External URL of ichor-ui: the issuer of its tokens.")
		signingKey  = flag.String("signing-key-file", "", "PEM ECDSA P-256 key that signs tokens and seals login forms, shared by the replicas (the Secret ichor-ui-signing-key the controller keeps). Empty makes one in memory: one replica only, and a restart makes the sessions' tokens unverifiable.")
		users       = flag.Bool("ichor-users", false, "Sign in Ichor's own users (IchorUsers): serve the OIDC issuer at --issuer (ichorUI.users.enabled).")
		settingsRO  = flag.Bool("settings-read-only", false, "Show Ichor's runtime settings in the console without letting it change them (UpdateSettings answers FAILED_PRECONDITION).")
		redirects   listFlag
		extraGroups listFlag
	)
	flag.Var(&redirects, "redirect-uri", "A redirect URI of the console's OIDC client beyond <issuer>/auth/callback (repeatable).")
	flag.Var(&extraGroups, "impersonate-group", "A group beyond ichor:viewer, ichor:operator and ichor:admin that may be impersonated (repeatable; never system:).")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		return nil
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	for _, g := range extraGroups {
		if strings.HasPrefix(g, "system:") {
			return fmt.Errorf("--impersonate-group %q: ichor-ui never impersonates a system: group", g)
		}
	}
	policy := identity.Policy{ExtraGroups: extraGroups}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reaching the Kubernetes API: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := ichorv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	clients, err := kube.New(kube.Options{Config: cfg, Scheme: scheme, Namespace: *namespace, Policy: policy})
	if err != nil {
		return err
	}
	key, err := loadSigningKey(*signingKey)
	if err != nil {
		return err
	}
	if *signingKey == "" && (*users || *oidcIssuerURL != "") {
		log.Warn("no --signing-key-file: this replica's tokens and login forms are its own; run one replica")
	}
	tokens := &auth.Tokens{Issuer: *issuer, Key: key, Policy: policy}
	var mount func(chi.Router)
	ext, err := externalProvider(*issuer, policy, log) // --oidc-* flags (oidc.go)
	if err != nil {
		return err
	}
	// One registry for the issuer's sign-ins and the server's requests and streams.
	registry := server.NewRegistry()
	var (
		iss *oidcissuer.Issuer
		// the Users page's password writes: ichor-ui's own client, only with Ichor's users on
		passwords client.Client
	)
	if *users || ext != nil {
		issOpts := oidcissuer.Options{
			Tokens:   tokens,
			Registry: registry,
			Clients: []oidcissuer.Client{
				{ID: auth.ConsoleClientID, RedirectURIs: append([]string{strings.TrimSuffix(*issuer, "/") + "/auth/callback"}, redirects...)},
				// `ichor auth token`: a loopback redirect on the port it listens on.
				// `ichor auth token --headless`: the issuer's own page shows the code to type.
				{ID: auth.CLIClientID, LoopbackPaths: []string{authn.CLICallbackPath},
					RedirectURIs: []string{strings.TrimSuffix(*issuer, "/") + authn.CLICodePath}},
			},
			Log: log,
			// Ichor's settings, read at every token and session: `ichor
			// settings set` or the Settings page take effect without a restart.
			Lifetimes: oidcissuer.SettingsLifetimes(clients.Cache, log),
		}
		if ext != nil {
			issOpts.External = ext
		}
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		// Sessions are IchorUISessions, shared by the replicas: a code or a
		// refresh token is judged on the object as it is now (direct reads,
		// compare-and-swap writes), an access token on the watched copy.
		issOpts.Store = &oidcissuer.KubeStore{Client: direct, Cache: clients.Cache, Namespace: *namespace}
		if *users {
			// The sign-in reads IchorUsers and the one Secret of password hashes
			// directly: the backend may get that Secret, not list or watch Secrets.
			issOpts.Users = &ichorusers.Store{Reader: direct, Namespace: *namespace}
			passwords = direct
		}
		if iss, err = oidcissuer.New(issOpts); err != nil {
			return err
		}
		mount = iss.Mount
	}

	tc, err := tlsSource(tlsFiles{servingCert: *servingCert, servingKey: *servingKey, operatorCert: *certFile, operatorKey: *keyFile}, log)
	if err != nil {
		return err
	}
	getCert, oidcCert := tc.console, tc.oidc
	oidcAddr := *issuerAddr
	switch {
	case oidcAddr == "":
	case mount == nil:
		log.Info("no issuer (neither --ichor-users nor an external provider): nothing to serve on --issuer-listen", "address", oidcAddr)
		oidcAddr = ""
	case oidcCert == nil:
		log.Info("no --serving-cert-file (a local run): nothing the kube-apiserver could verify on --issuer-listen", "address", oidcAddr)
		oidcAddr = ""
	}

	// What runs from the start, while ichor-ui waits for its cluster: every
	// background loop is listed here (and the cluster watch below), none is
	// started elsewhere.
	startLoops(ctx, log, stop, []loop{
		{name: "the cache", run: clients.Cache.Start},
		{name: "the serving certificate's reloader", run: reloadLoop(tc.service)},
		{name: "the operator certificate's reloader", run: reloadLoop(tc.operator)},
		{name: "the external provider's first probe", run: probeLoop(ext)},
		// Sessions end when their user's password changes or the user is disabled.
		{name: "the sign-in sessions' checks", run: sessionsLoop(iss)},
	})

	var restartReason atomic.Pointer[string]
	servedCluster, clusterCheck, err := clusterToServe(ctx, *cluster, clients.Cache, *namespace, *addr, getCert, log, func(reason string) {
		restartReason.Store(&reason)
		stop()
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for a TalosCluster
		}
		return err
	}
	*cluster = servedCluster
	// Its own node reads: TalosCredentialRequests under ichor-ui's own identity.
	own, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	deps := api.Deps{Clients: clients, ClusterName: *cluster}
	machines := &api.MachineService{Deps: deps}
	nodeSvc := &nodes.Service{Clients: clients, ClusterName: *cluster,
		Credentials: &nodes.Credentials{Client: own, Namespace: *namespace, ClusterName: *cluster}}
	srv, err := server.New(server.Options{
		Addr: *addr, GetCertificate: getCert, OIDCAddr: oidcAddr, MetricsAddr: *metricsAddr, OIDCGetCertificate: oidcCert,
		// /metrics only for callers the API server authenticates and allows get on /metrics.
		Registry: registry, MetricsAuth: server.KubeMetricsAuth(cfg, log),
		// The UI API, one service each.
		Cluster:    &api.ClusterService{Deps: deps},
		Machines:   machines,
		Encodings:  machines,
		Nodes:      nodeSvc,
		Operations: &api.OperationService{Deps: deps},
		Backups:    &api.BackupService{Deps: deps},
		Settings:   &api.SettingsService{Deps: deps, ReadOnly: *settingsRO},
		Users:      usersService(deps, passwords),
		Reclaims:   &api.ReclaimService{Deps: deps, Credentials: own}, // the foreign talosconfig Secrets of "Reset and add"
		Patches:    &api.PatchService{Deps: deps},
		Health:     &nodes.Health{Nodes: nodeSvc, APIServer: cfg},
		// The admin-gated downloads: credentials requested as the user, Events and waits as ichor-ui.
		Downloads:     &nodes.Downloads{Nodes: nodeSvc, Backend: own},
		Authenticator: tokens,
		Ready: func() bool {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			return clients.Cache.WaitForCacheSync(sctx) && clusterCheck.Ready()
		},
		Frontend: frontend.FS(), Log: log, Mount: mount,
	})
	if err != nil {
		return err
	}
	machines.Stopping = srv.Stopping()
	nodeSvc.Stopping = srv.Stopping()

	// What serves the cluster: the watch that keeps it the one to serve, and
	// the server (its listeners and services are in server.Options above).
	startLoops(ctx, log, stop, []loop{
		{name: "the served cluster's watch", run: forever(clusterCheck.run)},
	})
	log.Info("ichor-ui serving", "address", *addr, "issuerAddress", oidcAddr, "cluster", *cluster, "namespace", *namespace, "version", version.Get())
	if err := srv.Run(ctx); err != nil {
		return err
	}
	if r := restartReason.Load(); r != nil {
		return errors.New(*r)
	}
	return nil
}

// sessionsLoop is the issuer's session checks; nil without an issuer.
func sessionsLoop(iss *oidcissuer.Issuer) func(ctx context.Context) error {
	if iss == nil {
		return nil
	}
	return forever(iss.WatchSessions)
}

func loadSigningKey(file string) (*auth.Key, error) {
	if file == "" {
		return auth.NewKey()
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--signing-key-file: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("--signing-key-file %s holds no PEM block", file)
	}
	k, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		pk, err2 := x509.ParsePKCS8PrivateKey(block.Bytes)
		ek, ok := pk.(*ecdsa.PrivateKey)
		if err2 != nil || !ok {
			return nil, fmt.Errorf("--signing-key-file %s is not an ECDSA P-256 key (SEC 1 or PKCS #8)", file)
		}
		k = ek
	}
	return auth.KeyFrom(k)
}

// usersService is the Users page's API while Ichor's own users are on (a
// password writer is there); nil otherwise, so the API answers Unimplemented.
func usersService(deps api.Deps, passwords client.Client) ichorv1.UserServiceServer {
	if passwords == nil {
		return nil
	}

	return &api.UserService{Deps: deps, Passwords: passwords}
}
