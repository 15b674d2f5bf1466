package issuer_test

import (
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/maeshinshin/ichor/uiserver/internal/issuer"
)

var (
	inputTag = regexp.MustCompile(`<input id="(username|password)"[^>]*>`)
	cssVar   = regexp.MustCompile(`--([a-z-]+):\s*([^;}\n]+)`)
)

// inputs returns the user name and password <input> tags of a login page.
func inputs(t *testing.T, body string) (username, password string) {
	t.Helper()
	for _, m := range inputTag.FindAllStringSubmatch(body, -1) {
		if m[1] == "username" {
			username = m[0]
		} else {
			password = m[0]
		}
	}
	if username == "" || password == "" {
		t.Fatalf("no user name and password fields on the page:\n%s", body)
	}
	return username, password
}

// TestLoginFocusesPasswordAfterAFailedSignIn: the fresh form starts on the
// user name; after a wrong password the name is kept and the password field
// has the focus, is marked invalid and is described by the error.
func TestLoginFocusesPasswordAfterAFailedSignIn(t *testing.T) {
	w := newWorld(t)
	c := w.browser(t)
	_, challenge := newVerifier()
	page := do(t, c, http.MethodGet, w.srv.URL+issuer.AuthorizePath+"?"+authorizeQuery(challenge, "S256").Encode(), nil)
	m := requestField.FindStringSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		t.Fatalf("authorize answered %d without a login form: %s", page.status, page.body)
	}
	user, pass := inputs(t, page.body)
	if !strings.Contains(user, "autofocus") || strings.Contains(pass, "autofocus") || strings.Contains(pass, "aria-invalid") {
		t.Errorf("the fresh form should focus the user name and mark nothing invalid:\n%s\n%s", user, pass)
	}

	failed := do(t, c, http.MethodPost, w.srv.URL+issuer.LoginPath, url.Values{"request": {m[1]}, "username": {"alice"}, "password": {"wrong"}})
	if failed.status != http.StatusUnauthorized {
		t.Fatalf("a wrong password answered %d", failed.status)
	}
	user, pass = inputs(t, failed.body)
	if !strings.Contains(user, `value="alice"`) || strings.Contains(user, "autofocus") {
		t.Errorf("after a failure the user name should be kept, without the focus: %s", user)
	}
	if !strings.Contains(pass, "autofocus") || !strings.Contains(pass, `aria-invalid="true"`) || !strings.Contains(pass, `aria-describedby="login-error"`) {
		t.Errorf("after a failure the password should have the focus, be invalid and be described by the error: %s", pass)
	}
	if !regexp.MustCompile(`id="login-error" role="alert">[^<]+<`).MatchString(failed.body) {
		t.Errorf("no error with id login-error on the page:\n%s", failed.body)
	}
}

// TestLoginPageUsesTheConsoleColours holds the login page's colours to the
// console's (webapp/src/index.css), so that the two look like one product.
func TestLoginPageUsesTheConsoleColours(t *testing.T) {
	css, err := os.ReadFile("../../../webapp/src/index.css")
	if err != nil {
		t.Fatal(err)
	}
	block := func(s, open string) map[string]string {
		i := strings.Index(s, open)
		if i < 0 {
			t.Fatalf("no %q in the stylesheet", open)
		}
		end := strings.Index(s[i:], "}")
		out := map[string]string{}
		for _, m := range cssVar.FindAllStringSubmatch(s[i:i+end], -1) {
			out[m[1]] = strings.TrimSpace(m[2])
		}
		return out
	}
	console := map[string]map[string]string{"light": block(string(css), "\n:root {"), "dark": block(string(css), "\n.dark {")}

	w := newWorld(t)
	c := w.browser(t)
	_, challenge := newVerifier()
	page := do(t, c, http.MethodGet, w.srv.URL+issuer.AuthorizePath+"?"+authorizeQuery(challenge, "S256").Encode(), nil).body
	login := map[string]map[string]string{"light": block(page, ":root{"), "dark": block(page, "(prefers-color-scheme: dark){:root{")}
	for theme, vars := range login {
		if len(vars) < 8 {
			t.Fatalf("the login page's %s theme sets only %d colours", theme, len(vars))
		}
		for k, v := range vars {
			if console[theme][k] != v {
				t.Errorf("%s theme: the login page's --%s is %q, the console's %q", theme, k, v, console[theme][k])
			}
		}
	}
}
