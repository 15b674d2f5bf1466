package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/settings"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// SettingsService implements the UI API's SettingsService: Ichor's runtime
// settings (the IchorInstallation's spec.settings).
type SettingsService struct {
	ichorv1.UnimplementedSettingsServiceServer
	Deps
	// ReadOnly makes UpdateSettings refuse (--settings-read-only).
	ReadOnly bool
}

// GetSettings implements SettingsService. The singleton IchorInstallation is
// read as the signed-in user, so the API server authorizes the read and the
// resourceVersion returned is the current one (UpdateSettings checks it).
func (s *SettingsService) GetSettings(ctx context.Context, _ *ichorv1.GetSettingsRequest) (*ichorv1.GetSettingsResponse, error) {
	inst, err := s.installation(ctx)
	if err != nil {
		return nil, settingsError(ctx, err, "reading Ichor's settings", "`get` on `ichorinstallations` (ichor-viewer, ichor-operator and ichor-admin hold it)")
	}
	return &ichorv1.GetSettingsResponse{Settings: s.settingsProto(inst)}, nil
}

// UpdateSettings implements SettingsService: it checks the whole request
// first, then updates the IchorInstallation as the signed-in user, so bad
// input changes nothing. Writing spec.settings needs `update` on
// `ichorinstallations/settings`, which the admission webhook checks.
func (s *SettingsService) UpdateSettings(ctx context.Context, req *ichorv1.UpdateSettingsRequest) (*ichorv1.UpdateSettingsResponse, error) {
	const what = "changing Ichor's settings"
	if s.ReadOnly {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s: this ichor-ui runs with --settings-read-only, so the console only shows them; change spec.settings of the IchorInstallation %q instead (for example with kubectl edit)",
			what, ichorv1alpha1.IchorInstallationName)
	}
	change, err := settingsChange(req)
	if err != nil {
		return nil, err
	}
	var out *ichorv1alpha1.IchorInstallation
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inst, err := s.installation(ctx)
		if err != nil {
			return err
		}
		if rv := req.GetResourceVersion(); rv != "" && rv != inst.ResourceVersion {
			return status.Errorf(codes.Aborted,
				"%s: the settings changed since they were read (resource_version %s, now %s); reload them and try again", what, rv, inst.ResourceVersion)
		}
		next := inst.Spec.Settings
		change(&next)
		if settings.Equal(&next, &inst.Spec.Settings) {
			out = inst
			return nil
		}
		inst.Spec.Settings = next
		if err := s.Clients.User.Update(ctx, inst); err != nil {
			return err
		}
		out = inst
		return nil
	})
	if err != nil {
		return nil, settingsError(ctx, err, what, "`update` on `ichorinstallations` and `ichorinstallations/settings` (the ichor-admin role holds them)")
	}
	return &ichorv1.UpdateSettingsResponse{Settings: s.settingsProto(out)}, nil
}

// settingsError is apiError with the permission that settings need named
// in a refusal by the API server.
func settingsError(ctx context.Context, err error, what, needs string) error {
	if apierrors.IsForbidden(err) {
		user := "the signed-in user"
		if id, ok := identity.From(ctx); ok {
			user = fmt.Sprintf("user %q", id.Username)
		}
		return status.Errorf(codes.PermissionDenied, "%s: the Kubernetes API server refused it for %s (403 Forbidden): %s; it needs %s",
			what, user, apiMessage(err), needs)
	}
	if apierrors.IsNotFound(err) {
		return status.Errorf(codes.NotFound, "%s: there is no IchorInstallation %q; Ichor is not installed here (ichor init creates it)",
			what, ichorv1alpha1.IchorInstallationName)
	}
	return apiError(ctx, err, what)
}

// installation reads the IchorInstallation as the signed-in user.
func (s *SettingsService) installation(ctx context.Context) (*ichorv1alpha1.IchorInstallation, error) {
	inst := &ichorv1alpha1.IchorInstallation{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst); err != nil {
		return nil, err
	}
	return inst, nil
}

// settingsChange checks the request and returns the change it makes; it
// returns INVALID_ARGUMENT naming every wrong field.
func settingsChange(req *ichorv1.UpdateSettingsRequest) (func(*ichorv1alpha1.IchorSettings), error) {
	change, err := settings.Change{
		IDTokenLifetime: req.GetIdTokenLifetime(), RefreshTokenLifetime: req.GetRefreshTokenLifetime(),
		DefaultDriftPolicy: req.GetDefaultDriftPolicy(), Clear: req.GetClear(),
	}.Check()
	if err != nil {
		return nil, invalid("%s", err.Error())
	}
	return change, nil
}

func (s *SettingsService) settingsProto(inst *ichorv1alpha1.IchorInstallation) *ichorv1.Settings {
	st := &inst.Spec.Settings
	out := &ichorv1.Settings{
		DefaultDriftPolicy: st.DefaultDriftPolicy,
		InstalledVersion:   inst.Status.InstalledVersion,
		ReadOnly:           s.ReadOnly,
		ResourceVersion:    inst.ResourceVersion,
	}
	if st.IDTokenLifetime != nil {
		out.IdTokenLifetime = settings.Short(st.IDTokenLifetime.Duration)
	}
	if st.RefreshTokenLifetime != nil {
		out.RefreshTokenLifetime = settings.Short(st.RefreshTokenLifetime.Duration)
	}
	return out
}
