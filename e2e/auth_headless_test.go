package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// signInCode is the code on the issuer's /oidc/code page.
var signInCode = regexp.MustCompile(`id="sign-in-code" readonly value="([^"]+)"`)

// TestAuthTokenHeadless: `ichor auth token --headless` on a terminal with no
// browser: the person opens the printed address on another device, signs
// in, and types the code the issuer's page shows; the plugin exchanges it
// with its own PKCE verifier and prints the ExecCredential. A code typed
// twice is refused (the code is single-use).
func TestAuthTokenHeadless(t *testing.T) {
	w := scenario(t)
	ui := startedUI(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	user := w.createUser(t, ctx, "hedy", "viewer")
	_, args, caFile := w.userKubeconfig(t, ctx, ui)

	cmd := exec.CommandContext(ctx, filepath.Join(w.bin, "ichor"), append(args, "--headless")...) //nolint:gosec // our own binary
	// a home of its own: no cached token from another test
	cmd.Env = append(append([]string{}, w.env...), "ICHOR_HOME="+t.TempDir())

	var stdout bytes.Buffer
	cmd.Stdout = &stdout

	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}

	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	var prompt strings.Builder

	codes := make(chan string, 1)
	sc := bufio.NewScanner(stderr)

	for sc.Scan() {
		prompt.WriteString(sc.Text() + "\n")

		if m := signInAt.FindStringSubmatch(sc.Text()); m != nil {
			if !strings.Contains(m[1], url.QueryEscape(ui.url+"/oidc/code")) {
				t.Errorf("the headless sign-in does not redirect to the issuer's code page: %s", m[1])
			}

			go func(authURL string) { codes <- codeFromAnotherDevice(t, authURL, caFile, user) }(m[1])

			break
		}
	}

	code := <-codes
	if _, err := io.WriteString(stdin, code+"\n"); err != nil {
		t.Fatal(err)
	}

	_, _ = io.Copy(io.Discard, stderr)

	if err := cmd.Wait(); err != nil {
		t.Fatalf("`ichor auth token --headless`: %v\n%s", err, prompt.String())
	}

	var cred execCredential
	if err := json.Unmarshal(stdout.Bytes(), &cred); err != nil || cred.Status.Token == "" {
		t.Fatalf("no ExecCredential (%v); it said:\n%s", err, prompt.String())
	}

	if claims := claimsOf(t, cred.Status.Token); claims["username"] != "ichor:hedy" {
		t.Fatalf("the ID token's claims: %v", claims)
	}

	// The code was used: presented again (without the verifier it is worthless anyway), it is refused.
	c, err := trusting(caFile)
	if err != nil {
		t.Fatal(err)
	}

	resp, err := c.PostForm(ui.url+"/oidc/token", url.Values{"client_id": {"ichor-cli"}, "grant_type": {"authorization_code"}, //nolint:noctx // a short test request
		"code": {code}, "redirect_uri": {ui.url + "/oidc/code"}, "code_verifier": {strings.Repeat("x", 43)}})
	if err != nil {
		t.Fatal(err)
	}

	_ = resp.Body.Close()

	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("the used code presented again: %s, want 400", resp.Status)
	}
}

// codeFromAnotherDevice signs user in at authURL as a browser on another
// device does and returns the code the issuer's page shows.
func codeFromAnotherDevice(t *testing.T, authURL, caFile string, user uiUser) string {
	c, err := trusting(caFile)
	if err != nil {
		t.Error(err)

		return ""
	}

	c.Jar, _ = cookiejar.New(nil)

	page, err := c.Get(authURL) //nolint:noctx // a short test request
	if err != nil {
		t.Errorf("opening the sign-in: %v", err)

		return ""
	}

	body, _ := io.ReadAll(page.Body)
	_ = page.Body.Close()

	m := loginRequest.FindSubmatch(body)
	if m == nil {
		t.Errorf("the sign-in page (%s) has no login form", page.Status)

		return ""
	}

	u, _ := url.Parse(authURL)

	resp, err := c.PostForm(u.Scheme+"://"+u.Host+"/oidc/login", url.Values{"request": {string(m[1])}, "username": {user.Name}, "password": {user.Password}}) //nolint:noctx // a short test request
	if err != nil {
		t.Errorf("posting the password: %v", err)

		return ""
	}

	shown, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()

	cm := signInCode.FindSubmatch(shown)
	if cm == nil {
		t.Errorf("the page after the sign-in (%s, %s) shows no code", resp.Status, resp.Request.URL.Path)

		return ""
	}

	return string(cm[1])
}
