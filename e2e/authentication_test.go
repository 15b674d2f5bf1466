package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestAuthenticationCLI: `ichor cluster authentication` reads and changes
// spec.authentication as the kubeconfig's user: an operator is refused
// naming the permission, a provider the kube-apiserver would refuse is
// refused by field (both write nothing), an admin's provider is written and
// the control planes then wait for a kube-apiserver restart, which `get`
// names; --no-external takes it away again and the wait ends.
func TestAuthenticationCLI(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	stored := func() map[string]any {
		t.Helper()

		out := w.mustIchor(t, ctx, "cluster", "authentication", "get", "-o", "json")

		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("ichor cluster authentication get -o json: %v\n%s", err, out)
		}

		return v
	}

	before := stored()
	if before["external"] != nil {
		t.Fatalf("the world starts with an external provider: %v", before)
	}

	t.Cleanup(func() { _, _ = w.ichor(context.Background(), "cluster", "authentication", "set", "--no-external") })

	operator := w.impersonating(t, "e2e-operator", "ichor:operator", "system:authenticated")

	out, err := w.ichor(ctx, "--kubeconfig", operator, "cluster", "authentication", "set",
		"--external-issuer-url", "https://login.example.com/realms/main", "--audience", "kubernetes")
	if err == nil || !strings.Contains(out, "`update` on `talosclusters/authentication`") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("an operator's change: %v\n%s", err, out)
	}

	out, err = w.ichor(ctx, "cluster", "authentication", "set",
		"--external-issuer-url", "https://login.example.com/realms/main", "--audience", "kubernetes", "--audience", "kubernetes")
	if err == nil || !strings.Contains(out, "spec.authentication.external") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("a provider with a duplicate audience: %v\n%s", err, out)
	}

	if got := stored(); got["external"] != nil {
		t.Fatalf("a refused change was written: %v", got)
	}

	out = w.mustIchor(t, ctx, "cluster", "authentication", "set",
		"--external-issuer-url", "https://login.example.com/realms/main", "--audience", "kubernetes", "--username-claim", "email")
	if !strings.Contains(out, "is written") || !strings.Contains(out, "ichor config apply") {
		t.Fatalf("ichor cluster authentication set printed: %s", out)
	}

	ext, _ := stored()["external"].(map[string]any)
	if ext["issuerURL"] != "https://login.example.com/realms/main" || ext["usernameClaim"] != "email" {
		t.Fatalf("stored external provider: %v", ext)
	}

	waitFor := func(want bool) {
		t.Helper()

		deadline := time.Now().Add(2 * time.Minute)

		for {
			out := w.mustIchor(t, ctx, "cluster", "authentication", "get")
			if strings.Contains(out, "Waiting for a kube-apiserver restart") == want {
				if want && !strings.Contains(out, "login.example.com") {
					t.Fatalf("get does not show the provider: %s", out)
				}

				return
			}

			if time.Now().After(deadline) {
				t.Fatalf("waiting for the restart notice to be %v:\n%s", want, out)
			}

			time.Sleep(2 * time.Second)
		}
	}
	waitFor(true)

	out = w.mustIchor(t, ctx, "cluster", "authentication", "set", "--no-external")
	if !strings.Contains(out, "is written") {
		t.Fatalf("--no-external printed: %s", out)
	}

	if got := stored(); got["external"] != nil {
		t.Fatalf("after --no-external: %v", got)
	}

	waitFor(false)
}
