package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSettingsCLI: `ichor settings set` writes Ichor's settings as the
// kubeconfig's user and `ichor settings get` shows them with the defaults in
// force; a value out of range and a viewer are refused with nothing
// changed; --clear brings the default back.
func TestSettingsCLI(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	get := func() map[string]any {
		t.Helper()

		var v struct {
			Settings  map[string]any `json:"settings"`
			Effective map[string]any `json:"effective"`
		}

		out := w.mustIchor(t, ctx, "settings", "get", "-o", "json")
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("ichor settings get -o json: %v\n%s", err, out)
		}

		return map[string]any{"set": v.Settings["idTokenLifetime"], "effective": v.Effective["idTokenLifetime"]}
	}

	t.Cleanup(func() { _, _ = w.ichor(context.Background(), "settings", "set", "--clear", "id-token-lifetime") })

	if got := get(); got["set"] != nil || got["effective"] != "5m" {
		t.Fatalf("before any change: %v, want nothing set and 5m in force", got)
	}

	out, err := w.ichor(ctx, "settings", "set", "--id-token-lifetime", "2h")
	if err == nil || !strings.Contains(out, "id_token_lifetime 2h is out of range: choose between 1m and 1h") || !strings.Contains(out, "the settings were not changed") {
		t.Fatalf("an out-of-range lifetime: %v\n%s", err, out)
	}

	viewer := w.impersonating(t, "e2e-viewer", "ichor:viewer", "system:authenticated")

	out, err = w.ichor(ctx, "--kubeconfig", viewer, "settings", "set", "--id-token-lifetime", "2m")
	if err == nil || !strings.Contains(out, "ichorinstallations") {
		t.Fatalf("a viewer's change: %v\n%s", err, out)
	}

	if got := get(); got["set"] != nil {
		t.Fatalf("a refused change was written: %v", got)
	}

	out = w.mustIchor(t, ctx, "settings", "set", "--id-token-lifetime", "2m")
	if !strings.Contains(out, "id-token-lifetime") || !strings.Contains(out, "2m") {
		t.Fatalf("ichor settings set printed: %s", out)
	}

	if got := get(); got["set"] != "2m0s" || got["effective"] != "2m" {
		t.Fatalf("after the change: %v, want 2m set", got)
	}

	w.mustIchor(t, ctx, "settings", "set", "--clear", "id-token-lifetime")

	if got := get(); got["set"] != nil || got["effective"] != "5m" {
		t.Fatalf("after --clear: %v, want the default", got)
	}
}
