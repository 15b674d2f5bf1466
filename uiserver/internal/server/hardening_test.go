package server_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
)

// browserFrom is a browser whose connections come from the loopback
// address ip (127.0.0.0/8 is all on lo), so per-address limits can be
// tried without touching the other tests' 127.0.0.1.
func browserFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{
		Timeout: 30 * time.Second, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			DialContext:     d.DialContext,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		},
	}
}

// loginAttempt opens a form and posts one password; the form is new so the
// per-form failure bound never decides.
func loginAttempt(t *testing.T, c *http.Client, user, password string) reply {
	t.Helper()
	_, challenge := pkce()
	return login(t, c, authorize(t, c, challenge), user, password)
}

func isRateLimited(t *testing.T, r reply) bool {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		return false
	}
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("a 429 without a Retry-After in seconds: %q", r.header.Get("Retry-After"))
	}
	if !strings.Contains(r.body, "try again") {
		t.Fatalf("the 429 page does not say what to do: %s", r.body)
	}
	return true
}

// TestSignInRateLimitPerUserName: after five wrong passwords a user name
// waits (from any address, even with the right password); another user from
// the same address signs in; after the back-off the user signs in.
func TestSignInRateLimitPerUserName(t *testing.T) {
	newUser(t, "rlu", "rlu-password-1", ichorv1alpha1.UserRoleViewer)
	newUser(t, "rlv", "rlv-password-1", ichorv1alpha1.UserRoleViewer)
	a, b := browserFrom(t, "127.0.0.21"), browserFrom(t, "127.0.0.22")
	for n := range 5 {
		if r := loginAttempt(t, a, "rlu", "wrong-password"); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", n+1, r.status)
		}
	}
	if r := loginAttempt(t, a, "rlu", "rlu-password-1"); !isRateLimited(t, r) {
		t.Fatalf("a sixth attempt right after five wrong passwords: %d, want 429", r.status)
	}
	if r := loginAttempt(t, b, "rlu", "rlu-password-1"); !isRateLimited(t, r) {
		t.Fatalf("the same user name from another address: %d, want 429", r.status)
	}
	// The neighbour: another user from the same address is not held up.
	codeFrom(t, loginAttempt(t, a, "rlv", "rlv-password-1"))
	// The back-off ends: the right password works again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := loginAttempt(t, a, "rlu", "rlu-password-1")
		if r.status == http.StatusFound {
			break
		}
		if !isRateLimited(t, r) || time.Now().After(deadline) {
			t.Fatalf("after the back-off: %d %s", r.status, r.body)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestSignInRateLimitPerAddress: twenty wrong passwords from one address,
// each for another name, hold that address up; the same user signs in from
// another address.
func TestSignInRateLimitPerAddress(t *testing.T) {
	newUser(t, "rla", "rla-password-1", ichorv1alpha1.UserRoleViewer)
	c, d := browserFrom(t, "127.0.0.23"), browserFrom(t, "127.0.0.24")
	for n := range 20 {
		if r := loginAttempt(t, c, fmt.Sprintf("guess-%d", n), "wrong-password"); r.status != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d, want 401", n+1, r.status)
		}
	}
	if r := loginAttempt(t, c, "rla", "rla-password-1"); !isRateLimited(t, r) {
		t.Fatalf("the address after twenty failures: %d, want 429", r.status)
	}
	codeFrom(t, loginAttempt(t, d, "rla", "rla-password-1"))
}

// TestSignInRateLimitBusyHashSlotsAnswer429Fast: with every password-hash
// slot taken a sign-in is refused at once with 429, not queued; with a free
// slot the same sign-in works.
func TestSignInRateLimitBusyHashSlotsAnswer429Fast(t *testing.T) {
	newUser(t, "busy", "busy-password-1", ichorv1alpha1.UserRoleViewer)
	c := browserFrom(t, "127.0.0.26")
	_, challenge := pkce()
	req := authorize(t, c, challenge)
	// The test takes every slot, as running hashes would.
	for range cap(userStore.Slots) {
		userStore.Slots <- struct{}{}
	}
	start := time.Now()
	r := login(t, c, req, "busy", "busy-password-1")
	took := time.Since(start)
	for range cap(userStore.Slots) {
		<-userStore.Slots
	}
	if !isRateLimited(t, r) || !strings.Contains(r.body, "too many sign-ins") {
		t.Fatalf("busy slots: %d %s, want 429 saying the server is busy", r.status, r.body)
	}
	if took > 5*time.Second {
		t.Fatalf("the 429 took %v: the sign-in waited for a slot", took)
	}
	// Not a failure: the same form signs in once a slot is free.
	codeFrom(t, login(t, c, req, "busy", "busy-password-1"))
}

// TestSignInFormsKeepNothingOnTheServer: a login form is the sign-in's
// whole state, sealed: any number of them cost the server nothing, one
// edited by the browser is refused, and one answered with another browser's
// cookie is refused.
func TestSignInFormsKeepNothingOnTheServer(t *testing.T) {
	newUser(t, "sealy", "sealy-password-1", ichorv1alpha1.UserRoleViewer)
	e, f := browserFrom(t, "127.0.0.27"), browserFrom(t, "127.0.0.28")
	before := sessionCount(t)
	var form string
	for range 60 {
		_, challenge := pkce()
		form = authorize(t, e, challenge)
	}
	if n := sessionCount(t); n != before {
		t.Fatalf("opening login forms stored %d sessions", n-before)
	}
	edited := []byte(form)
	edited[len(edited)/2] ^= 1
	if r := login(t, e, string(edited), "sealy", "sealy-password-1"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "start it again") {
		t.Fatalf("an edited form: %d %s, want 400 asking to start again", r.status, r.body)
	}
	// f has a login cookie of its own, not the one this form was opened with.
	_, challenge := pkce()
	authorize(t, f, challenge)
	if r := login(t, f, form, "sealy", "sealy-password-1"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "not sent by this browser") {
		t.Fatalf("another browser's form: %d %s, want 400", r.status, r.body)
	}
	codeFrom(t, login(t, e, form, "sealy", "sealy-password-1"))
}

// sessionCount is the number of IchorUISessions.
func sessionCount(t *testing.T) int {
	t.Helper()
	l := &ichorv1alpha1.IchorUISessionList{}
	if err := admin.List(context.Background(), l, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// TestBodyLimitRefusesOversizedAPIRequests: a REST body over 256 KiB is
// refused with 413 before it is decoded (with or without a Content-Length),
// changing nothing; one under the limit is decoded and answered.
func TestBodyLimitRefusesOversizedAPIRequests(t *testing.T) {
	// The address is not one: a body that reaches the handler is refused
	// with 400 naming it, so nothing here changes the cluster.
	body := func(pad int) string {
		return `{"addresses":["node-7"],"pad":"` + strings.Repeat("x", pad) + `"}`
	}
	send := func(b string, chunked bool) (int, string) {
		var rd io.Reader = strings.NewReader(b)
		if chunked {
			rd = io.MultiReader(rd) // no length known: sent chunked
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, baseURL+"/api/v1/cluster/discovery:add", rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+operator(t))
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	for _, chunked := range []bool{false, true} {
		code, msg := send(body(server.MaxRequestBody), chunked)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "larger than 256 KiB") {
			t.Fatalf("over the limit (chunked %v): %d %s, want 413 naming the limit", chunked, code, msg)
		}
	}
	// Under the limit: decoded (the unknown field dropped) and answered by the handler.
	for _, chunked := range []bool{false, true} {
		code, msg := send(body(200<<10), chunked)
		if code != http.StatusBadRequest || !strings.Contains(msg, "not an IP address") {
			t.Fatalf("under the limit (chunked %v): %d %s, want the handler's 400", chunked, code, msg)
		}
	}
	// gRPC: a message over the limit is refused too.
	_, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).AddDiscovery(context.Background(),
		&ichorv1.AddDiscoveryRequest{Addresses: []string{strings.Repeat("1", server.MaxRequestBody)}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("an oversized gRPC message: %v, want RESOURCE_EXHAUSTED", err)
	}
}

// TestAccessTokenAudienceRefusesIDTokens: the ID token of a sign-in (the
// console client's audience) is not an access token; the access token of
// the same sign-in is.
func TestAccessTokenAudienceRefusesIDTokens(t *testing.T) {
	newUser(t, "audrey", "audrey-password-1", ichorv1alpha1.UserRoleViewer)
	tok := signIn(t, "audrey", "audrey-password-1")
	if tok.IDToken == "" {
		t.Fatal("the sign-in returned no ID token")
	}
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/machines", tok.IDToken, "")
	if msg, _ := body["message"].(string); code != http.StatusUnauthorized || !strings.Contains(msg, "not an access token") {
		t.Fatalf("an ID token as a bearer token: %d %v, want 401 saying it is not an access token", code, body)
	}
	if code := apiStatus(t, tok.AccessToken); code != http.StatusOK {
		t.Fatalf("the access token: %d", code)
	}
}

// TestSessionRevokedWhenPasswordChanges: a new password ends the sessions
// signed in with the old one (access and refresh tokens); a session of
// another user goes on; the new password signs in.
func TestSessionRevokedWhenPasswordChanges(t *testing.T) {
	newUser(t, "pat", "pat-password-old", ichorv1alpha1.UserRoleViewer)
	newUser(t, "quinn", "quinn-password-1", ichorv1alpha1.UserRoleViewer)
	tok := signIn(t, "pat", "pat-password-old")
	other := signIn(t, "quinn", "quinn-password-1")
	if err := userpass.Set(context.Background(), admin, testNS, "pat", "pat-password-new"); err != nil {
		t.Fatal(err)
	}
	eventuallyRefused(t, tok.AccessToken)
	if s, _, e := refreshWith(t, httpClient(), tok.RefreshToken); s != http.StatusBadRequest || !strings.Contains(fmt.Sprint(e["error_description"]), "password was changed") {
		t.Fatalf("refresh after a new password: %d %v", s, e)
	}
	if code := apiStatus(t, other.AccessToken); code != http.StatusOK {
		t.Fatalf("another user's session after pat's new password: %d", code)
	}
	if code := apiStatus(t, signIn(t, "pat", "pat-password-new").AccessToken); code != http.StatusOK {
		t.Fatalf("the new password's session: %d", code)
	}
}

// TestSessionRevokedWhenUserDisabled: disabling a user ends the access token
// too, not only the next refresh.
func TestSessionRevokedWhenUserDisabled(t *testing.T) {
	newUser(t, "dina", "dina-password-1", ichorv1alpha1.UserRoleViewer)
	tok := signIn(t, "dina", "dina-password-1")
	u := &ichorv1alpha1.IchorUser{}
	if err := admin.Get(context.Background(), keyOf("dina"), u); err != nil {
		t.Fatal(err)
	}
	u.Spec.Disabled = true
	if err := admin.Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	// No refresh in between: the session watcher ends the access token.
	eventuallyRefused(t, tok.AccessToken)
	if s, _, e := refreshWith(t, httpClient(), tok.RefreshToken); s != http.StatusBadRequest || !strings.Contains(fmt.Sprint(e["error_description"]), "disabled") {
		t.Fatalf("refresh of a disabled user: %d %v", s, e)
	}
}

// TestConsoleSecurityHeaders: the console carries CSP, HSTS and
// Referrer-Policy; so do API answers (HSTS, Referrer-Policy).
func TestConsoleSecurityHeaders(t *testing.T) {
	for _, path := range []string{"/", "/nodes/some-node", "/api/v1/machines"} {
		resp := do(t, httpClient(), http.MethodGet, baseURL+path, nil)
		h := resp.header
		if !strings.HasPrefix(h.Get("Strict-Transport-Security"), "max-age=") || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: HSTS %q, Referrer-Policy %q", path, h.Get("Strict-Transport-Security"), h.Get("Referrer-Policy"))
		}
		if path == "/api/v1/machines" {
			continue
		}
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("GET %s: CSP %q lacks %s", path, csp, want)
			}
		}
	}
}

// TestMetricsNotOnThePublicListener: the console's listener answers 404 to
// /metrics; the metrics listener serves them and nothing else.
func TestMetricsNotOnThePublicListener(t *testing.T) {
	code, body := rest(t, httpClient(), http.MethodGet, "/metrics", "", "")
	if code != http.StatusNotFound || strings.Contains(fmt.Sprint(body), "ichor_ui_http_requests_total") {
		t.Fatalf("GET /metrics on the console: %d, want 404 without metrics", code)
	}
	opts := serverOpts
	opts.Registry = nil
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lc := &net.ListenConfig{}
	console, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsLn, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeAll(ctx, server.Listeners{Console: console, Metrics: metricsLn}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("the server stopped with: %v", err)
		}
	})
	get := func(u string) (int, string) {
		resp := do(t, httpClient(), http.MethodGet, u, nil)
		return resp.status, resp.body
	}
	// The console serves once; then the metrics count that request.
	if code, _ := get("https://" + console.Addr().String() + "/healthz"); code != http.StatusOK {
		t.Fatalf("the second server's console: %d", code)
	}
	m := "https://" + metricsLn.Addr().String()
	if code, text := get(m + "/metrics"); code != http.StatusOK || !strings.Contains(text, "ichor_ui_http_requests_total") {
		t.Fatalf("GET /metrics on the metrics listener: %d", code)
	}
	for _, p := range []string{"/", "/healthz", "/api/v1/machines"} {
		if code, _ := get(m + p); code != http.StatusNotFound {
			t.Errorf("GET %s on the metrics listener: %d, want 404", p, code)
		}
	}
}

// TestLongStreamOutlivesReadTimeout: a followed log stream lasts beyond the
// server's ReadTimeout (no write timeout cuts it), on a server whose
// ReadTimeout is one second.
func TestLongStreamOutlivesReadTimeout(t *testing.T) {
	opts := serverOpts
	opts.Registry = nil
	opts.ReadTimeout = time.Second
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("the server stopped with: %v", err)
		}
	})

	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet,
		"https://"+ln.Addr().String()+"/api/v1/nodes/"+nodeName+"/services/apid/logs?follow=true&tail_lines=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token(t, "ichor:stream-reader", "ichor:viewer"))
	for _, h2 := range []bool{false, true} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: h2}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		buf := make([]byte, 4096)
		for time.Since(start) < 3*time.Second {
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatalf("the stream (HTTP/2 %v) ended after %v, beyond a 1 s read timeout only by the timeout: %v", h2, time.Since(start), err)
			}
		}
		_ = resp.Body.Close()
	}
}

// TestLogStreamsCappedPerUser: one user may hold eight log streams; the
// ninth is refused with RESOURCE_EXHAUSTED naming the way out; another
// user opens one meanwhile, and closing one lets the first user open again.
func TestLogStreamsCappedPerUser(t *testing.T) {
	tok := token(t, "ichor:many-tabs", "ichor:viewer")
	c := nodeClient(t, tok)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(c ichorv1.NodeServiceClient, ctx context.Context) error {
		s, err := c.StreamNodeLogs(ctx, &ichorv1.StreamNodeLogsRequest{Name: nodeName, Service: "apid", TailLines: 1, Follow: true})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}
	cancels := make([]context.CancelFunc, 0, 8)
	for n := range 8 {
		sctx, scancel := context.WithCancel(ctx)
		cancels = append(cancels, scancel)
		if err := open(c, sctx); err != nil {
			t.Fatalf("stream %d: %v", n+1, err)
		}
	}
	err := open(c, ctx)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "close one") {
		t.Fatalf("a ninth stream: %v, want RESOURCE_EXHAUSTED saying to close one", err)
	}
	if err := open(nodeClient(t, token(t, "ichor:one-tab", "ichor:viewer")), ctx); err != nil {
		t.Fatalf("another user's stream: %v", err)
	}
	cancels[0]()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := open(c, ctx)
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("after closing a stream: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
