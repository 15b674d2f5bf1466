package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/api"
	"github.com/maeshinshin/ichor/uiserver/internal/auth"
	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
	"github.com/maeshinshin/ichor/uiserver/internal/users"
)

const twinPassword = "twin-password-1"

// startReplica runs a second ichor-ui replica beside the suite's: its own
// cache, issuer, token checks and listener, sharing only what replicas
// share, the API server (IchorUISessions, under ichor-ui's own identity and
// Role) and the signing key. It returns its base URL and a stop that
// terminates it as SIGTERM does.
func startReplica(t *testing.T) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	clients, err := kube.New(kube.Options{Config: backendCfg, Scheme: suite.Scheme, Namespace: testNS, Policy: tokens.Policy})
	if err != nil {
		t.Fatal(err)
	}
	cacheDone := make(chan struct{})
	go func() { defer close(cacheDone); _ = clients.Cache.Start(ctx) }()
	if !clients.Cache.WaitForCacheSync(ctx) {
		t.Fatal("the second replica's cache did not sync")
	}
	direct, err := client.New(backendCfg, client.Options{Scheme: suite.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	toks := &auth.Tokens{Issuer: tokens.Issuer, Key: tokens.Key, Policy: tokens.Policy}
	iss, err := issuer.New(issuer.Options{
		Tokens: toks, Users: &users.Store{Reader: direct, Namespace: testNS, Slots: make(chan struct{}, users.DefaultHashSlots)},
		Clients:   []issuer.Client{{ID: oidcClientID, RedirectURIs: []string{oidcRedirect}}},
		Lifetimes: issuer.SettingsLifetimes(direct, nil),
		Store:     &issuer.KubeStore{Client: direct, Cache: clients.Cache, Namespace: testNS},
	})
	if err != nil {
		t.Fatal(err)
	}
	opts := serverOpts
	opts.Authenticator, opts.Mount = toks, iss.Mount
	opts.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	ms := &api.MachineService{Deps: api.Deps{Clients: clients, ClusterName: testCluster}}
	opts.Machines, opts.Encodings = ms, ms
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ms.Stopping = srv.Stopping()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	srvCtx, stop := context.WithCancel(ctx)
	go func() { defer close(served); _ = srv.Serve(srvCtx, ln) }()
	t.Cleanup(func() { cancel(); <-served; <-cacheDone })
	return "https://" + ln.Addr().String(), func() { stop(); <-served }
}

// apiStatusAt lists machines at the replica serving base with the access token.
func apiStatusAt(t *testing.T, base, access string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/api/v1/machines", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+access)
	resp, err := httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// signInAt signs ichor:twin in: the login form opened at one replica,
// posted to another, the code exchanged at a third (any of the two).
func signInAt(t *testing.T, formAt, loginBase, exchangeAt string) *oidc.AccessTokenResponse {
	t.Helper()
	c := browser(t)
	verifier, challenge := pkce()
	form := authorizeAt(t, c, formAt, challenge)
	code := codeFrom(t, loginAt(t, c, loginBase, form, "twin", twinPassword))
	status, tok, e := tokenCallAt(t, c, exchangeAt, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {oidcRedirect}, "code_verifier": {verifier}})
	if status != http.StatusOK {
		t.Fatalf("code exchange at %s: %d %v", exchangeAt, status, e)
	}
	return tok
}

func refreshAt(t *testing.T, base, rt string) (int, *oidc.AccessTokenResponse, map[string]any) {
	t.Helper()
	return tokenCallAt(t, httpClient(), base, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}})
}

// eventuallyRefusedAt waits until the replica serving base refuses the
// access token: its watch of the sessions learns a revocation made on the
// other replica, and its verification cache forgets the token.
func eventuallyRefusedAt(t *testing.T, base, access string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for apiStatusAt(t, base, access) != http.StatusUnauthorized {
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts the access token of a session revoked on the other replica", base)
		}
		time.Sleep(tokenCacheTTL / 2)
	}
}

// TestTwoReplicaSessions: two ichor-ui replicas share every step of a
// sign-in and every session (issue #26): a form opened on one is posted to
// the other, a session begun on A is refreshed on B and its tokens are good
// on both, a refresh token or code used on one is used on the other (reuse
// revokes the session everywhere), a revocation on A holds on B, the same
// refresh token presented to both at once is one use and one reuse,
// deleting a session's object signs it out on both, and a replica that
// terminates ends its streams asking the clients to reconnect,
// which they do at the other with the same sign-in.
func TestTwoReplicaSessions(t *testing.T) {
	newUser(t, "twin", twinPassword, ichorv1alpha1.UserRoleViewer)
	a := baseURL
	b, stopB := startReplica(t)

	t.Run("refresh on B of a session begun on A", func(t *testing.T) {
		tok := signInAt(t, a, b, a) // the form opened on A is posted to B
		if code := apiStatusAt(t, b, tok.AccessToken); code != http.StatusOK {
			t.Fatalf("B refused A's access token: %d", code)
		}
		status, second, e := refreshAt(t, b, tok.RefreshToken)
		if status != http.StatusOK {
			t.Fatalf("refresh on B of A's session: %d %v", status, e)
		}
		if code := apiStatusAt(t, a, second.AccessToken); code != http.StatusOK {
			t.Fatalf("A refused the access token B minted: %d", code)
		}
		// A's first refresh token, already used on B, presented to A: reuse.
		status, _, e = refreshAt(t, a, tok.RefreshToken)
		if status != http.StatusBadRequest || !strings.Contains(e["error_description"].(string), "already used") {
			t.Fatalf("A's used refresh token at A: %d %v, want invalid_grant saying it was already used", status, e)
		}
		if status, _, _ := refreshAt(t, b, second.RefreshToken); status != http.StatusBadRequest {
			t.Fatalf("B still refreshes a session revoked on A: %d", status)
		}
		eventuallyRefusedAt(t, b, second.AccessToken)
		eventuallyRefusedAt(t, a, second.AccessToken)
	})

	t.Run("revocation on A holds on B", func(t *testing.T) {
		tok := signInAt(t, b, a, b)
		if code := apiStatusAt(t, b, tok.AccessToken); code != http.StatusOK {
			t.Fatalf("B refused its own access token: %d", code)
		}
		resp := do(t, httpClient(), http.MethodPost, a+"/oidc/revoke", url.Values{"token": {tok.RefreshToken}, "client_id": {oidcClientID}})
		if resp.status != http.StatusOK {
			t.Fatalf("revoke at A: %d %s", resp.status, resp.body)
		}
		if status, _, e := refreshAt(t, b, tok.RefreshToken); status != http.StatusBadRequest || e["error"] != "invalid_grant" {
			t.Fatalf("B refreshed a session revoked on A: %d %v", status, e)
		}
		eventuallyRefusedAt(t, b, tok.AccessToken)
	})

	t.Run("a code is exchanged once across replicas", func(t *testing.T) {
		c := browser(t)
		verifier, challenge := pkce()
		code := codeFrom(t, loginAt(t, c, a, authorizeAt(t, c, a, challenge), "twin", twinPassword))
		exchangeAt := func(base string) (int, *oidc.AccessTokenResponse, map[string]any) {
			return tokenCallAt(t, c, base, url.Values{"grant_type": {"authorization_code"}, "code": {code},
				"redirect_uri": {oidcRedirect}, "code_verifier": {verifier}})
		}
		status, tok, e := exchangeAt(a)
		if status != http.StatusOK {
			t.Fatalf("exchange at A: %d %v", status, e)
		}
		status, _, e = exchangeAt(b)
		if status != http.StatusBadRequest || !strings.Contains(e["error_description"].(string), "already used") {
			t.Fatalf("the code again at B: %d %v, want invalid_grant saying it was already used", status, e)
		}
		if status, _, _ := refreshAt(t, a, tok.RefreshToken); status != http.StatusBadRequest {
			t.Fatalf("the session of a code presented twice still refreshes at A: %d", status)
		}
	})

	t.Run("one refresh token at both at once", func(t *testing.T) {
		tok := signInAt(t, a, a, a)
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		answers := make([]*oidc.AccessTokenResponse, 2)
		for n, base := range []string{a, b} {
			wg.Go(func() { statuses[n], answers[n], _ = refreshAt(t, base, tok.RefreshToken) })
		}
		wg.Wait()
		ok := 0
		for n, s := range statuses {
			if s == http.StatusOK {
				ok++
				// The winner's new token belongs to a session the loser revoked.
				if status, _, _ := refreshAt(t, a, answers[n].RefreshToken); status != http.StatusBadRequest {
					t.Errorf("the session survived its refresh token used twice at once: %d", status)
				}
			} else if s != http.StatusBadRequest {
				t.Errorf("a refresh answered %d", s)
			}
		}
		if ok != 1 {
			t.Fatalf("the same refresh token at two replicas at once: %v, want one 200 and one 400", statuses)
		}
	})

	t.Run("deleting a session signs it out", func(t *testing.T) {
		tok := signInAt(t, a, a, b)
		claims, err := tokens.Verify(tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		s := &ichorv1alpha1.IchorUISession{}
		s.Name, s.Namespace = claims.Session, testNS
		if err := admin.Delete(context.Background(), s); err != nil {
			t.Fatalf("deleting IchorUISession %s: %v", claims.Session, err)
		}
		if status, _, e := refreshAt(t, b, tok.RefreshToken); status != http.StatusBadRequest || e["error"] != "invalid_grant" {
			t.Fatalf("the refresh token of a deleted session: %d %v", status, e)
		}
		eventuallyRefusedAt(t, a, tok.AccessToken)
		eventuallyRefusedAt(t, b, tok.AccessToken)
	})

	t.Run("a replica that stops sends its streams to the other", func(t *testing.T) {
		tok := signInAt(t, a, b, a)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := grpc.NewClient(strings.TrimPrefix(b, "https://"),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
			grpc.WithPerRPCCredentials(bearer(tok.AccessToken)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		stream, err := ichorv1.NewMachineServiceClient(conn).WatchMachines(ctx, &ichorv1.WatchMachinesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var resume string
		for resume == "" {
			ev, err := stream.Recv()
			if err != nil {
				t.Fatalf("watching at B: %v", err)
			}
			if ev.GetType() == ichorv1.WatchMachinesResponse_EVENT_TYPE_SYNCED {
				resume = ev.GetResumeToken()
			}
		}
		stopB() // SIGTERM
		for {
			_, err := stream.Recv()
			if err == nil {
				continue
			}
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "reconnect") {
				t.Fatalf("B's stream ended with %v, want UNAVAILABLE asking the client to reconnect", err)
			}
			break
		}
		// While no replica serves it a machine appears; the client reconnects
		// to A with the same sign-in, resumes from B's token and sees it.
		createMachine(t, "twin-m1", ichorv1alpha1.ApprovalPending, "")
		removeWhenDone(t, "twin-m1")
		again, err := machines(t, tok.AccessToken).WatchMachines(ctx, &ichorv1.WatchMachinesRequest{ResumeToken: resume})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := again.Recv()
			if err != nil {
				t.Fatalf("resuming at A with B's resume token and the same sign-in: %v", err)
			}
			if ev.GetMachine().GetName() == "twin-m1" {
				break
			}
		}
	})

	t.Run("the sessions are objects a person can list", func(t *testing.T) {
		l := &ichorv1alpha1.IchorUISessionList{}
		if err := admin.List(context.Background(), l, client.InNamespace(testNS)); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range l.Items {
			if s.Spec.Username == "ichor:twin" {
				found = true
				if s.Spec.RefreshHash != "" && len(s.Spec.RefreshHash) != 64 {
					t.Errorf("session %s keeps %q, not a SHA-256 hash", s.Name, s.Spec.RefreshHash)
				}
			}
		}
		if !found {
			t.Fatal("no IchorUISession of ichor:twin")
		}
	})
}
