package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// The web console in Debian's chromium against the world the CLI scenario
// leaves (four Ready machines, the removed worker back as pending): an admin
// signs in, sees the five machines, approves the pending one and watches it
// become Ready, removes a worker with the typed confirmation and signs out;
// a viewer sees no Approve or Remove button, and the backend refuses the
// approval the viewer forges with their own token. Each screen is saved as a
// screenshot under $ICHOR_ARTIFACTS (default e2e/artifacts).

// stateCell is the JavaScript for the text of a machine's State cell on the Nodes screen.
func stateCell(name string) string {
	return fmt.Sprintf(`document.querySelector('tr[data-machine=%s] [data-col=state]')?.textContent`, jsString(name))
}

func TestBrowserConsole(t *testing.T) {
	start := time.Now()
	w := approvedWorld(t)
	ui := startedUI(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	admin := w.createUser(t, ctx, "e2e-admin", "admin")
	viewer := w.createUser(t, ctx, "e2e-viewer", "viewer")

	ms, err := w.list(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var pending machine

	var workers, controlPlanes []machine

	for _, m := range ms {
		switch {
		case m.Spec.Approval.State == "pending":
			pending = m
		case m.Spec.Role == "worker" && m.ready():
			workers = append(workers, m)
		case m.Spec.Role == "controlplane" && m.ready():
			controlPlanes = append(controlPlanes, m)
		}
	}

	if len(ms) != 5 || pending.Metadata.Name == "" || len(workers) != 1 {
		t.Fatalf("the CLI scenario should leave 4 Ready machines (one a worker) and 1 pending; got:\n%s", describe(ms))
	}

	browser := newBrowser(t)
	tab := browser

	// Each step starts from the one before: stop at the first failure.
	step := func(name string, f func(t *testing.T)) {
		t.Helper()

		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("sign in and overview", func(t *testing.T) {
		signIn(t, tab, ui, admin, "01-sign-in")
		waitJS(t, tab, 30*time.Second, "the cluster's name in the top bar", `document.querySelector("[data-testid=cluster-name]")?.textContent === "e2e"`)
		waitJS(t, tab, 30*time.Second, "the node tiles", `document.querySelector("[data-testid=tile-nodes]")?.textContent === "4 / 4" && document.querySelector("[data-testid=tile-pending]")?.textContent === "1"`)
		waitJS(t, tab, 30*time.Second, "the versions in the top bar", `document.querySelector("dl[aria-label=Versions]")?.textContent.includes("Kubernetes")`)
		screenshot(t, tab, "02-overview")
		noOverflow(t, tab, "overview at 1280 px")
		// The theme toggle: automatic, dark, light, automatic again.
		run(t, tab, "switch to the dark theme", chromedp.Click(chromedp.CSS(`[data-testid=theme]`)))
		waitJS(t, tab, 5*time.Second, "the dark theme", `document.documentElement.classList.contains("dark")`)
		time.Sleep(500 * time.Millisecond) // the colour transitions
		screenshot(t, tab, "02-overview-dark")
		run(t, tab, "switch to the light theme", chromedp.Click(chromedp.CSS(`[data-testid=theme]`)))
		waitJS(t, tab, 5*time.Second, "the light theme", `!document.documentElement.classList.contains("dark")`)
		run(t, tab, "back to automatic", chromedp.Click(chromedp.CSS(`[data-testid=theme]`)))
	})

	step("nodes list shows the five machines", func(t *testing.T) {
		navigate(t, tab, "/nodes")
		waitJS(t, tab, 30*time.Second, "five machines on Nodes", `document.querySelectorAll("tr[data-machine]").length === 5`)
		waitJS(t, tab, 10*time.Second, "the pending machine marked so", stateCell(pending.Metadata.Name)+` === "Pending approval"`)
		for _, m := range ms {
			if m.Spec.Approval.State == "approved" {
				waitJS(t, tab, 10*time.Second, m.Metadata.Name+" Ready", stateCell(m.Metadata.Name)+` === "Ready"`)
			}
		}
		screenshot(t, tab, "03-nodes")
		noOverflow(t, tab, "nodes at 1280 px")
	})

	step("approve the pending machine and watch it become Ready", func(t *testing.T) {
		name := pending.Metadata.Name
		navigate(t, tab, "/add-node")
		waitJS(t, tab, 30*time.Second, "the pending machine on Add node", fmt.Sprintf(`document.querySelector('[data-pending=%s]')`, jsString(name)))
		waitJS(t, tab, 10*time.Second, "its disks", fmt.Sprintf(`document.querySelector('[data-pending=%s] table[aria-label=Disks] tbody tr')`, jsString(name)))
		screenshot(t, tab, "04-add-node")
		noOverflow(t, tab, "add node at 1280 px")
		run(t, tab, "open the approval form", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="approve-%s"]`, name))))
		waitJS(t, tab, 10*time.Second, "the approval form", fmt.Sprintf(`document.querySelector('[data-testid="approve-submit-%s"]')`, name))
		// Pick the first disk if the machine has several, and confirm a wipe if it asks.
		if _, err := eval[bool](tab, fmt.Sprintf(`(() => {
			const s = document.getElementById(%s);
			if (s && !s.value && s.options.length > 1) { s.value = s.options[1].value; s.dispatchEvent(new Event("change", {bubbles: true})); }
			return true; })()`, jsString("approve-"+name+"-install"))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if _, err := eval[bool](tab, fmt.Sprintf(`(() => { const c = document.getElementById(%s); if (c && !c.checked) c.click(); return true; })()`, jsString("approve-"+name+"-wipe"))); err != nil {
			t.Fatal(err)
		}
		screenshot(t, tab, "05-approve-form")
		run(t, tab, "submit the approval", chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="approve-submit-%s"]`, name))))
		waitJS(t, tab, 30*time.Second, "the machine leaves the pending list (approved)",
			fmt.Sprintf(`!document.querySelector('[data-pending=%s]') || document.querySelector('[data-pending=%s] [role=alert]')`, jsString(name), jsString(name)))
		if msg, _ := eval[string](tab, fmt.Sprintf(`document.querySelector('[data-pending=%s] [role=alert]')?.innerText ?? ""`, jsString(name))); msg != "" {
			t.Fatalf("the console refused the approval: %s", msg)
		}
		navigate(t, tab, "/nodes")
		waitJS(t, tab, 5*time.Minute, name+" Ready on Nodes (live, through the watch)", stateCell(name)+` === "Ready"`)
		screenshot(t, tab, "06-nodes-all-ready")
		workers = append(workers, pending)
	})

	worker := workers[0].Metadata.Name
	workerAddr := workers[0].Spec.Address

	step("node page tabs", func(t *testing.T) {
		for i, tb := range []struct{ path, shot string }{
			{"", "summary"}, {"/storage", "storage-network"}, {"/talos", "talos"}, {"/kubernetes", "kubernetes-etcd"}, {"/logs", "logs"}, {"/config", "configuration"},
		} {
			navigate(t, tab, "/nodes/"+worker+tb.path)
			waitJS(t, tab, 30*time.Second, "the "+tb.shot+" tab", `document.querySelector("#tab-panel") && document.querySelector("[role=tab][aria-selected=true]")`)
			// Let its reads answer (or fail visibly).
			waitJS(t, tab, 30*time.Second, "the "+tb.shot+" tab's content", `document.querySelector("#tab-panel section")`)
			waitJS(t, tab, time.Minute, "the "+tb.shot+" tab's reads", `!document.querySelector("#tab-panel [data-loading]")`)
			screenshot(t, tab, fmt.Sprintf("07-node-%d-%s", i+1, tb.shot))
			noOverflow(t, tab, "node "+tb.shot+" at 1280 px")
		}
		waitJS(t, tab, 30*time.Second, "the effective configuration with masked secrets or values",
			`document.querySelector("table[aria-label='Effective configuration values'] tbody tr") || document.querySelector("#tab-panel [role=alert]")`)

		// The node reads are real: ichor-ui read them with the os:reader
		// certificate the controller signed for it.
		navigate(t, tab, "/nodes/"+worker+"/talos")
		waitJS(t, tab, time.Minute, "the worker's kubelet among its Talos services",
			`[...document.querySelectorAll("table[aria-label='Talos services'] tbody tr td:first-child")].some(td => td.textContent === "kubelet")`)
		screenshot(t, tab, "07-node-talos-services")
		navigate(t, tab, "/nodes/"+worker+"/logs")
		waitJS(t, tab, time.Minute, "lines in the log stream",
			`(() => { const p = document.querySelector("pre[aria-label$=' log']"); return p && p.textContent !== "No lines yet." && p.textContent.includes("\n"); })()`)
		screenshot(t, tab, "07-node-logs")
		if len(controlPlanes) == 0 {
			t.Fatal("no Ready control plane to read etcd members from")
		}
		navigate(t, tab, "/nodes/"+controlPlanes[0].Metadata.Name+"/kubernetes")
		waitJS(t, tab, time.Minute, "the etcd members of a control plane",
			`document.querySelectorAll("table[aria-label='etcd members'] tbody tr").length >= 1`)
		screenshot(t, tab, "07-node-etcd-members")
	})

	step("remove a worker with the typed confirmation", func(t *testing.T) {
		navigate(t, tab, "/nodes/"+worker)
		waitJS(t, tab, 30*time.Second, "the Remove button", `document.querySelector("[data-testid=remove-node]")`)
		run(t, tab, "open the remove dialog", chromedp.Click(chromedp.CSS(`[data-testid=remove-node]`)))
		waitJS(t, tab, 10*time.Second, "the dialog", `document.querySelector("dialog[open] #remove-confirm")`)
		// The removal preview, before the typed confirmation: allowed, the
		// shared plan's steps, and the workers count it changes.
		workersEffect := fmt.Sprintf("workers: %d → %d", len(workers), len(workers)-1)
		waitJS(t, tab, 30*time.Second, "the removal preview with "+workersEffect,
			fmt.Sprintf(`(() => { const p = document.querySelector("dialog[open] [data-testid=removal-preview][data-allowed=true]");
				return !!p && [...p.querySelectorAll("[data-testid=removal-effects] li")].some(li => li.textContent === %s)
					&& p.querySelector("[data-testid=removal-steps]").textContent.includes("Draining"); })()`, jsString(workersEffect)))
		waitJS(t, tab, 5*time.Second, "Remove disabled before the name is typed", `document.querySelector("[data-testid=remove-confirm-button]").disabled`)
		run(t, tab, "type part of the name", chromedp.SendKeys(chromedp.ID("remove-confirm"), worker[:len(worker)-1]))
		waitJS(t, tab, 5*time.Second, "Remove still disabled for a wrong name", `document.querySelector("[data-testid=remove-confirm-button]").disabled`)
		run(t, tab, "type the rest", chromedp.SendKeys(chromedp.ID("remove-confirm"), worker[len(worker)-1:]))
		waitJS(t, tab, 5*time.Second, "Remove enabled for the exact name", `!document.querySelector("[data-testid=remove-confirm-button]").disabled`)
		screenshot(t, tab, "08-remove-dialog")
		run(t, tab, "confirm", chromedp.Click(chromedp.CSS(`[data-testid=remove-confirm-button]`)))
		waitJS(t, tab, 30*time.Second, "the dialog closes without an error", `!document.querySelector("dialog[open]")`)
		navigate(t, tab, "/nodes")
		testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, "the removed worker back as pending", func() (bool, string) {
			ms, err := w.list(ctx)
			if err != nil {
				return false, err.Error()
			}
			for _, m := range ms {
				if m.Spec.Address == workerAddr && m.Spec.Approval.State == "pending" && m.Metadata.DeletionTimestamp == nil {
					pending = m
					return true, ""
				}
			}
			return false, describe(ms)
		})
		waitJS(t, tab, time.Minute, "the console shows it pending", stateCell(pending.Metadata.Name)+` === "Pending approval"`)
		screenshot(t, tab, "09-nodes-after-remove")
	})

	step("narrow screen", func(t *testing.T) {
		run(t, tab, "a 390 px viewport", chromedp.EmulateViewport(390, 844))
		for _, s := range []struct{ path, shot string }{
			{"/", "overview"}, {"/nodes", "nodes"}, {"/add-node", "add-node"}, {"/nodes/" + worker, "node"},
			{"/nodes/" + worker + "/config", "node-config"}, {"/nodes/" + worker + "/talos", "node-talos"}, {"/operations", "operations"}, {"/settings", "settings"},
		} {
			navigate(t, tab, s.path)
			waitJS(t, tab, 30*time.Second, s.shot+" at 390 px", `document.querySelector("#main h1") && !document.querySelector("[data-loading]")`)
			time.Sleep(300 * time.Millisecond) // the layout settles
			screenshot(t, tab, "10-390px-"+s.shot)
			checkFits(t, tab, s.shot+" at 390 px")
		}
		// The navigation is a menu on a phone: every item whole, the current one marked.
		run(t, tab, "open the menu", chromedp.Click(chromedp.CSS(`[data-testid=menu]`)))
		waitJS(t, tab, 5*time.Second, "the menu open", `document.querySelector("#main-nav a[aria-current=page]")?.offsetParent !== null`)
		screenshot(t, tab, "10-390px-menu")
		checkFits(t, tab, "the menu at 390 px")
		if got, _ := eval[string](tab, `document.querySelector("#main-nav a[aria-current=page]")?.textContent ?? ""`); got != "Settings" {
			t.Errorf("the menu marks %q as the current page on Settings", got)
		}
		run(t, tab, "back to 1280 px", chromedp.EmulateViewport(1280, 900))
	})

	step("operations and settings for the admin", func(t *testing.T) {
		navigate(t, tab, "/operations")
		waitJS(t, tab, 30*time.Second, "the Operations page", `document.querySelector("table[aria-label=Operations]") && !document.querySelector("[role=status]")?.textContent.includes("Loading operations")`)
		screenshot(t, tab, "12-operations")
		navigate(t, tab, "/settings")
		waitJS(t, tab, 30*time.Second, "the Settings form with Save", `document.querySelector("#id-token-lifetime") && document.querySelector("[data-testid=settings-save]")`)
		screenshot(t, tab, "13-settings-admin")
	})

	step("users for the admin", func(t *testing.T) {
		navigate(t, tab, "/users")
		waitJS(t, tab, 30*time.Second, "the Users page with the admin in it", `document.querySelector("table[aria-label=\"Ichor's users\"]") && document.querySelector("[data-testid=user-create]")`)
		run(t, tab, "add a viewer",
			chromedp.SendKeys(chromedp.ID("user-name"), "e2e-browser-user"),
			chromedp.Click(chromedp.CSS(`[data-testid=user-create]`)),
		)
		waitJS(t, tab, 30*time.Second, "the new user's password, shown once, and its row",
			`(document.querySelector("[data-testid=one-time-password]")?.textContent ?? "").length >= 12 && document.querySelector("[data-testid=user-e2e-browser-user]")`)
		screenshot(t, tab, "14-users-added")
		run(t, tab, "done with the password", chromedp.Click(chromedp.CSS(`[data-testid=one-time-password-done]`)))
		waitJS(t, tab, 5*time.Second, "the password gone", `!document.querySelector("[data-testid=one-time-password]")`)
		run(t, tab, "disable the user", chromedp.Click(chromedp.CSS(`[data-testid=user-e2e-browser-user-toggle]`)))
		waitJS(t, tab, 30*time.Second, "the user disabled", `document.querySelector("[data-testid=user-e2e-browser-user-state]")?.textContent === "Disabled"`)
		if out, err := w.kubectl(ctx, "get", "ichoruser", "-n", icNamespace, "e2e-browser-user", "-o", "jsonpath={.spec.disabled}/{.spec.roles}"); err != nil || out != `true/["viewer"]` {
			t.Errorf("the IchorUser the Users page wrote: %q, %v", out, err)
		}
	})

	step("sign out revokes the session", func(t *testing.T) {
		navigate(t, tab, "/")
		rt, err := eval[string](tab, `sessionStorage.getItem("ichor.refresh") ?? ""`)
		if err != nil || rt == "" {
			t.Fatalf("no refresh token in the tab's sessionStorage (%v)", err)
		}
		run(t, tab, "sign out", chromedp.Click(chromedp.CSS(`[data-testid=sign-out]`)))
		waitJS(t, tab, 30*time.Second, "the sign-in page after signing out", `document.querySelector("#sign-in")`)
		if left, _ := eval[string](tab, `sessionStorage.getItem("ichor.refresh") ?? ""`); left != "" {
			t.Error("the refresh token stayed in sessionStorage after signing out")
		}
		form := url.Values{"client_id": {"ichor-ui"}, "grant_type": {"refresh_token"}, "refresh_token": {rt}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ui.url+"/oidc/token", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := ui.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("the refresh token still works after signing out: %d", resp.StatusCode)
		}
	})

	step("a viewer sees no Approve or Remove and the backend refuses a forged approval", func(t *testing.T) {
		vt := newTab(t, browser)
		signIn(t, vt, ui, viewer, "")
		name := pending.Metadata.Name
		navigate(t, vt, "/add-node")
		waitJS(t, vt, 30*time.Second, "the pending machine on Add node", fmt.Sprintf(`document.querySelector('[data-pending=%s]')`, jsString(name)))
		if n, _ := eval[int](vt, `document.querySelectorAll('[data-testid^="approve-"]').length`); n != 0 {
			t.Errorf("a viewer sees %d Approve buttons", n)
		}
		if n, _ := eval[int](vt, `document.querySelectorAll('#disc-addresses').length`); n != 0 {
			t.Error("a viewer sees the register form")
		}
		screenshot(t, vt, "11-viewer-add-node")
		navigate(t, vt, "/nodes/"+workers[len(workers)-1].Metadata.Name)
		waitJS(t, vt, 30*time.Second, "the node page", `document.querySelector("#tab-panel")`)
		if n, _ := eval[int](vt, `document.querySelectorAll('[data-testid=remove-node]').length`); n != 0 {
			t.Error("a viewer sees the Remove button")
		}
		// The viewer's own token, taken the way the console takes it (the
		// rotated refresh token is put back), on a hand-made approval.
		got, err := eval[string](vt, fmt.Sprintf(`(async () => {
			const rt = sessionStorage.getItem("ichor.refresh");
			const r = await fetch("/oidc/token", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
				body: new URLSearchParams({client_id: "ichor-ui", grant_type: "refresh_token", refresh_token: rt}).toString()});
			const tok = await r.json();
			if (!r.ok) return "refresh " + r.status + " " + JSON.stringify(tok);
			sessionStorage.setItem("ichor.refresh", tok.refresh_token);
			const a = await fetch(%s, {method: "POST", headers: {Authorization: "Bearer " + tok.access_token, "Content-Type": "application/json"},
				body: JSON.stringify({role: "worker"})});
			return a.status + " " + await a.text();
		})()`, jsString("/api/v1/machines/"+url.PathEscape(name)+":approve")))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, "403 ") {
			t.Fatalf("a viewer's forged approval answered %q, want 403", got)
		}
		t.Logf("the forged approval: %s", got)
		ms, err := w.list(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Metadata.Name == name && m.Spec.Approval.State != "pending" {
				t.Fatalf("the viewer's refused approval changed %s to %s", name, m.Spec.Approval.State)
			}
		}
	})

	step("a viewer reads the settings and sees no Save", func(t *testing.T) {
		vt := newTab(t, browser)
		signIn(t, vt, ui, viewer, "")
		navigate(t, vt, "/settings")
		waitJS(t, vt, 30*time.Second, "the Settings page for a viewer", `document.querySelector("#id-token-lifetime")?.disabled && document.querySelector("[data-testid=settings-viewer]")`)
		if n, _ := eval[int](vt, `document.querySelectorAll("[data-testid=settings-save]").length`); n != 0 {
			t.Error("a viewer sees the Save button of Settings")
		}
		screenshot(t, vt, "14-settings-viewer")
	})

	t.Logf("browser test: %s (with the CLI scenario when it ran first)", time.Since(start).Round(time.Second))
}

// TestBrowserAccessibility runs axe-core on every page of the console and
// on the issuer's login form, at 1280 px in the light theme and at 390 px in
// the dark one: no serious or critical violation (contrast among them). It
// only reads: it starts from the world the browser test leaves.
func TestBrowserAccessibility(t *testing.T) {
	w := approvedWorld(t)
	ui := startedUI(t, w)
	script := axeScript(t)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	user := w.createUser(t, ctx, "e2e-a11y", "admin")

	ms, err := w.list(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var cp string

	for _, m := range ms {
		if m.Spec.Role == "controlplane" && m.ready() {
			cp = m.Metadata.Name

			break
		}
	}

	if cp == "" {
		t.Fatalf("no Ready control plane to open:\n%s", describe(ms))
	}

	tab := newBrowser(t)

	run(t, tab, "open the console", chromedp.Navigate(ui.url+"/"))
	waitJS(t, tab, 30*time.Second, "the issuer's login form", `document.querySelector("input#password")`)
	checkAccessibility(t, tab, script, "the login form")
	run(t, tab, "a wrong password",
		chromedp.SendKeys(chromedp.ID("username"), user.Name),
		chromedp.SendKeys(chromedp.ID("password"), "not-the-password"),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
	)
	waitJS(t, tab, 30*time.Second, "the login form again, with the focus on the password",
		`document.querySelector("#login-error") && document.activeElement?.id === "password"`)
	screenshot(t, tab, "20-login-failed")
	checkAccessibility(t, tab, script, "the login form after a failure")
	run(t, tab, "the right password",
		chromedp.SendKeys(chromedp.ID("password"), user.Password),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
	)
	waitJS(t, tab, 30*time.Second, "the console after the sign-in", `document.querySelector("[data-testid=user]")?.textContent === "ichor:e2e-a11y"`)
	waitJS(t, tab, 30*time.Second, "live", `document.querySelector("[data-testid=connection]")?.dataset.state === "live"`)

	pages := []string{"/", "/nodes", "/add-node", "/nodes/" + cp, "/nodes/" + cp + "/storage", "/nodes/" + cp + "/talos",
		"/nodes/" + cp + "/kubernetes", "/nodes/" + cp + "/config", "/nodes/" + cp + "/logs", "/operations", "/settings",
		"/configuration", "/configuration/new", "/cilium", "/users"}

	for _, v := range []struct {
		name          string
		width, height int64
		dark          bool
	}{{"1280 px, light", 1280, 900, false}, {"390 px, dark", 390, 844, true}} {
		run(t, tab, v.name, chromedp.EmulateViewport(v.width, v.height))

		if _, err := eval[bool](tab, fmt.Sprintf(`(document.documentElement.classList.toggle("dark", %t), true)`, v.dark)); err != nil {
			t.Fatal(err)
		}

		for i, p := range pages {
			navigate(t, tab, p)
			waitJS(t, tab, time.Minute, p+" loaded", `document.querySelector("#main h1") && !document.querySelector("[data-loading]")`)
			// Focus is on the page's heading (the first page is where the
			// sign-in left the browser), and the title names the page.
			if i != 0 || v.dark {
				waitJS(t, tab, 5*time.Second, p+": focus on the page's heading", `document.activeElement === document.querySelector("#main h1")`)
			}
			if title, _ := eval[string](tab, `document.title`); !strings.HasSuffix(title, " · e2e · Ichor") || strings.HasPrefix(title, "Ichor") {
				t.Errorf("%s: the title %q does not name the page and the cluster", p, title)
			}
			time.Sleep(300 * time.Millisecond) // the colour transitions
			checkAccessibility(t, tab, script, p+" at "+v.name)
			if v.width < 640 {
				screenshot(t, tab, fmt.Sprintf("21-a11y-390px-dark-%02d", i))
				checkFits(t, tab, p+" at "+v.name)
			}
		}
	}

	// The Cilium page's upgrade dialog: the world boots Cilium at the older
	// chart (bootCilium), so the page offers the newer one; the dialog shows
	// the server's preview and is closed again without starting anything.
	navigate(t, tab, "/cilium")
	waitJS(t, tab, time.Minute, "the Cilium page offers "+nextCilium,
		`document.querySelector("[data-testid=cilium-upgrade-open]")?.textContent.includes("`+nextCilium+`")`)
	run(t, tab, "open the upgrade dialog", chromedp.Click(chromedp.CSS(`[data-testid=cilium-upgrade-open]`)))
	waitJS(t, tab, 30*time.Second, "the dialog with the preview", `document.querySelector("[data-testid=cilium-upgrade-explain]") && !document.querySelector("[data-loading]")`)
	time.Sleep(300 * time.Millisecond)
	checkAccessibility(t, tab, script, "the Cilium upgrade dialog")
	screenshot(t, tab, "22-cilium-upgrade-dialog")
	run(t, tab, "cancel the dialog", chromedp.Click(chromedp.CSS(`[data-testid=cilium-upgrade-dialog] button[type=button]`)))
	waitJS(t, tab, 10*time.Second, "the dialog closed", `!document.querySelector("[data-testid=cilium-upgrade-dialog]")`)
}
