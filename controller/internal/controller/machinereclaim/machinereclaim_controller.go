// Package machinereclaim holds the MachineReclaim reconciler ("Reset and
// add"): it inspects a machine of another cluster with a user-supplied,
// expiring talosconfig, dialled only at spec.address, stops at
// AwaitingConfirmation, and sends one reset (STATE and EPHEMERAL) once the
// node's UUID is typed and nothing refuses it (architecture, "Nodes" and
// "Trust"). The credential Secret is deleted at Done, Failed or Expired, and
// a Sweeper deletes any foreign talosconfig older than the maximum TTL.
//
// Nothing from the talosconfig reaches status, Events, logs or errors: the
// shared code never quotes it, and every message the reconciler writes goes
// through redact as well.
package machinereclaim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=machinereclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=machinereclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller and its Events.
const ControllerName = "machinereclaim"

// DefaultTTL is the credential's lifetime when spec.ttl is empty.
const DefaultTTL = 15 * time.Minute

// DefaultResetTimeout is how long a reset machine has to answer in maintenance mode.
const DefaultResetTimeout = 15 * time.Minute

// Reconciler reconciles MachineReclaims.
type Reconciler struct {
	Client client.Client
	// APIReader reads Secrets uncached: the controller gets the Secrets it is
	// pointed at and never caches every Secret of the cluster.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Port is the Talos API port; zero means 50000.
	Port int
	// ResetTimeout bounds Resetting; zero means DefaultResetTimeout.
	ResetTimeout time.Duration
	// PollInterval is how often a reset machine is probed for maintenance mode; zero means 5s.
	PollInterval time.Duration
	// Clock is the controller's clock; nil means the real one.
	Clock clock.PassiveClock

	skeleton *ichorreconcile.Controller[*ichorv1alpha1.MachineReclaim]
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.MachineReclaim{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// controller is the reconciler on the skeleton: the only writer of a
// MachineReclaim's status. A reclaim resets a machine of another cluster, so
// no Ichor cluster's pause applies to it. Every status write before a Talos
// call is the skeleton's strict Persist.
func (r *Reconciler) controller() *ichorreconcile.Controller[*ichorv1alpha1.MachineReclaim] {
	return &ichorreconcile.Controller[*ichorv1alpha1.MachineReclaim]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader, Clock: r.Clock,
		New:     func() *ichorv1alpha1.MachineReclaim { return &ichorv1alpha1.MachineReclaim{} },
		Owned:   []string{ichorv1alpha1.ReadyCondition},
		Primary: true, SkipPaused: true,
		OwnStatus: func(dst, src *ichorv1alpha1.MachineReclaim) {
			conds := dst.Status.Conditions
			dst.Status = *src.Status.DeepCopy()
			dst.Status.Conditions = conds
		},
		Phases: []ichorreconcile.Phase[*ichorv1alpha1.MachineReclaim]{r.reclaim},
	}
}

func (r *Reconciler) port() int {
	if r.Port != 0 {
		return r.Port
	}

	return constants.ApidPort
}

func ttlOf(mr *ichorv1alpha1.MachineReclaim) time.Duration {
	if mr.Spec.TTL != nil && mr.Spec.TTL.Duration > 0 && mr.Spec.TTL.Duration <= guard.MaxReclaimTTL {
		return mr.Spec.TTL.Duration
	}

	return DefaultTTL
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// reclaim moves a reclaim through its phases.
func (r *Reconciler) reclaim(ctx context.Context, s *ichorreconcile.Scope[*ichorv1alpha1.MachineReclaim]) (ctrl.Result, error) {
	mr := s.Object

	switch mr.Status.Phase {
	case ichorv1alpha1.ReclaimDone, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.ReclaimExpired:
		return ctrl.Result{}, r.deleteCredential(ctx, mr)
	case ichorv1alpha1.ReclaimResetting:
		return r.resetting(ctx, s)
	}

	// Who asked is what the mutating webhook stamped at admission, the only
	// place the requester is known; without the webhooks nobody is named. The
	// next status write records it.
	mr.Status.Audit.RequestedBy = mr.Annotations[ichorv1alpha1.RequestedByAnnotation]

	// A reset that was recorded is never sent again, whatever the phase says.
	if mr.Status.ResetRequestedAt != nil {
		return r.resetting(ctx, s)
	}

	deadline := mr.CreationTimestamp.Add(ttlOf(mr))
	if !s.Now.Before(deadline) {
		return r.finish(ctx, s, ichorv1alpha1.ReclaimExpired, ichorv1alpha1.ExpiredReason,
			fmt.Sprintf("the credential's TTL of %s ran out before the reset was confirmed; the credential was deleted. Create a new reclaim to try again", ttlOf(mr)))
	}

	if mr.Status.Phase == "" {
		mr.Status.Phase = ichorv1alpha1.ReclaimInspecting
		mr.Status.Audit.RequestedAt = &mr.CreationTimestamp
		r.setReady(mr, ichorv1alpha1.InspectingReason, "reading the machine at "+mr.Spec.Address+" with the foreign talosconfig")

		if err := s.Persist(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}

	return r.inspectAndMaybeReset(ctx, s, deadline)
}

// inspectAndMaybeReset inspects the machine (again, so the decision is fresh),
// records what it saw and, when the UUID is typed and nothing refuses, records
// the reset and sends it.
func (r *Reconciler) inspectAndMaybeReset(ctx context.Context, s *ichorreconcile.Scope[*ichorv1alpha1.MachineReclaim], deadline time.Time) (ctrl.Result, error) {
	mr := s.Object
	log := ctrl.LoggerFrom(ctx)
	retry := ctrl.Result{RequeueAfter: min(30*time.Second, time.Until(deadline)+time.Second)}

	talosconfig, err := r.credential(ctx, mr)
	if err != nil {
		var bad badCredentialError
		if errors.As(err, &bad) {
			return r.finish(ctx, s, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.BadCredentialReason, bad.Error())
		}

		return ctrl.Result{}, err
	}

	c, err := talos.DialTalosconfig(ctx, mr.Spec.Address, r.port(), talosconfig)
	if err != nil {
		return r.finish(ctx, s, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.BadCredentialReason, redact(err.Error(), talosconfig))
	}

	defer func() { _ = c.Close() }()

	in, err := reclaim.Inspect(ctx, c)
	if err != nil {
		msg := redact(fmt.Sprintf("cannot inspect the machine at %s: %v", mr.Spec.Address, err), talosconfig)
		log.Info("inspection failed; retrying", "address", mr.Spec.Address, "reason", msg)
		r.setReady(mr, ichorv1alpha1.InspectionFailedReason, msg+"; retrying until the TTL runs out")

		return retry, s.Persist(ctx)
	}

	if mr.Status.Inspection.UUID != "" && mr.Status.Inspection.UUID != in.UUID {
		return r.finish(ctx, s, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.RefusedReason,
			fmt.Sprintf("the machine at %s now reports UUID %s, not the %s inspected before: another machine answers at this address", mr.Spec.Address, in.UUID, mr.Status.Inspection.UUID))
	}

	facts, err := r.facts(ctx, mr.Spec.Force)
	if err != nil {
		return ctrl.Result{}, err
	}

	refusals := reclaim.Decide(in, facts)
	mr.Status.Inspection = inspectionStatus(in, refusals)
	mr.Status.ObservedGeneration = mr.Generation
	firstLook := mr.Status.Phase == ichorv1alpha1.ReclaimInspecting
	mr.Status.Phase = ichorv1alpha1.ReclaimAwaitingConfirmation

	if len(refusals) > 0 {
		r.setReady(mr, ichorv1alpha1.RefusedReason, "the reset is refused: "+joinRefusals(refusals))
		if firstLook {
			r.Recorder.Eventf(mr, nil, corev1.EventTypeWarning, ichorv1alpha1.RefusedReason, "Inspect", "resetting %s is refused: %s", in.UUID, joinRefusals(refusals))
		}

		return ctrl.Result{RequeueAfter: time.Until(deadline) + time.Second}, s.Persist(ctx)
	}

	if refusal := reclaim.CheckConfirmation(in, mr.Spec.ConfirmUUID); refusal != nil {
		r.setReady(mr, ichorv1alpha1.AwaitingConfirmationReason, refusal.Message())

		if firstLook {
			r.Recorder.Eventf(mr, nil, corev1.EventTypeNormal, ichorv1alpha1.AwaitingConfirmationReason, "Inspect",
				"machine %s (%s) inspected; type its UUID to reset it", in.UUID, in.Hostname)
		}

		return ctrl.Result{RequeueAfter: time.Until(deadline) + time.Second}, s.Persist(ctx)
	}

	// Record the reset before sending it: a reconcile that resumes after a
	// crash sees ResetRequestedAt and never sends a second one.
	now := metav1.NewTime(s.Now)
	mr.Status.Phase = ichorv1alpha1.ReclaimResetting
	mr.Status.ResetRequestedAt = &now
	mr.Status.Audit.ConfirmedAt = &now
	// The user whose write set the UUID just checked, as the webhook stamped it.
	mr.Status.Audit.ConfirmedBy = mr.Annotations[ichorv1alpha1.ConfirmedByAnnotation]
	r.setReady(mr, ichorv1alpha1.ResetRequestedReason, "the reset of STATE and EPHEMERAL was requested; waiting for the machine to answer in maintenance mode")

	if err := s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	graceful := reclaim.Graceful(in, mr.Spec.ForceUngraceful)
	if err := c.ResetGeneric(ctx, reclaim.ResetRequest(graceful, true)); err != nil {
		return r.finish(ctx, s, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.ResetFailedReason,
			redact(fmt.Sprintf("the reset request to %s failed: %v; Ichor does not send it twice, create a new reclaim to try again", mr.Spec.Address, err), talosconfig))
	}

	r.Recorder.Eventf(mr, nil, corev1.EventTypeNormal, ichorv1alpha1.ResetRequestedReason, "Reset",
		"reset of %s (%s) requested: STATE and EPHEMERAL, graceful=%v", in.UUID, mr.Spec.Address, graceful)
	log.Info("reset requested", "address", mr.Spec.Address, "uuid", in.UUID)

	return ctrl.Result{RequeueAfter: r.pollInterval()}, nil
}

func (r *Reconciler) pollInterval() time.Duration {
	if r.PollInterval > 0 {
		return r.PollInterval
	}

	return 5 * time.Second
}

// resetting waits for the reset machine to answer in maintenance mode with the same UUID.
func (r *Reconciler) resetting(ctx context.Context, s *ichorreconcile.Scope[*ichorv1alpha1.MachineReclaim]) (ctrl.Result, error) {
	mr := s.Object

	timeout := r.ResetTimeout
	if timeout == 0 {
		timeout = DefaultResetTimeout
	}

	if mr.Status.ResetRequestedAt == nil {
		return r.finish(ctx, s, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.ResetFailedReason, "the reclaim is Resetting but no reset is recorded; create a new reclaim")
	}

	uuid, err := r.maintenanceUUID(ctx, mr.Spec.Address)
	if err == nil && strings.EqualFold(uuid, mr.Status.Inspection.UUID) {
		return r.finish(ctx, s, ichorv1alpha1.ReclaimDone, ichorv1alpha1.ReclaimedReason,
			fmt.Sprintf("the machine %s answers in maintenance mode at %s; add it by address (or let discovery find it) to register it as pending", uuid, mr.Spec.Address))
	}

	if s.Now.After(mr.Status.ResetRequestedAt.Add(timeout)) {
		reason := "it does not answer in maintenance mode"
		if err == nil {
			reason = fmt.Sprintf("a machine with UUID %s answers in maintenance mode instead", uuid)
		}

		return r.finish(ctx, s, ichorv1alpha1.ReclaimFailed, ichorv1alpha1.ResetFailedReason,
			fmt.Sprintf("%s after the reset requested at %s: %s (if the controller restarted between recording and sending, the reset may not have been sent); check the machine's console", timeout, mr.Status.ResetRequestedAt.UTC().Format(time.RFC3339), reason))
	}

	return ctrl.Result{RequeueAfter: r.pollInterval()}, nil
}

// maintenanceUUID reads the SMBIOS UUID over the unauthenticated
// maintenance-mode connection; a configured node refuses it (it asks for a
// client certificate), so success means maintenance mode.
func (r *Reconciler) maintenanceUUID(ctx context.Context, address string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	c, err := talosclient.New(ctx,
		talosclient.WithEndpoints(net.JoinHostPort(address, strconv.Itoa(r.port()))),
		talosclient.WithTLSConfig(&tls.Config{InsecureSkipVerify: true})) //nolint:gosec // maintenance mode has no identity to verify; only the UUID is read
	if err != nil {
		return "", err
	}

	defer func() { _ = c.Close() }()

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		return "", err
	}

	return strings.ToLower(si.TypedSpec().UUID), nil
}

// finish moves the reclaim to a terminal phase and deletes the credential.
func (r *Reconciler) finish(ctx context.Context, s *ichorreconcile.Scope[*ichorv1alpha1.MachineReclaim], phase, reason, msg string) (ctrl.Result, error) {
	mr := s.Object

	mr.Status.Phase = phase
	mr.Status.ObservedGeneration = mr.Generation

	if phase == ichorv1alpha1.ReclaimFailed {
		mr.Status.FailureReason = msg
	}

	r.setReady(mr, reason, msg)

	if err := s.Persist(ctx); err != nil {
		return ctrl.Result{}, err
	}

	eventType := corev1.EventTypeWarning
	if phase == ichorv1alpha1.ReclaimDone {
		eventType = corev1.EventTypeNormal
	}

	r.Recorder.Eventf(mr, nil, eventType, reason, phase, "%s", msg)

	return ctrl.Result{}, r.deleteCredential(ctx, mr)
}

// deleteCredential deletes the credential Secret, only when it is of the
// foreign-talosconfig type: a reclaim never deletes another kind of Secret.
func (r *Reconciler) deleteCredential(ctx context.Context, mr *ichorv1alpha1.MachineReclaim) error {
	s := &corev1.Secret{}

	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: mr.Namespace, Name: mr.Spec.CredentialsRef.Name}, s)
	if apierrors.IsNotFound(err) {
		return nil
	}

	if err != nil {
		return err
	}

	if s.Type != ichorv1alpha1.ForeignTalosconfigSecretType {
		return nil
	}

	err = r.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID})
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("deleted the foreign talosconfig", "secret", s.Name, "phase", mr.Status.Phase)
	}

	return client.IgnoreNotFound(err)
}

type badCredentialError struct{ msg string }

func (e badCredentialError) Error() string { return e.msg }

// credential reads the talosconfig from the referenced Secret.
func (r *Reconciler) credential(ctx context.Context, mr *ichorv1alpha1.MachineReclaim) ([]byte, error) {
	s := &corev1.Secret{}
	name := mr.Spec.CredentialsRef.Name

	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: mr.Namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, badCredentialError{fmt.Sprintf("the credential Secret %q does not exist (it may have been swept after the maximum TTL); create a new reclaim with a new Secret", name)}
		}

		return nil, err
	}

	if s.Type != ichorv1alpha1.ForeignTalosconfigSecretType {
		return nil, badCredentialError{fmt.Sprintf("Secret %q is of type %q; a reclaim reads only Secrets of type %s", name, s.Type, ichorv1alpha1.ForeignTalosconfigSecretType)}
	}

	data := s.Data[reclaim.TalosconfigKey]
	if len(data) == 0 {
		return nil, badCredentialError{fmt.Sprintf("Secret %q has no key %q; put the talosconfig under that key", name, reclaim.TalosconfigKey)}
	}

	return data, nil
}

// facts lists the managed clusters' IDs and Talos API CA certificates.
func (r *Reconciler) facts(ctx context.Context, force bool) (reclaim.Facts, error) {
	managed, err := reclaim.ManagedClusters(ctx, r.Client, r.APIReader)

	return reclaim.Facts{Force: force, Managed: managed}, err
}

func inspectionStatus(in *reclaim.Inspection, refusals []guard.Refusal) ichorv1alpha1.ReclaimInspection {
	out := ichorv1alpha1.ReclaimInspection{
		UUID:         in.UUID,
		Serial:       in.Serial,
		Hostname:     in.Hostname,
		ControlPlane: in.ControlPlane,
		ClusterName:  in.ClusterName,
	}

	for _, d := range in.UserDisks {
		out.UserDisks = append(out.UserDisks, d.String())
	}

	for _, v := range in.EncryptedVolumes {
		out.EncryptedDisks = append(out.EncryptedDisks, "user volume "+v)
	}

	for _, rf := range refusals {
		out.Refusals = append(out.Refusals, rf.Error())
	}

	return out
}

func joinRefusals(refusals []guard.Refusal) string {
	parts := make([]string, len(refusals))
	for i, rf := range refusals {
		parts[i] = rf.Error()
	}

	return strings.Join(parts, " | ")
}

func (r *Reconciler) setReady(mr *ichorv1alpha1.MachineReclaim, reason, msg string) {
	status := metav1.ConditionFalse
	if reason == ichorv1alpha1.ReclaimedReason {
		status = metav1.ConditionTrue
	}

	if len(msg) > 4000 {
		msg = msg[:4000]
	}

	apimeta.SetStatusCondition(&mr.Status.Conditions, metav1.Condition{
		Type: ichorv1alpha1.ReadyCondition, Status: status, Reason: reason, Message: msg, ObservedGeneration: mr.Generation,
	})
}
