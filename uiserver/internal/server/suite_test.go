package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
	"github.com/maeshinshin/ichor/uiserver/internal/api"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/certs"
	"github.com/maeshinshin/ichor/uiserver/internal/frontend"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
	"github.com/maeshinshin/ichor/uiserver/internal/nodes"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

const (
	testNS      = "ichor-system"
	testCluster = "prod"
	// backendUser is ichor-ui's ServiceAccount: it may read Ichor's objects
	// and impersonate, and nothing else.
	backendUser = "system:serviceaccount:ichor-system:ichor-ui"
	// sessionCheckInterval is how often the issuer compares sessions with
	// their users' passwords and disabled flags.
	sessionCheckInterval = 300 * time.Millisecond
)

var (
	// userStore checks the suite's sign-ins (its hash slots are filled by a test).
	userStore *users.Store
	// serverOpts are the suite server's options, for tests that start a server of their own.
	serverOpts server.Options
	suite      *testenv.Suite
	admin      client.Client
	tokens     *auth.Tokens
	baseURL    string
	pool       *x509.CertPool
	logBuf     = &syncBuffer{}
	// backendCfg is ichor-ui's own identity (its ServiceAccount).
	backendCfg *restclient.Config
)

// syncBuffer is the access log, kept for the secret checks.
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

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, setup))
}

func setup(ctx context.Context, s *testenv.Suite) (func(), error) {
	suite = s
	admin = s.Env.Client
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}); err != nil {
		return nil, err
	}
	// The built-in user roles and ichor-ui's own (ui.yaml), as installed;
	// the controller's are there too, and no test uses them.
	if err := s.Env.ApplyDir(ctx, "kustomize/base/rbac"); err != nil {
		return nil, err
	}
	// The users ichor-ui may impersonate are the controller's to list
	// (ClusterRole ichor-ui-impersonate-users, kept by the controller's
	// impersonation reconciler and tested there); these tests sign in as many
	// made-up users with no IchorUser, so their names are granted here as
	// the controller would grant them.
	if err := admin.Create(ctx, testImpersonationRole()); err != nil {
		return nil, err
	}
	if err := admin.Create(ctx, testImpersonationBinding()); err != nil {
		return nil, err
	}
	if err := admin.Create(ctx, testClusterObject()); err != nil {
		return nil, err
	}

	var err error
	backendCfg, err = s.Env.UserConfig(backendUser, "system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated")
	if err != nil {
		return nil, err
	}
	policy := identity.Policy{}
	clients, err := kube.New(kube.Options{Config: backendCfg, Scheme: s.Scheme, Namespace: testNS, Policy: policy})
	if err != nil {
		return nil, err
	}
	go func() { _ = clients.Cache.Start(ctx) }()
	if !clients.Cache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache did not sync")
	}
	key, err := auth.NewKey()
	if err != nil {
		return nil, err
	}
	tokens = &auth.Tokens{Issuer: "https://ichor-ui.test", Key: key, Policy: policy}
	// The sign-in reads IchorUsers and the credentials Secret directly (no
	// cache: the backend may get that one Secret, not list Secrets).
	direct, err := client.New(backendCfg, client.Options{Scheme: s.Scheme})
	if err != nil {
		return nil, err
	}
	if err := setupNodes(ctx, s, clients, direct); err != nil {
		if world != nil {
			world.Close()
		}
		return nil, err
	}
	userStore = &users.Store{Reader: direct, Namespace: testNS, Slots: make(chan struct{}, users.DefaultHashSlots)}
	oidcIssuer, err := issuer.New(issuer.Options{
		Tokens: tokens, Users: userStore,
		Clients:              []issuer.Client{{ID: oidcClientID, RedirectURIs: []string{oidcRedirect}}},
		SessionCheckInterval: sessionCheckInterval,
		// Ichor's settings read at every token, as ichor-ui reads them (there from its cache).
		Lifetimes: issuer.SettingsLifetimes(direct, nil),
		// A first back-off long enough that a busy machine's next request
		// still meets it (the default is 1 s).
		Limits: issuer.Limits{Backoff: 5 * time.Second},
		// The sessions are IchorUISessions, as in ichor-ui (written with the
		// backend's own Role ichor-ui-sessions).
		Store: &issuer.KubeStore{Client: direct, Cache: clients.Cache, Namespace: testNS},
	})
	if err != nil {
		return nil, err
	}
	go oidcIssuer.WatchSessions(ctx)
	cert, leaf, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		return nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(leaf)

	deps := api.Deps{Clients: clients, ClusterName: testCluster}
	machines := &api.MachineService{Deps: deps}
	serverOpts = server.Options{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
		Cluster:        &api.ClusterService{Deps: deps}, Machines: machines, Encodings: machines, Nodes: nodeSvc,
		Operations: &api.OperationService{Deps: deps}, Settings: &api.SettingsService{Deps: deps},
		Reclaims: &api.ReclaimService{Deps: deps, Credentials: direct},
		Patches:  &api.PatchService{Deps: deps}, Backups: &api.BackupService{Deps: deps},
		Users: &api.UserService{Deps: deps, Passwords: direct},
		// The kube-apiservers are asked at the envtest API server's port: a
		// control plane at 127.0.0.1 is that one, the emulated node none.
		Health:        &nodes.Health{Nodes: nodeSvc, APIServer: backendCfg, APIServerPort: apiServerPort(backendCfg.Host)},
		Downloads:     &nodes.Downloads{Nodes: nodeSvc, Backend: direct},
		Authenticator: tokens, Frontend: frontend.FS(),
		Ready: func() bool { return true },
		Mount: oidcIssuer.Mount, TokenCacheTTL: tokenCacheTTL,
		Log: slog.New(slog.NewJSONHandler(io.MultiWriter(logBuf, logSink()), nil)),
	}
	srv, err := server.New(serverOpts)
	if err != nil {
		return nil, err
	}
	machines.Stopping = srv.Stopping()
	nodeSvc.Stopping = srv.Stopping()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	baseURL = "https://" + ln.Addr().String()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(sctx, ln) }()
	return func() { cancel(); <-done; world.Close() }, nil
}

// apiServerPort is the port of an API server URL.
func apiServerPort(host string) int {
	u, err := url.Parse(host)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func testImpersonationRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-ichor-ui-impersonate-test-users"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"users"}, Verbs: []string{"impersonate"}}},
	}
}

func testImpersonationBinding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-ichor-ui-impersonate-test-users"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-ichor-ui-impersonate-test-users"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: testNS, Name: "ichor-ui"}},
	}
}

func logSink() io.Writer {
	if os.Getenv(testenv.LogEnv) != "" {
		return os.Stderr
	}
	return io.Discard
}

func testClusterObject() *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: testCluster, Namespace: testNS},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:         ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.5.0.10"},
			SecretsBundleRef: ichorv1alpha1.SecretReference{Name: "prod-secrets"},
			ControlPlane:     ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: ptr.To(false)},
			CNI:              ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "vxlan", KubeProxy: ichorv1alpha1.KubeProxyEnabled},
			Network:          ichorv1alpha1.ClusterNetwork{PodSubnets: []string{"10.244.0.0/16"}, ServiceSubnets: []string{"10.96.0.0/12"}},
		},
	}
}
