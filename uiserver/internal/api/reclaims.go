package api

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// Reclaim limits. The default TTL is the controller's (machinereclaim.DefaultTTL).
const (
	defaultReclaimTTL = 15 * time.Minute
	minReclaimTTL     = time.Minute
	// maxTalosconfigBytes bounds the pasted file; a talosconfig with one
	// context is a few KiB.
	maxTalosconfigBytes = 64 << 10
	// reclaimLabel names, on the credential Secret, the MachineReclaim it belongs to.
	reclaimLabel = "ichor.maesh.dev/machinereclaim"
	// reclaimNeeds is what a refusal by RBAC names.
	reclaimNeeds = "`create` and the verb `reclaim` on `machinereclaims` (ichor-admin holds them; bind ichor-machine-reclaimer to grant them to others)"
)

// ReclaimService implements the UI API's ReclaimService ("Reset and add":
// MachineReclaims and their foreign talosconfig Secrets).
type ReclaimService struct {
	ichorv1.UnimplementedReclaimServiceServer
	Deps
	// Credentials is ichor-ui's own identity, which writes and deletes the
	// foreign talosconfig Secrets of reclaims (no user role grants Secrets);
	// nil makes StartReclaim answer UNIMPLEMENTED.
	Credentials client.Client
}

// StartReclaim implements ReclaimService: it checks the request, checks as
// the signed-in user that they may create a reclaim (and hold the verb
// `reclaim`), then writes the talosconfig into a Secret of type
// ichor.maesh.dev/foreign-talosconfig with ichor-ui's own identity (no user
// role grants Secrets; a ValidatingAdmissionPolicy keeps that identity to
// this type) and creates the MachineReclaim as the signed-in user, so the
// API server and the admission webhook decide. A refused MachineReclaim
// takes the Secret back: nothing is left behind.
//
// The talosconfig never appears in a response, an error or a log line.
func (s *ReclaimService) StartReclaim(ctx context.Context, req *ichorv1.StartReclaimRequest) (*ichorv1.StartReclaimResponse, error) {
	const what = "starting a reclaim"
	address, err := reclaimAddress(req.GetAddress())
	if err != nil {
		return nil, err
	}
	if err := checkTalosconfig([]byte(req.GetTalosconfig())); err != nil {
		return nil, invalid("talosconfig: %s", strings.TrimPrefix(err.Error(), "the talosconfig "))
	}
	ttl, err := reclaimTTL(req.GetTtl())
	if err != nil {
		return nil, err
	}
	if s.Credentials == nil {
		return nil, status.Errorf(codes.Unimplemented, "%s: this ichor-ui has no identity to store the foreign talosconfig with; use `ichor machine reclaim`", what)
	}
	for _, verb := range []string{"create", guard.VerbReclaim} {
		if err := s.Clients.Authorize(ctx, verb, guard.ResourceMachineReclaims); err != nil {
			return nil, reclaimError(ctx, err, what)
		}
	}

	name := "reclaim-" + utilrand.String(8)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Clients.Namespace, Name: name + "-talosconfig",
			Labels: map[string]string{reclaimLabel: name, "app.kubernetes.io/part-of": "ichor"},
		},
		Type: ichorv1alpha1.ForeignTalosconfigSecretType,
		Data: map[string][]byte{reclaim.TalosconfigKey: []byte(req.GetTalosconfig())},
	}
	if err := s.Credentials.Create(ctx, secret); err != nil {
		// The API server's message names the Secret and the rule, never its data.
		if apierrors.IsForbidden(err) {
			return nil, status.Errorf(codes.Internal,
				"%s: the Kubernetes API server refused ichor-ui's own identity the foreign talosconfig Secret: %s; the install's Role ichor-ui-reclaim-credentials grants it",
				what, apiMessage(err))
		}
		return nil, apiError(ctx, err, what+": storing the talosconfig")
	}
	mr := &ichorv1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace, Name: name},
		Spec: ichorv1alpha1.MachineReclaimSpec{
			Address:         address,
			CredentialsRef:  ichorv1alpha1.SecretReference{Name: secret.Name},
			TTL:             &metav1.Duration{Duration: ttl},
			Force:           req.GetForce(),
			ForceUngraceful: req.GetForceUngraceful(),
		},
	}
	if err := s.Clients.User.Create(ctx, mr); err != nil {
		if undo := s.deleteCredential(context.WithoutCancel(ctx), secret.Name); undo != nil {
			return nil, reclaimError(ctx, fmt.Errorf("%w (and deleting the credential Secret %s failed: %w; the sweeper deletes it within %s)",
				err, secret.Name, undo, guard.MaxReclaimTTL), what)
		}
		return nil, reclaimError(ctx, err, what)
	}
	return &ichorv1.StartReclaimResponse{Reclaim: reclaimToProto(mr)}, nil
}

// ListReclaims implements ReclaimService: the reclaims of the namespace, read
// as the signed-in user, newest first.
func (s *ReclaimService) ListReclaims(ctx context.Context, _ *ichorv1.ListReclaimsRequest) (*ichorv1.ListReclaimsResponse, error) {
	list := &ichorv1alpha1.MachineReclaimList{}
	if err := s.Clients.User.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, reclaimError(ctx, err, "listing reclaims")
	}
	items := list.Items
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i].CreationTimestamp, items[j].CreationTimestamp
		if !a.Equal(&b) {
			return b.Before(&a)
		}
		return items[i].Name < items[j].Name
	})
	out := &ichorv1.ListReclaimsResponse{Reclaims: make([]*ichorv1.Reclaim, 0, len(items))}
	for i := range items {
		out.Reclaims = append(out.Reclaims, reclaimToProto(&items[i]))
	}
	return out, nil
}

// GetReclaim implements ReclaimService.
func (s *ReclaimService) GetReclaim(ctx context.Context, req *ichorv1.GetReclaimRequest) (*ichorv1.GetReclaimResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name is required")
	}
	mr, err := s.userReclaim(ctx, req.GetName())
	if err != nil {
		return nil, reclaimError(ctx, err, "reading reclaim "+req.GetName())
	}
	return &ichorv1.GetReclaimResponse{Reclaim: reclaimToProto(mr)}, nil
}

// ConfirmReclaim implements ReclaimService: it writes the typed UUID into
// spec.confirmUUID as the signed-in user (the webhook checks the verb
// `reclaim` on that write), after the same consent check the controller
// makes, so a wrong UUID is refused here and nothing is written.
func (s *ReclaimService) ConfirmReclaim(ctx context.Context, req *ichorv1.ConfirmReclaimRequest) (*ichorv1.ConfirmReclaimResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	what := "confirming reclaim " + name
	var out *ichorv1alpha1.MachineReclaim
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mr, err := s.userReclaim(ctx, name)
		if err != nil {
			return err
		}
		if mr.Status.Phase != ichorv1alpha1.ReclaimAwaitingConfirmation {
			return status.Errorf(codes.FailedPrecondition, "%s: the reclaim is %s, not AwaitingConfirmation; %s",
				what, orUnknown(mr.Status.Phase), phaseHint(mr.Status.Phase))
		}
		if r := mr.Status.Inspection.Refusals; len(r) > 0 {
			return status.Errorf(codes.FailedPrecondition, "%s: the reset is refused, so typing the UUID would not send it: %s; cancel this reclaim (and start another with force if the refusal allows it)",
				what, strings.Join(r, "; "))
		}
		if rf := reclaim.CheckConfirmation(&reclaim.Inspection{UUID: mr.Status.Inspection.UUID}, req.GetUuid()); rf != nil {
			return refused(codes.InvalidArgument, what, []guard.Refusal{*rf})
		}
		typed := strings.ToLower(strings.TrimSpace(req.GetUuid()))
		if mr.Spec.ConfirmUUID == typed {
			out = mr
			return nil
		}
		mr.Spec.ConfirmUUID = typed
		if err := s.Clients.User.Update(ctx, mr); err != nil {
			return err
		}
		out = mr
		return nil
	})
	if err != nil {
		return nil, reclaimError(ctx, err, what)
	}
	return &ichorv1.ConfirmReclaimResponse{Reclaim: reclaimToProto(out)}, nil
}

// CancelReclaim implements ReclaimService: it deletes the reclaim's
// credential Secret, so the controller can no longer reach the machine, and
// keeps the MachineReclaim as the record of who asked (no user role may
// delete one; architecture, "Trust"): the controller marks it Failed or
// Expired when it next looks. The user must hold what starting a reclaim
// needs. A reset already sent is not taken back, so a reclaim that is
// Resetting is refused; one that has finished has no credential left.
func (s *ReclaimService) CancelReclaim(ctx context.Context, req *ichorv1.CancelReclaimRequest) (*ichorv1.CancelReclaimResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	what := "cancelling reclaim " + name
	mr, err := s.userReclaim(ctx, name)
	if err != nil {
		return nil, reclaimError(ctx, err, what)
	}
	for _, verb := range []string{"update", guard.VerbReclaim} {
		if err := s.Clients.Authorize(ctx, verb, guard.ResourceMachineReclaims); err != nil {
			return nil, reclaimError(ctx, err, what)
		}
	}
	switch mr.Status.Phase {
	case ichorv1alpha1.ReclaimResetting:
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s: the reset was already sent to %s and cannot be taken back; the machine comes back in maintenance mode and discovery adds it as pending", what, mr.Spec.Address)
	case ichorv1alpha1.ReclaimDone, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.ReclaimExpired:
		// The controller deleted the credential when it finished; deleting it
		// again costs nothing and covers a failed deletion.
	}
	if s.Credentials == nil {
		return nil, status.Errorf(codes.Unimplemented, "%s: this ichor-ui has no identity to delete the foreign talosconfig with; it expires with the reclaim's TTL", what)
	}
	if err := s.deleteCredential(ctx, mr.Spec.CredentialsRef.Name); err != nil {
		return nil, apiError(ctx, fmt.Errorf("deleting its credential Secret %s: %w; the sweeper deletes it within %s",
			mr.Spec.CredentialsRef.Name, err, guard.MaxReclaimTTL), what)
	}
	return &ichorv1.CancelReclaimResponse{Reclaim: reclaimToProto(mr)}, nil
}

// userReclaim reads a MachineReclaim as the signed-in user.
func (s *ReclaimService) userReclaim(ctx context.Context, name string) (*ichorv1alpha1.MachineReclaim, error) {
	mr := &ichorv1alpha1.MachineReclaim{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, mr); err != nil {
		return nil, err
	}
	return mr, nil
}

// deleteCredential deletes the named Secret with ichor-ui's own identity,
// only when it is a foreign talosconfig; a missing one is no error.
func (s *ReclaimService) deleteCredential(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace, Name: name}}
	// ichor-ui may not read Secrets, so the delete is by name; the admission
	// policy ichor-ui-foreign-talosconfig-only refuses any other type.
	err := s.Credentials.Delete(ctx, sec)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func phaseHint(phase string) string {
	switch phase {
	case "", ichorv1alpha1.ReclaimInspecting:
		return "wait until the controller has inspected the machine"
	case ichorv1alpha1.ReclaimResetting:
		return "the reset was already sent"
	default:
		return "start a new reclaim to try again"
	}
}

// reclaimError is apiError with what a reclaim needs named in a refusal.
func reclaimError(ctx context.Context, err error, what string) error {
	var forbidden *kube.Forbidden
	switch {
	case errors.As(err, &forbidden):
		return status.Errorf(codes.PermissionDenied, "%s: user %q may not %s %s in namespace %q; it needs %s",
			what, forbidden.Username, forbidden.Verb, forbidden.Resource, forbidden.Namespace, reclaimNeeds)
	case apierrors.IsForbidden(err):
		user := "the signed-in user (no identity)"
		if id, ok := identity.From(ctx); ok {
			user = fmt.Sprintf("user %q", id.Username)
		}
		return status.Errorf(codes.PermissionDenied, "%s: the Kubernetes API server refused it for %s (403 Forbidden): %s; it needs %s",
			what, user, apiMessage(err), reclaimNeeds)
	}
	return apiError(ctx, err, what)
}

// reclaimAddress checks the address: an IP address, as the CRD requires.
func reclaimAddress(a string) (string, error) {
	a = strings.TrimSpace(a)
	if a == "" {
		return "", invalid("address is required: the IP address of the machine to reset, such as 192.168.10.5")
	}
	ip, err := netip.ParseAddr(a)
	if err != nil || ip.Zone() != "" {
		return "", invalid("address %q is not an IP address: give the machine's address, such as 192.168.10.5 (no port, no host name)", a)
	}
	return ip.String(), nil
}

// reclaimTTL checks the credential's lifetime: empty means 15m, otherwise
// between 1m and guard.MaxReclaimTTL.
func reclaimTTL(v string) (time.Duration, error) {
	if v == "" {
		return defaultReclaimTTL, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, invalid("ttl %q is not a duration: write it as 15m or 1h, or leave it empty for 15m", v)
	}
	if d < minReclaimTTL || d > guard.MaxReclaimTTL {
		return 0, invalid("ttl %s is out of range: the foreign credential lives between %s and %s; leave it empty for 15m", d, minReclaimTTL, guard.MaxReclaimTTL)
	}
	return d, nil
}

// checkTalosconfig checks that b is a talosconfig whose current context
// holds a CA, a client certificate and its key, the checks talos.DialTalosconfig
// makes before it connects. Its errors name fields only, never a value from
// the file, not even a context name.
func checkTalosconfig(b []byte) error {
	if strings.TrimSpace(string(b)) == "" {
		return errors.New("is required: paste the foreign cluster's talosconfig (the file `talosctl config` writes)")
	}
	if len(b) > maxTalosconfigBytes {
		return fmt.Errorf("is %d bytes, more than a talosconfig's %d; paste the file `talosctl config` writes", len(b), maxTalosconfigBytes)
	}
	if _, _, err := talos.ParseTalosconfig(b); err != nil {
		return err
	}
	return nil
}

// reclaimToProto converts a MachineReclaim; the credential is not in it.
func reclaimToProto(mr *ichorv1alpha1.MachineReclaim) *ichorv1.Reclaim {
	ttl := defaultReclaimTTL
	if mr.Spec.TTL != nil && mr.Spec.TTL.Duration > 0 {
		ttl = mr.Spec.TTL.Duration
	}
	in := mr.Status.Inspection
	out := &ichorv1.Reclaim{
		Name: mr.Name, Address: mr.Spec.Address, Phase: mr.Status.Phase, FailureReason: mr.Status.FailureReason,
		Ttl: ttl.String(), Force: mr.Spec.Force, ForceUngraceful: mr.Spec.ForceUngraceful, Confirmed: mr.Spec.ConfirmUUID != "",
		Inspection: &ichorv1.ReclaimInspection{
			Uuid: in.UUID, Serial: in.Serial, Hostname: in.Hostname, ControlPlane: in.ControlPlane, ClusterName: in.ClusterName,
			UserDisks:      append([]string(nil), in.UserDisks...),
			EncryptedDisks: append([]string(nil), in.EncryptedDisks...),
			Refusals:       append([]string(nil), in.Refusals...),
		},
		RequestedBy: mr.Status.Audit.RequestedBy, ConfirmedBy: mr.Status.Audit.ConfirmedBy,
		CreatedAt: ts(&mr.CreationTimestamp), ResetRequestedAt: ts(mr.Status.ResetRequestedAt),
		Conditions: conditions(mr.Status.Conditions), ResourceVersion: mr.ResourceVersion,
	}
	if !mr.CreationTimestamp.IsZero() {
		out.ExpiresAt = timestamppb.New(mr.CreationTimestamp.Add(ttl))
	}
	for _, c := range mr.Status.Conditions {
		if c.Type == ichorv1alpha1.ReadyCondition {
			out.Message = c.Message
		}
	}
	return out
}
