// Package webhook holds Ichor's validating admission webhooks. The decisions
// are the pure functions of contracts/pkg/guard; this package gathers the facts
// they need (the machine's cluster, the other machines), asks the API server
// whether the requesting user holds a verb (a SubjectAccessReview made as that
// user), and turns refusals into API errors that name the field, the rule and
// the way out.
//
// Two mutating webhooks record who asked: they stamp the requesting user on
// TalosCredentialRequests and MachineReclaims (requester.go), and the
// validating webhooks keep that stamp unchanged.
//
// The webhooks are registered in one place, Setup, from cmd/main.go.
package webhook

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// The controller's own rights that the webhooks use: reading the objects the
// decisions depend on, and asking about other users' rights.
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters;talosmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the webhooks.
type Options struct {
	// Namespace is the namespace Ichor runs in (where the auto-patch ServiceAccount lives).
	Namespace string
}

// Setup registers every webhook with the manager's webhook server.
func Setup(mgr ctrl.Manager, opts Options) error {
	k := &checker{reader: mgr.GetAPIReader(), writer: mgr.GetClient(), namespace: opts.Namespace,
		events: mgr.GetEventRecorder("ichor-webhook")}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.TalosCluster{}).WithValidator(&clusterValidator{k}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.TalosMachine{}).WithValidator(&machineValidator{k}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.TalosOperation{}).WithValidator(&operationValidator{k}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.TalosConfigPatch{}).WithValidator(&patchValidator{k}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.TalosEtcdBackup{}).WithValidator(&backupValidator{k}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.IchorInstallation{}).WithValidator(&installationValidator{k}).Complete(); err != nil {
		return err
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.MachineReclaim{}).
		WithDefaulter(&reclaimStamper{decoder: admission.NewDecoder(mgr.GetScheme())}).
		WithValidator(&reclaimValidator{k}).Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &ichorv1alpha1.TalosCredentialRequest{}).
		WithDefaulter(credentialRequestStamper{}).
		WithValidator(&credentialRequestValidator{k}).Complete()
}

// checker gathers facts and checks permissions for the validators.
type checker struct {
	// reader reads straight from the API server: admission must not decide on a stale cache.
	reader client.Reader
	// writer creates SubjectAccessReviews.
	writer client.Client
	// namespace is Ichor's namespace.
	namespace string
	// events records overrides as Warning Events on the cluster.
	events events.EventRecorder
}

// subject is the object a decision is about.
type subject struct {
	kind      string
	resource  string
	namespace string
	name      string
	// cluster is the TalosCluster the object belongs to, for the override verb.
	cluster string
}

// decide turns guard's refusals and requirements into an admission answer. An
// overridable refusal passes, with a warning, when the user holds `override`
// on the cluster; a requirement passes when the user holds its permission.
func (k *checker) decide(ctx context.Context, s subject, refusals []guard.Refusal, reqs []guard.Requirement) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var warnings admission.Warnings
	var hard, overridable []guard.Refusal
	for _, r := range refusals {
		if r.Overridable {
			overridable = append(overridable, r)
		} else {
			hard = append(hard, r)
		}
	}
	if len(overridable) > 0 && len(hard) == 0 {
		ok, err := k.allowed(ctx, req, guard.OverrideOn(s.namespace, s.cluster))
		if err != nil {
			return nil, err
		}
		if ok {
			for _, r := range overridable {
				warnings = append(warnings, fmt.Sprintf("override by %s: %s", req.UserInfo.Username, r.Error()))
			}
			k.recordOverride(ctx, req, s, overridable)
			overridable = nil
		}
	}
	hard = append(hard, overridable...)
	if len(hard) > 0 {
		return warnings, invalid(s, hard)
	}
	var denied []guard.Refusal
	for _, r := range reqs {
		ok, err := k.allowed(ctx, req, r.Permission)
		if err != nil {
			return nil, err
		}
		if !ok {
			denied = append(denied, r.Refusal(req.UserInfo.Username))
		}
	}
	if len(denied) > 0 {
		return warnings, forbidden(s, denied)
	}
	return warnings, nil
}

// recordOverride leaves a Warning Event on the cluster for each overridden
// refusal (not for a dry run: the webhooks declare NoneOnDryRun).
func (k *checker) recordOverride(ctx context.Context, req admission.Request, s subject, overridden []guard.Refusal) {
	if req.DryRun != nil && *req.DryRun {
		return
	}
	cluster, err := guard.LoadCluster(ctx, k.reader, s.namespace, s.cluster)
	if err != nil || cluster == nil {
		return // nothing to attach the Event to; the admission warning remains
	}
	for _, r := range overridden {
		k.events.Eventf(cluster, nil, corev1.EventTypeWarning, ichorv1alpha1.OverrideReason, "Override",
			"%s %s: %s overrode: %s", s.kind, s.name, req.UserInfo.Username, r.Error())
	}
}

func invalid(s subject, refusals []guard.Refusal) error {
	errs := make(field.ErrorList, 0, len(refusals))
	for _, r := range refusals {
		errs = append(errs, field.Forbidden(field.NewPath(r.Field), r.Message()))
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: ichorv1alpha1.Group, Kind: s.kind}, s.name, errs)
}

func forbidden(s subject, refusals []guard.Refusal) error {
	msgs := make([]string, 0, len(refusals))
	for _, r := range refusals {
		msgs = append(msgs, r.Error())
	}
	return apierrors.NewForbidden(ichorv1alpha1.Resource(s.resource), s.name, fmt.Errorf("%s", strings.Join(msgs, "; and ")))
}

// allowed asks the API server whether the user of req holds p: a
// SubjectAccessReview made as that user (name, uid, groups and extra).
func (k *checker) allowed(ctx context.Context, req admission.Request, p guard.Permission) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(req.UserInfo.Extra))
	for key, v := range req.UserInfo.Extra {
		extra[key] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   req.UserInfo.Username,
			UID:    req.UserInfo.UID,
			Groups: req.UserInfo.Groups,
			Extra:  extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group:       ichorv1alpha1.Group,
				Version:     ichorv1alpha1.GroupVersion.Version,
				Resource:    p.Resource,
				Subresource: p.Subresource,
				Verb:        p.Verb,
				Namespace:   p.Namespace,
				Name:        p.Name,
			},
		},
	}
	if err := k.writer.Create(ctx, sar); err != nil {
		return false, apierrors.NewInternalError(fmt.Errorf("checking %s for %s: %w", p, req.UserInfo.Username, err))
	}
	return sar.Status.Allowed, nil
}

// internal reports a failed read of the facts as the webhook's own failure.
func internal(err error) error {
	return apierrors.NewInternalError(err)
}
