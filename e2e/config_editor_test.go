package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// setField sets a form control of the console by id, as a person's input
// and change would, and waits for the console to re-render.
func setField(t *testing.T, tab context.Context, id, value string) {
	t.Helper()
	waitJS(t, tab, 10*time.Second, "the field "+id, fmt.Sprintf(`!!document.getElementById(%s)`, jsString(id)))
	if _, err := eval[bool](tab, fmt.Sprintf(`(() => { const e = document.getElementById(%s); e.value = %s;
		e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`,
		jsString(id), jsString(value))); err != nil {
		t.Fatalf("set %s: %v", id, err)
	}
}

func click(t *testing.T, tab context.Context, what, css string) {
	t.Helper()
	waitJS(t, tab, 10*time.Second, what, fmt.Sprintf(`(() => { const b = document.querySelector(%s); return !!b && !b.disabled; })()`, jsString(css)))
	run(t, tab, what, chromedp.Click(chromedp.CSS(css)))
}

// impactModes reads the impact preview: machine -> mode.
func impactModes(t *testing.T, tab context.Context) map[string]string {
	t.Helper()
	raw, err := eval[string](tab, `JSON.stringify(Object.fromEntries([...document.querySelectorAll("[data-testid=impact] tr[data-machine]")].map(r => [r.dataset.machine, r.querySelector("[data-mode]")?.dataset.mode ?? ""])))`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// converged waits until the controller rendered and applied the current
// configuration of the machine (`ichor config diff -o json`: the render of
// now is the recorded rendered and applied hash).
func (w *world) converged(t *testing.T, ctx context.Context, name string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		out, err := w.ichor(ctx, "config", "diff", name, "-o", "json")
		var d struct {
			UpToDate bool `json:"upToDate"`
			Applies  bool `json:"appliedMatches"`
		}
		if err == nil && json.Unmarshal([]byte(out), &d) == nil && d.UpToDate && d.Applies {
			return
		}
		last = out
		if time.Now().After(deadline) {
			t.Fatalf("%s did not converge on its new configuration within %s: %v\n%s", name, timeout, err, last)
		}
		time.Sleep(time.Second)
	}
}

// TestBrowserConfigEditor: an operator creates a cluster-layer sysctl patch
// and a machine-layer VLAN patch through the Configuration page's generated
// forms, sees the impact preview name the machines and their modes, saves,
// and the machines converge; a privileged document is not offered to the
// operator; a viewer sees the patches and no edit controls.
func TestBrowserConfigEditor(t *testing.T) {
	w := approvedWorld(t)
	ui := startedUI(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	operator := w.createUser(t, ctx, "e2e-cfg-operator", "operator")
	viewer := w.createUser(t, ctx, "e2e-cfg-viewer", "viewer")

	ms, err := w.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ready []string
	var worker string
	for _, m := range ms {
		if m.ready() && m.Metadata.DeletionTimestamp == nil {
			ready = append(ready, m.Metadata.Name)
			if m.Spec.Role == "worker" && worker == "" {
				worker = m.Metadata.Name
			}
		}
	}
	if len(ready) < 2 || worker == "" {
		t.Fatalf("want Ready machines, a worker among them:\n%s", describe(ms))
	}

	// The patches stay for no other test: remove them, through the CLI.
	t.Cleanup(func() {
		for _, p := range []string{"e2e-sysctl", "e2e-vlan"} {
			_, _ = w.ichor(context.Background(), "patch", "delete", p, "--yes")
		}
	})

	tab := newBrowser(t)
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("operator creates a cluster-layer sysctl patch", func(t *testing.T) {
		signIn(t, tab, ui, operator, "")
		navigate(t, tab, "/configuration")
		waitJS(t, tab, 30*time.Second, "the Configuration page with New patch", `!!document.querySelector("a[href='/configuration/new']")`)
		navigate(t, tab, "/configuration/new")
		waitJS(t, tab, 30*time.Second, "the new patch form", `!!document.getElementById("patch-name")`)
		if priv, _ := eval[bool](tab, `[...document.querySelectorAll("#add-kind option")].some(o => o.value === "TrustedRootsConfig")`); priv {
			t.Fatal("a privileged kind (TrustedRootsConfig) is offered to an operator")
		}
		setField(t, tab, "patch-name", "e2e-sysctl")
		setField(t, tab, "add-kind", "SysctlConfig")
		click(t, tab, "add the SysctlConfig document", "[data-testid=add-document]")
		setField(t, tab, "doc0-params-new", "net.core.somaxconn")
		click(t, tab, "add the key", "[data-testid='add-SysctlConfig:params']")
		setField(t, tab, "doc0-params-net_core_somaxconn", "4096")
		click(t, tab, "preview", "[data-testid=patch-preview]")
		waitJS(t, tab, time.Minute, "the impact preview", `document.querySelectorAll("[data-testid=impact] tr[data-machine]").length > 0`)
		screenshot(t, tab, "30-config-sysctl-preview")
		modes := impactModes(t, tab)
		for _, name := range ready {
			if modes[name] != "no-reboot" {
				t.Errorf("the preview must name %s with no-reboot: %v", name, modes)
			}
		}
		click(t, tab, "save", "[data-testid=patch-save]")
		waitJS(t, tab, 30*time.Second, "the patch in the cluster layer", `!!document.querySelector("table[aria-label='cluster layer patches'] tr[data-patch=e2e-sysctl]")`)
		screenshot(t, tab, "31-config-list")
		for _, name := range ready {
			w.converged(t, ctx, name, 4*time.Minute)
		}
	})

	step("operator creates a machine-layer VLAN patch", func(t *testing.T) {
		navigate(t, tab, "/configuration/new")
		waitJS(t, tab, 30*time.Second, "the new patch form", `!!document.getElementById("patch-name")`)
		setField(t, tab, "patch-name", "e2e-vlan")
		setField(t, tab, "patch-layer", "machine")
		setField(t, tab, "patch-machine", worker)
		setField(t, tab, "add-kind", "VLANConfig")
		click(t, tab, "add the VLANConfig document", "[data-testid=add-document]")
		setField(t, tab, "doc0-name", "eth0.10")
		setField(t, tab, "doc0-vlanID", "10")
		// First without the parent link: machinery's refusal lands on the field.
		click(t, tab, "preview without the parent", "[data-testid=patch-preview]")
		waitJS(t, tab, time.Minute, "the error on the parent field",
			`(document.querySelector("[data-field='VLANConfig:parent'] [data-testid=field-error]")?.textContent ?? "").includes("parent")`)
		if ok, _ := eval[bool](tab, `document.querySelector("[data-testid=patch-save]").disabled`); !ok {
			t.Fatal("an invalid patch must not be saved")
		}
		screenshot(t, tab, "32-config-vlan-invalid")
		setField(t, tab, "doc0-parent", "eth0")
		click(t, tab, "preview", "[data-testid=patch-preview]")
		waitJS(t, tab, time.Minute, "the impact preview of the VLAN", fmt.Sprintf(`!!document.querySelector(%s)`, jsString("[data-testid=impact] tr[data-machine='"+worker+"']")))
		modes := impactModes(t, tab)
		if len(modes) != 1 || modes[worker] != "no-reboot" {
			t.Fatalf("the machine-layer patch must name %s alone, no-reboot: %v", worker, modes)
		}
		screenshot(t, tab, "33-config-vlan-preview")
		click(t, tab, "save", "[data-testid=patch-save]")
		waitJS(t, tab, 30*time.Second, "the patch in the machine layer", `!!document.querySelector("table[aria-label='machine layer patches'] tr[data-patch=e2e-vlan]")`)
		w.converged(t, ctx, worker, 4*time.Minute)
	})

	step("viewer sees the patches and no edit controls", func(t *testing.T) {
		vtab := newBrowser(t)
		signIn(t, vtab, ui, viewer, "")
		navigate(t, vtab, "/configuration")
		waitJS(t, vtab, 30*time.Second, "the patches", `!!document.querySelector("tr[data-patch=e2e-sysctl]") && !!document.querySelector("tr[data-patch=e2e-vlan]")`)
		text := pageText(vtab)
		if strings.Contains(text, "New patch") {
			t.Fatalf("a viewer is offered New patch:\n%s", text)
		}
		if n, _ := eval[int](vtab, `document.querySelectorAll("[data-testid^=delete-]").length`); n != 0 {
			t.Fatalf("a viewer is offered %d Delete buttons", n)
		}
		navigate(t, vtab, "/configuration/patches/e2e-sysctl")
		waitJS(t, vtab, 30*time.Second, "the patch, read-only", `!!document.querySelector("[data-document=SysctlConfig]") && !document.querySelector("[data-testid=patch-save]")`)
		screenshot(t, vtab, "34-config-viewer")
	})
}
