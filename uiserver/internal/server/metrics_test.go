package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
)

// uiDocumented reads the README's metrics table: the metrics ichor-ui serves.
func uiDocumented(t *testing.T) []string {
	t.Helper()
	root, err := testenv.RepoRoot()
	testenv.Must(t, err)
	f, err := os.Open(filepath.Join(root, "README.md"))
	testenv.Must(t, err)
	defer f.Close() //nolint:errcheck // read-only
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) > 3 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`ichor_") && strings.TrimSpace(cells[2]) == "ichor-ui" {
			out = append(out, strings.Trim(strings.TrimSpace(cells[1]), "`"))
		}
	}
	if len(out) == 0 {
		t.Fatal("the README's metrics table lists nothing from ichor-ui")
	}
	return out
}

// TestMetricsExported runs an ichor-ui server as its main builds it (one
// registry for the issuer and the server, /metrics behind the API server's
// authentication and authorization, asked with ichor-ui's own identity and
// RBAC) and scrapes its metrics listener: without a token 401, with a
// ServiceAccount that may not get /metrics 403, with the ClusterRole
// ichor-metrics-reader every metric the README documents for ichor-ui is
// there, an open stream among them.
func TestMetricsExported(t *testing.T) {
	ctx := context.Background()
	backendCfg, err := suite.Env.UserConfig(backendUser, "system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated")
	testenv.Must(t, err)

	reg := server.NewRegistry()
	// Its own Tokens: issuer.New points Tokens.Revoked at its sessions, and
	// the suite's issuer must keep answering for the shared one.
	tk := &auth.Tokens{Issuer: tokens.Issuer, Key: tokens.Key, Policy: tokens.Policy}
	iss, err := issuer.New(issuer.Options{Tokens: tk, Users: userStore, Registry: reg,
		Clients: []issuer.Client{{ID: oidcClientID, RedirectURIs: []string{oidcRedirect}}}})
	testenv.Must(t, err)
	opts := serverOpts
	opts.Registry, opts.Mount, opts.Authenticator = reg, iss.Mount, tk
	opts.MetricsAuth = server.KubeMetricsAuth(backendCfg, slog.New(slog.DiscardHandler))
	srv, err := server.New(opts)
	testenv.Must(t, err)

	lc := &net.ListenConfig{}
	console, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	metricsLn, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ServeAll(sctx, server.Listeners{Console: console, Metrics: metricsLn}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("the server stopped with: %v", err)
		}
	})

	scrape := func(tok string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsLn.Addr().String()+"/metrics", nil)
		testenv.Must(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := httpClient().Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close() //nolint:errcheck // read to the end
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := scrape(""); code != http.StatusUnauthorized {
		t.Fatalf("a scrape without a token: %d %s, want 401", code, body)
	}
	// A console token is not a Kubernetes credential. The API server's
	// TokenReview reports an error for a token no authenticator knows, which
	// controller-runtime's filter answers with 500 (filters.go): refused all
	// the same, with no metric in the answer.
	if code, body := scrape(token(t, "ichor:metrics-admin", "ichor:admin")); code == http.StatusOK || strings.Contains(body, "ichor_ui_") {
		t.Fatalf("a scrape with a console token: %d, want a refusal", code)
	}

	cs, err := kubernetes.NewForConfig(suite.Env.Config)
	testenv.Must(t, err)
	testenv.Must(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "ui-scraper"}}))
	tr, err := cs.CoreV1().ServiceAccounts(testNS).CreateToken(ctx, "ui-scraper", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	testenv.Must(t, err)
	sa := tr.Status.Token
	if code, body := scrape(sa); code != http.StatusForbidden {
		t.Fatalf("a scrape by a ServiceAccount without get on /metrics: %d %s, want 403", code, body)
	}
	// ichor-metrics-reader is installed with the rest of kustomize/base/rbac.
	testenv.Must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "ui-scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: testNS, Name: "ui-scraper"}},
	}))

	// A request, then a stream held open while the scrape runs.
	if resp := do(t, httpClient(), http.MethodGet, "https://"+console.Addr().String()+"/healthz", nil); resp.status != http.StatusOK {
		t.Fatalf("the console: %d", resp.status)
	}
	conn, err := grpc.NewClient(console.Addr().String(),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(bearer(token(t, "ichor:metrics-viewer", "ichor:viewer"))))
	testenv.Must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	stream, err := ichorv1.NewMachineServiceClient(conn).WatchMachines(wctx, &ichorv1.WatchMachinesRequest{})
	testenv.Must(t, err)
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("the watch: %v", err)
	}

	want := uiDocumented(t)
	var body string
	// The authorizer caches the denial above for 30 s.
	testenv.EventuallyOK(t, 2*time.Minute, "every documented ichor-ui metric in the scrape", func() (bool, string) {
		code, b := scrape(sa)
		if code != http.StatusOK {
			return false, fmt.Sprintf("status %d: %s", code, b)
		}
		body = b
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(b))
		if err != nil {
			return false, err.Error()
		}
		var missing []string
		for _, name := range want {
			if fams[name] == nil {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, "missing: " + strings.Join(missing, ", ")
	})
	for _, line := range []string{
		`ichor_ui_active_streams{method="/ichor.v1.MachineService/WatchMachines"} 1`,
		`ichor_ui_sign_ins_total{method="password",outcome="success"} 0`,
		`ichor_ui_http_requests_total{code="200",method="GET",route="/healthz"} 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("the scrape lacks %s", line)
		}
	}

	// The stream's end is counted down.
	wcancel()
	testenv.EventuallyOK(t, testenv.WaitTimeout, "the closed stream counted down", func() (bool, string) {
		_, b := scrape(sa)
		return strings.Contains(b, `ichor_ui_active_streams{method="/ichor.v1.MachineService/WatchMachines"} 0`+"\n"), "not yet"
	})
}
