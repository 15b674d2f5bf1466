// Command ichor-ui is Ichor's web console backend: the UI API over gRPC and
// REST (grpc-gateway, in-process), the embedded single-page application,
// health and metrics, HTTPS only. It reads Ichor's objects with its own
// identity, writes them only as the signed-in user (impersonation), and never
// writes to a node.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	"github.com/maeshinshin/ichor/uiserver/internal/api"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/certs"
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
		cluster     = flag.String("cluster", "", "Name of the TalosCluster this ichor-ui serves (required).")
		certFile    = flag.String("tls-cert-file", "", "PEM certificate (the operator's, ichorUI.tls.secretName); reloaded when it changes. Empty makes a self-signed one.")
		keyFile     = flag.String("tls-key-file", "", "PEM private key of --tls-cert-file.")
		issuer      = flag.String("issuer", "https://localhost:8443", "External URL of ichor-ui: the issuer of its tokens.")
		signingKey  = flag.String("signing-key-file", "", "PEM ECDSA P-256 key that signs tokens (shared by the replicas). Empty makes one in memory (one replica only).")
		users       = flag.Bool("ichor-users", false, "Sign in Ichor's own users (IchorUsers): serve the OIDC issuer at --issuer (ichorUI.users.enabled).")
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
	if *cluster == "" {
		return errors.New("--cluster is required: the name of the TalosCluster to serve")
	}
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
	go func() {
		if err := clients.Cache.Start(ctx); err != nil {
			log.Error("the cache stopped", "error", err.Error())
			stop()
		}
	}()

	key, err := loadSigningKey(*signingKey)
	if err != nil {
		return err
	}
	tokens := &auth.Tokens{Issuer: *issuer, Key: key, Policy: policy}
	var mount func(chi.Router)
	if *users {
		// The sign-in reads IchorUsers and the one Secret of password hashes
		// directly: the backend may get that Secret, not list or watch Secrets.
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		iss, err := oidcissuer.New(oidcissuer.Options{
			Tokens: tokens, Users: &ichorusers.Store{Reader: direct, Namespace: *namespace},
			Clients: []oidcissuer.Client{{ID: "ichor-ui", RedirectURIs: append([]string{strings.TrimSuffix(*issuer, "/") + "/auth/callback"}, redirects...)}},
			Log:     log,
		})
		if err != nil {
			return err
		}
		mount = iss.Mount
	}

	getCert, err := tlsSource(ctx, *certFile, *keyFile, log)
	if err != nil {
		return err
	}
	svc := &api.Server{Clients: clients, ClusterName: *cluster}
	// Its own node reads: TalosCredentialRequests under ichor-ui's own identity.
	own, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	nodeSvc := &nodes.Service{Clients: clients, ClusterName: *cluster,
		Credentials: &nodes.Credentials{Client: own, Namespace: *namespace, ClusterName: *cluster}}
	srv, err := server.New(server.Options{
		Addr: *addr, GetCertificate: getCert, Services: svc, Encodings: svc, Nodes: nodeSvc, Authenticator: tokens,
		Ready: func() bool {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			return clients.Cache.WaitForCacheSync(sctx)
		},
		Frontend: frontend.FS(), Log: log, Mount: mount,
	})
	if err != nil {
		return err
	}
	svc.Stopping = srv.Stopping()
	nodeSvc.Stopping = srv.Stopping()
	log.Info("ichor-ui serving", "address", *addr, "cluster", *cluster, "namespace", *namespace, "version", version.Get())
	return srv.Run(ctx)
}

func tlsSource(ctx context.Context, certFile, keyFile string, log *slog.Logger) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if certFile == "" && keyFile == "" {
		cert, _, err := certs.SelfSigned([]string{"localhost", "127.0.0.1", "::1"}, 365*24*time.Hour)
		if err != nil {
			return nil, err
		}
		log.Warn("no --tls-cert-file: serving a self-signed certificate")
		return func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil }, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	r, err := certs.NewReloader(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	go r.Run(ctx, 10*time.Second)
	return r.GetCertificate, nil
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
