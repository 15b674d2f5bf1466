package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func usersAPI(t testing.TB, tok string) ichorv1.UserServiceClient {
	return ichorv1.NewUserServiceClient(grpcConn(t, tok))
}

// umaSignsIn reports whether the user uma signs in with password.
func umaSignsIn(t *testing.T, password string) bool {
	t.Helper()

	c := browser(t)
	_, challenge := pkce()

	return login(t, c, authorize(t, c, challenge), "uma", password).status == http.StatusFound
}

func wantCode(t *testing.T, what string, err error, code codes.Code, texts ...string) {
	t.Helper()

	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}

	for _, s := range texts {
		if !strings.Contains(status.Convert(err).Message(), s) {
			t.Fatalf("%s: %q does not say %q", what, status.Convert(err).Message(), s)
		}
	}
}

// TestUsersPage: the Users page's API. An admin creates a user (the
// generated password is returned once and signs in), changes their roles,
// resets their password (the old one stops working, the new one signs in)
// and disables them (no sign-in, the running session ends). A viewer lists
// but changes nothing; an operator may not set a password; bad input is
// refused with nothing written. No answer holds the stored hash.
func TestUsersPage(t *testing.T) {
	ctx := context.Background()
	asAdmin, viewerAPI, operatorAPI := usersAPI(t, adminTok(t)), usersAPI(t, viewer(t)), usersAPI(t, operator(t))

	// Refusals first: nothing is created.
	_, err := viewerAPI.CreateUser(ctx, &ichorv1.CreateUserRequest{Name: "uma", Roles: []string{"operator"}})
	wantCode(t, "a viewer's CreateUser", err, codes.PermissionDenied, "ichorusers/password")

	_, err = asAdmin.CreateUser(ctx, &ichorv1.CreateUserRequest{Name: "Uma_X", Roles: []string{"operator"}})
	wantCode(t, "a bad name", err, codes.InvalidArgument, "not a valid IchorUser name", "nothing was created")

	_, err = asAdmin.CreateUser(ctx, &ichorv1.CreateUserRequest{Name: "uma"})
	wantCode(t, "no role", err, codes.InvalidArgument, "one or more roles")

	_, err = asAdmin.CreateUser(ctx, &ichorv1.CreateUserRequest{Name: "uma", Roles: []string{"root"}})
	wantCode(t, "a made-up role", err, codes.InvalidArgument, `role "root" is not a role`)

	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: "uma"}, &ichorv1alpha1.IchorUser{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused CreateUser left the user: %v", err)
	}

	// Create: the password is shown once and signs in.
	created, err := asAdmin.CreateUser(ctx, &ichorv1.CreateUserRequest{Name: "uma", DisplayName: "Uma", Roles: []string{"operator"}})
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &ichorv1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "uma"}})
	})

	if u := created.GetUser(); u.GetUsername() != "ichor:uma" || u.GetDisplayName() != "Uma" || strings.Join(u.GetRoles(), ",") != "operator" ||
		len(created.GetPassword()) < userpass.MinLength {
		t.Fatalf("created %+v", created)
	}

	first := created.GetPassword()
	if !umaSignsIn(t, first) {
		t.Fatal("the created user does not sign in with the password shown")
	}

	_, err = asAdmin.CreateUser(ctx, &ichorv1.CreateUserRequest{Name: "uma", Roles: []string{"viewer"}})
	wantCode(t, "a second uma", err, codes.AlreadyExists, "exists already")

	// Roles: a viewer may not change them; an admin may.
	_, err = viewerAPI.UpdateUser(ctx, &ichorv1.UpdateUserRequest{Name: "uma", Roles: []string{"admin"}})
	wantCode(t, "a viewer's UpdateUser", err, codes.PermissionDenied)

	_, err = asAdmin.UpdateUser(ctx, &ichorv1.UpdateUserRequest{Name: "uma", Roles: nil})
	wantCode(t, "no roles", err, codes.InvalidArgument, "nothing was changed")

	up, err := asAdmin.UpdateUser(ctx, &ichorv1.UpdateUserRequest{Name: "uma", Roles: []string{"viewer", "operator"}, Email: "uma@example.com"})
	if err != nil || strings.Join(up.GetUser().GetRoles(), ",") != "viewer,operator" || up.GetUser().GetEmail() != "uma@example.com" || up.GetUser().GetDisplayName() != "Uma" {
		t.Fatalf("UpdateUser: %+v, %v", up, err)
	}

	// Password: an operator may not set one; a short one is refused; a generated one replaces the first.
	_, err = operatorAPI.ResetPassword(ctx, &ichorv1.ResetPasswordRequest{Name: "uma"})
	wantCode(t, "an operator's ResetPassword", err, codes.PermissionDenied, "ichorusers/password")

	_, err = asAdmin.ResetPassword(ctx, &ichorv1.ResetPasswordRequest{Name: "uma", Password: "short"})
	wantCode(t, "a short password", err, codes.InvalidArgument, "shorter than 12")

	if !umaSignsIn(t, first) {
		t.Fatal("a refused ResetPassword changed the password")
	}

	reset, err := asAdmin.ResetPassword(ctx, &ichorv1.ResetPasswordRequest{Name: "uma"})
	if err != nil || len(reset.GetPassword()) < userpass.MinLength {
		t.Fatalf("ResetPassword: %v, %v", reset, err)
	}

	if umaSignsIn(t, first) || !umaSignsIn(t, reset.GetPassword()) {
		t.Fatal("after the reset the old password must fail and the new one sign in")
	}

	chosen, err := asAdmin.ResetPassword(ctx, &ichorv1.ResetPasswordRequest{Name: "uma", Password: "uma-chosen-password"})
	if err != nil || chosen.GetPassword() != "" || !umaSignsIn(t, "uma-chosen-password") {
		t.Fatalf("a chosen password: %v, %v (a chosen password is never echoed)", chosen, err)
	}

	// Disable: no sign-in, the running session ends.
	session := signIn(t, "uma", "uma-chosen-password")

	if _, err := asAdmin.UpdateUser(ctx, &ichorv1.UpdateUserRequest{Name: "uma", Roles: []string{"operator"}, Disabled: true}); err != nil {
		t.Fatal(err)
	}

	if umaSignsIn(t, "uma-chosen-password") {
		t.Fatal("a disabled user signed in")
	}

	eventuallyRefused(t, session.AccessToken)

	// A viewer lists, and no answer (gRPC or REST) holds the stored hash.
	list, err := viewerAPI.ListUsers(ctx, &ichorv1.ListUsersRequest{})
	if err != nil {
		t.Fatal(err)
	}

	var found *ichorv1.User

	for _, u := range list.GetUsers() {
		if u.GetName() == "uma" {
			found = u
		}
	}

	if found == nil || !found.GetDisabled() {
		t.Fatalf("the list: %v", list.GetUsers())
	}

	sec := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: userpass.CredentialsSecret}, sec); err != nil {
		t.Fatal(err)
	}

	hash := string(sec.Data["uma"])
	if !strings.HasPrefix(hash, "$argon2id$") {
		t.Fatalf("the stored hash of uma is not argon2id: %.10q", hash)
	}

	code, reply := rest(t, httpClient(), http.MethodGet, "/api/v1/users", viewer(t), "")
	body := toJSON(reply)

	if code != http.StatusOK || !strings.Contains(body, `"ichor:uma"`) || strings.Contains(body, "argon2") || strings.Contains(list.String(), "argon2") {
		t.Fatalf("GET /api/v1/users: %d, %s", code, body)
	}

	if strings.Contains(logBuf.String(), hash) || strings.Contains(logBuf.String(), "uma-chosen-password") {
		t.Fatal("the log holds uma's hash or password")
	}
}
