package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

var (
	signInAt     = regexp.MustCompile(`^\s+(https://\S+/oidc/authorize\?\S+)$`)
	loginRequest = regexp.MustCompile(`name="request" value="([^"]+)"`)
)

// execCredential is the part of client-go's ExecCredential read here.
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Status     struct {
		Token               string    `json:"token"`
		ExpirationTimestamp time.Time `json:"expirationTimestamp"`
	} `json:"status"`
}

// authToken runs the kubeconfig's exec plugin (`ichor auth token ...`) as
// kubectl would. signIn, when set, plays the user's browser with the address
// the command prints. Its output is not logged: it is a credential.
func (w *world) authToken(t *testing.T, ctx context.Context, args []string, signIn func(string)) (execCredential, string) {
	t.Helper()

	cmd := exec.CommandContext(ctx, filepath.Join(w.bin, "ichor"), append(args, "--no-browser")...) //nolint:gosec // our own binary
	cmd.Env = w.env

	var stdout bytes.Buffer
	cmd.Stdout = &stdout

	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	var prompt strings.Builder

	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		prompt.WriteString(sc.Text() + "\n")

		if m := signInAt.FindStringSubmatch(sc.Text()); m != nil {
			if signIn == nil {
				_ = cmd.Process.Kill()
				t.Fatalf("`ichor auth token` asked for a sign-in:\n%s", prompt.String())
			}

			go signIn(m[1])
		}
	}

	if err := cmd.Wait(); err != nil {
		t.Fatalf("`ichor auth token`: %v\n%s", err, prompt.String())
	}

	var cred execCredential
	if err := json.Unmarshal(stdout.Bytes(), &cred); err != nil || cred.Status.Token == "" {
		t.Fatalf("`ichor auth token` printed no ExecCredential (%v); it said:\n%s", err, prompt.String())
	}

	return cred, prompt.String()
}

// browser signs user in at the issuer's authorization address as a browser
// does: the login form, the password, and the redirect to the CLI's
// loopback listener. It trusts the CA the CLI trusts.
func browser(t *testing.T, caFile string, user uiUser) func(string) {
	return func(authURL string) {
		c, err := trusting(caFile)
		if err != nil {
			t.Error(err)

			return
		}

		c.Jar, _ = cookiejar.New(nil)

		page, err := c.Get(authURL) //nolint:noctx // a short test request
		if err != nil {
			t.Errorf("the browser opening the sign-in: %v", err)

			return
		}

		body, _ := io.ReadAll(page.Body)
		_ = page.Body.Close()

		m := loginRequest.FindSubmatch(body)
		if m == nil {
			t.Errorf("the sign-in page (%s) has no login form:\n%s", page.Status, body)

			return
		}

		u, _ := url.Parse(authURL)
		// The issuer redirects to the CLI's listener, which the client follows.
		resp, err := c.PostForm(u.Scheme+"://"+u.Host+"/oidc/login", url.Values{"request": {string(m[1])}, "username": {user.Name}, "password": {user.Password}}) //nolint:noctx // a short test request
		if err != nil {
			t.Errorf("the browser posting the password: %v", err)

			return
		}

		done, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()

		if !strings.Contains(string(done), "signed in") {
			t.Errorf("the CLI's page after the sign-in (%s): %s", resp.Status, done)
		}
	}
}

// claimsOf reads a JWT's claims (the test does not verify it: the issuer
// made it, and the claims are what is checked).
func claimsOf(t *testing.T, tok string) map[string]any {
	t.Helper()

	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("the token is not a JWT")
	}

	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}

	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}

	return out
}

// TestAuthTokenSignsInRefreshesAndSignsOut: `ichor auth kubeconfig` writes
// a kubeconfig with no secret whose exec plugin is `ichor auth token`; the
// plugin signs one of Ichor's users in through the in-cluster ichor-ui's
// issuer (PKCE, a loopback redirect, the issuer's certificate verified with
// the CA Ichor publishes) and prints an ID token for ichor-cli naming the
// user and their role's group; the next call answers from the 0600 token
// file without a sign-in, an expired ID token is refreshed without one
// (the refresh token rotated), and `ichor auth logout` revokes the sign-in
// at the issuer and deletes the file.
func TestAuthTokenSignsInRefreshesAndSignsOut(t *testing.T) {
	w := scenario(t)
	ui := startedUI(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	user := w.createUser(t, ctx, "kate", "viewer")

	kcFile, args, caFile := w.userKubeconfig(t, ctx, ui)

	cred, prompt := w.authToken(t, ctx, args, browser(t, caFile, user))
	if cred.Kind != "ExecCredential" || cred.APIVersion != "client.authentication.k8s.io/v1" || !strings.Contains(prompt, "Sign in to Ichor at:") {
		t.Fatalf("the plugin's answer: %s %s; it said:\n%s", cred.APIVersion, cred.Kind, prompt)
	}

	claims := claimsOf(t, cred.Status.Token)
	if claims["iss"] != ui.url || claims["aud"] != "ichor-cli" && !slices.Contains(anySlice(claims["aud"]), any("ichor-cli")) ||
		claims["username"] != "ichor:kate" || !slices.Contains(anySlice(claims["groups"]), any("ichor:viewer")) {
		t.Fatalf("the ID token's claims: %v", claims)
	}

	if life := time.Until(cred.Status.ExpirationTimestamp); life <= 0 || life > 6*time.Minute {
		t.Fatalf("the ID token expires in %s, want the issuer's short lifetime", life)
	}

	// The kubeconfig holds no secret.
	raw, err := os.ReadFile(kcFile)
	if err != nil {
		t.Fatal(err)
	}

	if strings.Contains(string(raw), cred.Status.Token) || strings.Contains(string(raw), "token:") {
		t.Fatal("the kubeconfig carries a token")
	}

	// The token file: 0600 in a 0700 directory, one per issuer.
	tokens := filepath.Join(w.home(), "tokens")
	files, _ := filepath.Glob(filepath.Join(tokens, "*.json"))

	if len(files) != 1 {
		t.Fatalf("token files %v, want one", files)
	}

	for p, want := range map[string]os.FileMode{tokens: 0o700, files[0]: 0o600} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: %v, %v; want mode %o", p, st.Mode(), err, want)
		}
	}

	// Again: from the file, no sign-in.
	again, _ := w.authToken(t, ctx, args, nil)
	if again.Status.Token != cred.Status.Token {
		t.Fatal("a second call made a new token while the first was valid")
	}

	// Expired: refreshed, no sign-in, the refresh token rotated.
	before := readTokenFile(t, files[0])
	before["expiry"] = time.Now().Add(-time.Minute).Format(time.RFC3339)
	writeTokenFile(t, files[0], before)

	refreshed, _ := w.authToken(t, ctx, args, nil)
	after := readTokenFile(t, files[0])

	if refreshed.Status.Token == cred.Status.Token || after["refreshToken"] == before["refreshToken"] || claimsOf(t, refreshed.Status.Token)["username"] != "ichor:kate" {
		t.Fatal("the expired ID token was not refreshed with a rotated refresh token")
	}

	// Sign-out: the file goes and the issuer no longer honours the refresh token.
	out := w.mustIchor(t, ctx, append([]string{"auth", "logout"}, args[2:]...)...)
	if !strings.Contains(out, "Signed out of "+ui.url) {
		t.Fatalf("`ichor auth logout`: %s", out)
	}

	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Fatalf("the token file is still there after the sign-out: %v", err)
	}

	if code, body := refreshAt(t, ui, caFile, fmt.Sprint(after["refreshToken"])); code != http.StatusBadRequest || !strings.Contains(body, "invalid_grant") {
		// Only the status: a body of 200 would carry new tokens.
		t.Fatalf("the refresh token after the sign-out answered %d, want 400 invalid_grant", code)
	}
}

func anySlice(v any) []any {
	s, _ := v.([]any)

	return s
}

func readTokenFile(t *testing.T, p string) map[string]any {
	t.Helper()

	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}

	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}

	return out
}

func writeTokenFile(t *testing.T, p string, v map[string]any) {
	t.Helper()

	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// refreshAt presents a refresh token to the issuer's token endpoint.
func refreshAt(t *testing.T, ui *uiServer, caFile, refresh string) (int, string) {
	t.Helper()

	c, err := trusting(caFile)
	if err != nil {
		t.Fatal(err)
	}

	resp, err := c.PostForm(ui.url+"/oidc/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "client_id": {"ichor-cli"}}) //nolint:noctx // a short test request
	if err != nil {
		t.Fatal(err)
	}

	defer func() { _ = resp.Body.Close() }()

	b, _ := io.ReadAll(resp.Body)

	return resp.StatusCode, string(b)
}

// home is the ICHOR_HOME the world's commands run with.
func (w *world) home() string {
	for _, e := range slices.Backward(w.env) {
		if h, ok := strings.CutPrefix(e, "ICHOR_HOME="); ok {
			return h
		}
	}

	return ""
}

// trusting is an HTTP client that trusts the CA bundle in caFile.
func trusting(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}

	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// userKubeconfig is the kubeconfig `ichor auth kubeconfig` writes, the
// arguments of its exec plugin and the issuer CA file they name.
func (w *world) userKubeconfig(t *testing.T, ctx context.Context, ui *uiServer) (file string, args []string, caFile string) {
	t.Helper()

	file = filepath.Join(t.TempDir(), "kubeconfig")
	w.mustIchor(t, ctx, "auth", "kubeconfig", "--file", file)

	kc, err := clientcmd.LoadFromFile(file)
	if err != nil {
		t.Fatal(err)
	}

	exe := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Exec
	if exe == nil || exe.Command != "ichor" || !slices.Contains(exe.Args, ui.url) || !slices.Contains(exe.Args, "--issuer-ca-file") {
		t.Fatalf("the kubeconfig's user runs %+v, want `ichor auth token --issuer %s --issuer-ca-file ...`", exe, ui.url)
	}

	return file, exe.Args, exe.Args[slices.Index(exe.Args, "--issuer-ca-file")+1]
}
