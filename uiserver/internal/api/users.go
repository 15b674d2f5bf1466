package api

import (
	"context"
	"errors"
	"slices"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// UserService implements the UI API's UserService (the Users page): Ichor's
// own users as `ichor user` manages them. The IchorUser is read and written
// as the signed-in user, so the API server's RBAC decides (ichor-admin
// creates and updates them); a password hash is written by ichor-ui's own
// identity into the Secret ichor-user-credentials, only after an access
// review of `update` on `ichorusers/password` as the signed-in user. No
// answer carries a hash; a generated password is returned once.
type UserService struct {
	ichorv1.UnimplementedUserServiceServer
	Deps
	// Passwords is ichor-ui's own identity: it reads the IchorUser and
	// writes the hash into ichor-user-credentials (get and update on that
	// one Secret); nil refuses password writes.
	Passwords client.Client
}

// ListUsers implements UserService.
func (s *UserService) ListUsers(ctx context.Context, _ *ichorv1.ListUsersRequest) (*ichorv1.ListUsersResponse, error) {
	list := &ichorv1alpha1.IchorUserList{}
	if err := s.Clients.User.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, "listing Ichor's users")
	}

	out := &ichorv1.ListUsersResponse{Users: []*ichorv1.User{}}
	for i := range list.Items {
		out.Users = append(out.Users, userToProto(&list.Items[i]))
	}

	sort.Slice(out.Users, func(i, j int) bool { return out.Users[i].Name < out.Users[j].Name })

	return out, nil
}

func userToProto(u *ichorv1alpha1.IchorUser) *ichorv1.User {
	return &ichorv1.User{
		Name: u.Name, Username: "ichor:" + u.Name, DisplayName: u.Spec.DisplayName, Email: u.Spec.Email,
		Roles: append([]string{}, u.Spec.Roles...), Disabled: u.Spec.Disabled, LastSignIn: ts(u.Status.LastSignIn),
		PasswordSet: u.Status.PasswordSet, ResourceVersion: u.ResourceVersion,
	}
}

// CreateUser implements UserService: the IchorUser is created as the
// signed-in user, then its generated password is hashed and stored; when
// that fails the user is deleted again, so nothing is half-created.
func (s *UserService) CreateUser(ctx context.Context, req *ichorv1.CreateUserRequest) (*ichorv1.CreateUserResponse, error) {
	const what = "creating an Ichor user"

	if err := userpass.ValidateName(req.GetName()); err != nil {
		return nil, invalid("%s: %v; nothing was created", what, err)
	}

	if err := userpass.CheckRoles(req.GetRoles()); err != nil {
		return nil, invalid("%s: %v; nothing was created", what, err)
	}

	// The password is written by ichor-ui: the person must hold the right to
	// set one before anything is created.
	if err := s.authorizePassword(ctx); err != nil {
		return nil, apiError(ctx, err, what+" "+req.GetName())
	}

	display := req.GetDisplayName()
	if display == "" {
		display = req.GetName()
	}

	spec := ichorv1alpha1.IchorUserSpec{DisplayName: display, Email: req.GetEmail(), Roles: slices.Clone(req.GetRoles())}

	// The IchorUser as the signed-in person, the hash as ichor-ui; undone when the hash cannot be stored.
	pw, err := userpass.CreateAs(ctx, s.Clients.User, s.Passwords, s.Clients.Namespace, spec, req.GetName())

	switch {
	case errors.Is(err, userpass.ErrUserExists):
		return nil, status.Errorf(codes.AlreadyExists, "%s: the user %s exists already; reset its password instead", what, req.GetName())
	case errors.Is(err, userpass.ErrPasswordNotStored):
		return nil, status.Errorf(codes.Unavailable, "%s: %v", what, err)
	case err != nil:
		return nil, apiError(ctx, err, what+" "+req.GetName())
	}

	u := &ichorv1alpha1.IchorUser{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: req.GetName()}, u); err != nil {
		return nil, apiError(ctx, err, what+": reading the new user "+req.GetName())
	}

	return &ichorv1.CreateUserResponse{User: userToProto(u), Password: pw}, nil
}

// authorizePassword checks, as the signed-in user, `update` on ichorusers/password.
func (s *UserService) authorizePassword(ctx context.Context) error {
	if s.Passwords == nil {
		return status.Error(codes.FailedPrecondition, "this ichor-ui does not write passwords (Ichor's users are off); use `ichor user set-password`")
	}

	return s.Clients.AuthorizeSubresource(ctx, guard.VerbUpdate, guard.ResourceIchorUsers, guard.SubresourcePassword)
}

// UpdateUser implements UserService, as the signed-in user; bad input
// changes nothing.
func (s *UserService) UpdateUser(ctx context.Context, req *ichorv1.UpdateUserRequest) (*ichorv1.UpdateUserResponse, error) {
	what := "changing Ichor user " + req.GetName()

	if req.GetName() == "" {
		return nil, invalid("changing an Ichor user: name the user; nothing was changed")
	}

	if err := userpass.CheckRoles(req.GetRoles()); err != nil {
		return nil, invalid("%s: %v; nothing was changed", what, err)
	}

	var out *ichorv1alpha1.IchorUser

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := &ichorv1alpha1.IchorUser{}
		if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: req.GetName()}, u); err != nil {
			return err
		}

		if rv := req.GetResourceVersion(); rv != "" && rv != u.ResourceVersion {
			return status.Errorf(codes.Aborted, "%s: the user changed since it was read (resource_version %s, now %s); reload and try again", what, rv, u.ResourceVersion)
		}

		if req.GetDisplayName() != "" {
			u.Spec.DisplayName = req.GetDisplayName()
		}

		u.Spec.Email, u.Spec.Roles, u.Spec.Disabled = req.GetEmail(), slices.Clone(req.GetRoles()), req.GetDisabled()
		if err := s.Clients.User.Update(ctx, u); err != nil {
			return err
		}

		out = u

		return nil
	})
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.UpdateUserResponse{User: userToProto(out)}, nil
}

// ResetPassword implements UserService: an access review of `update` on
// ichorusers/password as the signed-in user, then ichor-ui writes the hash.
func (s *UserService) ResetPassword(ctx context.Context, req *ichorv1.ResetPasswordRequest) (*ichorv1.ResetPasswordResponse, error) {
	what := "setting the password of Ichor user " + req.GetName()

	if err := userpass.ValidateName(req.GetName()); err != nil {
		return nil, invalid("%s: %v; nothing was changed", what, err)
	}

	pw, generated := req.GetPassword(), false
	if pw == "" {
		var err error
		if pw, err = userpass.Generate(); err != nil {
			return nil, status.Errorf(codes.Internal, "%s: generating a password: %v", what, err)
		}

		generated = true
	} else if len(pw) < userpass.MinLength {
		return nil, invalid("%s: the password is shorter than %d characters: give a longer one, or none to have one generated; nothing was changed", what, userpass.MinLength)
	}

	if err := s.authorizePassword(ctx); err != nil {
		return nil, apiError(ctx, err, what)
	}

	// The user must be visible to the person too (the API server decides).
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: req.GetName()}, &ichorv1alpha1.IchorUser{}); err != nil {
		return nil, apiError(ctx, err, what)
	}

	if err := userpass.Set(ctx, s.Passwords, s.Clients.Namespace, req.GetName(), pw); err != nil {
		return nil, status.Errorf(codes.Unavailable, "%s: %s; the password was not changed", what, apiMessage(err))
	}

	out := &ichorv1.ResetPasswordResponse{}
	if generated {
		out.Password = pw
	}

	return out, nil
}
