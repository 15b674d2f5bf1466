package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/alexedwards/argon2id"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
)

// storedHash is the argon2id hash the credentials Secret of ns holds for alice.
func storedHash(t *testing.T, ns string) string {
	t.Helper()
	s := &corev1.Secret{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: userpass.CredentialsSecret}, s))
	return string(s.Data["alice"])
}

func matches(t *testing.T, password, hash string) bool {
	t.Helper()
	ok, err := argon2id.ComparePasswordAndHash(password, hash)
	if err != nil {
		t.Fatalf("the stored hash is not argon2id: %v", err)
	}
	return ok
}

func TestUserCreateSetPasswordList(t *testing.T) {
	ns := namespace(t, "users")
	mustFail(t, ichor(t, "user", "create", "alice", "-n", ns), "--role is required", "viewer, operator, admin")
	mustFail(t, ichor(t, "user", "create", "alice", "--role", "root", "-n", ns), `--role "root" is not a role`)
	mustFail(t, ichor(t, "user", "create", "Alice_1", "--role", "admin", "-n", ns), "not a valid IchorUser name")

	r := mustSucceed(t, ichor(t, "user", "create", "alice", "--role", "admin", "--display-name", "Alice A.", "-o", "json", "-n", ns))
	var got struct{ Name, Username, Password string }
	must(t, json.Unmarshal([]byte(r.stdout), &got))
	if got.Name != "alice" || got.Username != "ichor:alice" || len(got.Password) < 20 {
		t.Fatalf("create printed %+v", got)
	}
	u := &ichorv1alpha1.IchorUser{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "alice"}, u))
	if u.Spec.DisplayName != "Alice A." || len(u.Spec.Roles) != 1 || u.Spec.Roles[0] != "admin" {
		t.Fatalf("IchorUser spec: %+v", u.Spec)
	}
	first := storedHash(t, ns)
	if !matches(t, got.Password, first) {
		t.Fatal("the stored hash does not match the printed password")
	}
	if strings.Contains(r.stderr, got.Password) {
		t.Fatal("the password went to standard error")
	}

	// A second create changes nothing and says what to run instead.
	mustFail(t, ichor(t, "user", "create", "alice", "--role", "viewer", "-n", ns), "exists already", "ichor user set-password alice")
	if storedHash(t, ns) != first {
		t.Fatal("a refused create changed the password")
	}

	// A table create shows the password once, in words.
	v := mustSucceed(t, ichor(t, "user", "create", "victor", "--role", "viewer", "-n", ns))
	if !strings.Contains(v.stdout, "User victor created. Its password, shown only now:") {
		t.Fatalf("create output:\n%s", v.stdout)
	}

	// A short password from standard input is refused and changes nothing.
	mustFail(t, ichorWith(t, invocation{stdin: "short\n"}, "user", "set-password", "alice", "--password-file", "-", "-n", ns), "shorter than 12 characters")
	if storedHash(t, ns) != first {
		t.Fatal("a refused set-password changed the password")
	}
	mustSucceed(t, ichorWith(t, invocation{stdin: "a-long-enough-password\n"}, "user", "set-password", "alice", "--password-file", "-", "-n", ns))
	if !matches(t, "a-long-enough-password", storedHash(t, ns)) {
		t.Fatal("set-password from standard input did not store the password")
	}
	gen := mustSucceed(t, ichor(t, "user", "set-password", "alice", "-o", "json", "-n", ns))
	must(t, json.Unmarshal([]byte(gen.stdout), &got))
	if !matches(t, got.Password, storedHash(t, ns)) {
		t.Fatal("a generated password was not stored")
	}
	mustFail(t, ichor(t, "user", "set-password", "nobody", "-n", ns), "no IchorUser", "create the user")

	l := mustSucceed(t, ichor(t, "user", "list", "-n", ns))
	if !strings.Contains(l.stdout, "alice") || !strings.Contains(l.stdout, "Alice A.") || !strings.Contains(l.stdout, "victor") {
		t.Fatalf("list:\n%s", l.stdout)
	}
	for _, secret := range []string{first, got.Password} {
		if strings.Contains(l.all(), secret) {
			t.Fatal("list shows a password or a hash")
		}
	}
}
