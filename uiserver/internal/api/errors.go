package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// refused returns the status of a change the guard checks refused: nothing
// was written. code is FailedPrecondition (the cluster's state forbids it) or
// InvalidArgument (the request is wrong).
func refused(code codes.Code, what string, refusals []guard.Refusal) error {
	lines := make([]string, 0, len(refusals))
	d := &ichorv1.RefusalDetails{}
	for _, r := range refusals {
		lines = append(lines, r.Error())
		d.Refusals = append(d.Refusals, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
	}
	st := status.New(code, fmt.Sprintf("%s is refused; nothing was changed: %s", what, strings.Join(lines, "; ")))
	if withDetails, err := st.WithDetails(d); err == nil {
		st = withDetails
	}
	return st.Err()
}

// invalid is a request that is wrong on its face.
func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// apiError maps an error of the API server (or of the backend's checks) to a
// gRPC status that says what was refused and why; what names the action.
func apiError(ctx context.Context, err error, what string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	user := "the signed-in user"
	if id, ok := identity.From(ctx); ok {
		user = fmt.Sprintf("user %q", id.Username)
	}
	var forbidden *kube.Forbidden
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, kube.ErrNoIdentity):
		return status.Error(codes.Unauthenticated, "sign in first: "+err.Error())
	case errors.Is(err, identity.ErrNotAllowed):
		return status.Errorf(codes.PermissionDenied, "%s: %v", what, err)
	case errors.As(err, &forbidden):
		return status.Errorf(codes.PermissionDenied, "%s: %v", what, err)
	case apierrors.IsForbidden(err):
		return status.Errorf(codes.PermissionDenied,
			"%s: the Kubernetes API server refused it for %s (403 Forbidden): %s; the roles ichor-operator and ichor-admin grant it",
			what, user, apiMessage(err))
	case apierrors.IsUnauthorized(err):
		return status.Errorf(codes.Unauthenticated, "%s: the Kubernetes API server did not accept ichor-ui's credentials: %s", what, apiMessage(err))
	case apierrors.IsNotFound(err):
		return status.Errorf(codes.NotFound, "%s: %s", what, apiMessage(err))
	case apierrors.IsConflict(err):
		return status.Errorf(codes.Aborted, "%s: the object changed meanwhile; reload and try again: %s", what, apiMessage(err))
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return status.Errorf(codes.InvalidArgument, "%s: %s", what, apiMessage(err))
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return status.Errorf(codes.OutOfRange, "%s: the resume token expired; start again without it: %s", what, apiMessage(err))
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err):
		return status.Errorf(codes.Unavailable, "%s: %s", what, apiMessage(err))
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}
