package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Debian's chromium, driven with chromedp over the DevTools protocol.

const (
	chromiumPath = "/usr/bin/chromium"
	artifactsEnv = "ICHOR_ARTIFACTS"
)

// newBrowser starts a headless chromium with a fresh profile and returns a
// tab's context. A missing chromium fails the test: the browser tests are
// part of the short set.
func newBrowser(t *testing.T) context.Context {
	t.Helper()

	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser tests need Debian's chromium at %s (%v): run `go tool task tools:chromium` (the test task installs it)", chromiumPath, err)
	}

	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
		// This machine has no route out: no background fetches, no QUIC, no updates.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// ichor-ui serves a self-signed certificate the test made it make.
		chromedp.IgnoreCertErrors,
	}

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)

	t.Cleanup(func() { cancel(); cancelAlloc() })

	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}

	return ctx
}

// newTab opens another tab of the browser: its own sessionStorage, so its own sign-in.
func newTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()

	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)

	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}

	return ctx
}

func artifactsDir(t *testing.T) string {
	t.Helper()

	dir := os.Getenv(artifactsEnv)
	if dir == "" {
		dir = "artifacts"
	}

	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}

	return dir
}

// screenshot saves a full-page PNG of the tab as an artifact.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()

	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}

	path := filepath.Join(artifactsDir(t), name+".png")
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Logf("screenshot: %s", path)
}

// run runs browser actions and fails the test with what was asked.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	if err := chromedp.Do(cctx, steps...); err != nil {
		t.Fatalf("%s: %v\npage: %s", what, err, pageText(ctx))
	}
}

// eval evaluates a JavaScript expression (promises awaited) into T.
func eval[T any](ctx context.Context, js string) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	return chromedp.Run(cctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// pageText is the visible text of the page, shortened, for failure messages.
func pageText(ctx context.Context) string {
	s, err := eval[string](ctx, `location.href + "\n" + (document.body ? document.body.innerText : "")`)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}

	if len(s) > 3000 {
		s = s[:3000] + "…"
	}

	return s
}

// waitJS polls a JavaScript condition until it is true; the failure shows the page.
func waitJS(t *testing.T, ctx context.Context, timeout time.Duration, what, cond string) {
	t.Helper()

	deadline := time.Now().Add(timeout)

	var last error

	for {
		ok, err := eval[bool](ctx, "Boolean("+cond+")")
		if err == nil && ok {
			return
		}

		last = err

		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %s (last error: %v); the page:\n%s", what, timeout, last, pageText(ctx))
		}

		time.Sleep(500 * time.Millisecond)
	}
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	b, _ := json.Marshal(s) //nolint:errchkjson // a string always marshals

	return string(b)
}

// noOverflow checks that the page does not scroll sideways at the window's width.
func noOverflow(t *testing.T, ctx context.Context, where string) {
	t.Helper()

	over, err := eval[int](ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`)
	if err != nil {
		t.Fatal(err)
	}

	if over > 0 {
		t.Errorf("%s: the page is %d px wider than the window: the layout breaks", where, over)
	}
}

// signIn signs a user in through the issuer's form, where the console sends a browser that is not signed in.
func signIn(t *testing.T, ctx context.Context, ui *uiServer, u uiUser, shot string) {
	t.Helper()

	// Not signed in, the console goes straight to the issuer's form: no
	// page with one button before it.
	run(t, ctx, "open the console", chromedp.Navigate(ui.url+"/"))
	waitJS(t, ctx, 30*time.Second, "the issuer's login form, straight away", `document.querySelector("input#password")`)

	if shot != "" {
		screenshot(t, ctx, shot)
	}
	run(t, ctx, "fill the login form",
		chromedp.SendKeys(chromedp.ID("username"), u.Name),
		chromedp.SendKeys(chromedp.ID("password"), u.Password),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
	)
	waitJS(t, ctx, 30*time.Second, "the console after the sign-in as "+u.Name,
		fmt.Sprintf(`document.querySelector("[data-testid=user]")?.textContent === %s`, jsString("ichor:"+u.Name)))

	if !strings.HasPrefix(pageText(ctx), ui.url+"/") {
		t.Fatalf("after the sign-in the browser is not on the console:\n%s", pageText(ctx))
	}
}

// navigate follows an in-app link (no reload: the access token lives in memory).
func navigate(t *testing.T, ctx context.Context, path string) {
	t.Helper()

	if _, err := eval[bool](ctx, fmt.Sprintf(`(history.pushState(null, "", %s), dispatchEvent(new PopStateEvent("popstate")), true)`, jsString(path))); err != nil {
		t.Fatalf("navigate to %s: %v", path, err)
	}
}

// axeScript is axe-core, the accessibility engine, from the web console's
// npm packages (webapp/package.json pins it; `go tool task webapp:deps`
// installs it, and the test task runs that first).
func axeScript(t *testing.T) string {
	t.Helper()

	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}

	b, err := os.ReadFile(filepath.Join(root, "webapp", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatalf("the accessibility check needs axe-core from the web console's packages (%v): run `go tool task webapp:deps`", err)
	}

	return string(b)
}

// axeViolation is one serious or critical finding of axe-core.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// checkAccessibility runs axe-core on the page (injected once per document)
// and fails on a serious or critical violation; moderate and minor ones are
// logged.
func checkAccessibility(t *testing.T, ctx context.Context, script, where string) {
	t.Helper()

	if loaded, _ := eval[bool](ctx, `typeof window.axe === "object"`); !loaded {
		if _, err := eval[bool](ctx, script+"\n;true"); err != nil {
			t.Fatalf("%s: injecting axe-core: %v", where, err)
		}
	}

	out, err := eval[string](ctx, `(async () => {
		const r = await axe.run(document, { resultTypes: ["violations"] });
		return JSON.stringify(r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.slice(0, 3).map(n => n.target.join(" ") + ": " + n.html.slice(0, 160)) })));
	})()`)
	if err != nil {
		t.Fatalf("%s: axe-core: %v", where, err)
	}

	var vs []axeViolation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatalf("%s: reading axe-core's answer: %v", where, err)
	}

	for _, v := range vs {
		msg := fmt.Sprintf("%s: %s (%s): %s\n  %s", where, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "\n  "))
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}

// checkFits checks what a narrow screen breaks first: the page scrolls
// sideways, a table is wider than its card, a shown navigation item or the
// selected tab is cut.
func checkFits(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	noOverflow(t, ctx, where)

	out, err := eval[string](ctx, `JSON.stringify({
		tables: [...document.querySelectorAll("main table")].filter(tb => {
			const card = tb.closest("section, dialog, details, [data-pending]") || tb.parentElement;
			return tb.getBoundingClientRect().width > card.getBoundingClientRect().width + 1;
		}).map(tb => tb.getAttribute("aria-label") + " (" + Math.round(tb.getBoundingClientRect().width) + " px)"),
		cut: [...document.querySelectorAll("#main-nav a, [role=tab][aria-selected=true]")].filter(a => a.offsetParent !== null &&
			(a.scrollWidth > a.clientWidth + 1 || a.getBoundingClientRect().right > innerWidth + 1 || a.getBoundingClientRect().left < -1))
			.map(a => a.textContent),
	})`)
	if err != nil {
		t.Fatal(err)
	}

	var got struct {
		Tables []string `json:"tables"`
		Cut    []string `json:"cut"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}

	if len(got.Tables) > 0 {
		t.Errorf("%s: tables wider than their card: %s", where, strings.Join(got.Tables, ", "))
	}

	if len(got.Cut) > 0 {
		t.Errorf("%s: navigation items or tabs cut off: %q", where, got.Cut)
	}
}
