package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUserUpdateCLI: `ichor user update` changes a user's roles and
// disables and enables them, as the Users page does; contradictory or
// made-up flags are refused with nothing changed.
func TestUserUpdateCLI(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const name = "e2e-cli-user"

	w.mustIchor(t, ctx, "-n", icNamespace, "user", "create", name, "--role", "viewer")
	t.Cleanup(func() { _, _ = w.kubectl(context.Background(), "delete", "ichoruser", "-n", icNamespace, name) })

	state := func() string {
		t.Helper()

		out, err := w.kubectl(ctx, "get", "ichoruser", "-n", icNamespace, name, "-o", "jsonpath={.spec.roles}/{.spec.disabled}")
		if err != nil {
			t.Fatal(err)
		}

		return out
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "root"}, `--role "root" is not a role`},
		{[]string{"--disable", "--enable"}, "--disable and --enable together"},
		{nil, "nothing to change"},
	} {
		out, err := w.ichor(ctx, append([]string{"-n", icNamespace, "user", "update", name}, bad.args...)...)
		if err == nil || !strings.Contains(out, bad.want) {
			t.Fatalf("ichor user update %v: %v\n%s", bad.args, err, out)
		}
	}

	if got := state(); got != `["viewer"]/` {
		t.Fatalf("refused updates changed the user: %s", got)
	}

	w.mustIchor(t, ctx, "-n", icNamespace, "user", "update", name, "--role", "operator", "--role", "viewer", "--disable")

	if got := state(); got != `["operator","viewer"]/true` {
		t.Fatalf("after --role operator --role viewer --disable: %s", got)
	}

	w.mustIchor(t, ctx, "-n", icNamespace, "user", "update", name, "--enable")

	if got := state(); got != `["operator","viewer"]/` { // disabled: false is omitted
		t.Fatalf("after --enable: %s", got)
	}
}
