package webhook

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Only the API server knows who writes an object, and admission is where Ichor
// sees it: these mutating webhooks stamp the requester's user name on the
// objects whose status records who asked, overwriting whatever the client
// set. The validating webhooks refuse any update that changes or removes the
// stamp (keptAnnotation), and the controller copies it into status.
//
// +kubebuilder:webhook:path=/mutate-ichor-maesh-dev-v1alpha1-taloscredentialrequest,mutating=true,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=taloscredentialrequests,verbs=create,versions=v1alpha1,name=mtaloscredentialrequest.ichor.maesh.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-ichor-maesh-dev-v1alpha1-machinereclaim,mutating=true,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=machinereclaims,verbs=create;update,versions=v1alpha1,name=mmachinereclaim.ichor.maesh.dev,admissionReviewVersions=v1

// credentialRequestStamper records who created a TalosCredentialRequest.
type credentialRequestStamper struct{}

func (credentialRequestStamper) Default(ctx context.Context, r *ichorv1alpha1.TalosCredentialRequest) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if req.Operation == admissionv1.Create {
		stamp(r, ichorv1alpha1.RequestedByAnnotation, req.UserInfo.Username)
	}
	return nil
}

// reclaimStamper records who created a MachineReclaim and who wrote its
// current spec.confirmUUID (on the create or on the update that typed it).
type reclaimStamper struct {
	decoder admission.Decoder
}

func (s *reclaimStamper) Default(ctx context.Context, r *ichorv1alpha1.MachineReclaim) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	user := req.UserInfo.Username
	switch req.Operation {
	case admissionv1.Create:
		stamp(r, ichorv1alpha1.RequestedByAnnotation, user)
		stampConfirmer(r, user)
	case admissionv1.Update:
		old := &ichorv1alpha1.MachineReclaim{}
		if err := s.decoder.DecodeRaw(req.OldObject, old); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("decoding the MachineReclaim before the update: %v", err))
		}
		if old.Spec.ConfirmUUID != r.Spec.ConfirmUUID {
			stampConfirmer(r, user)
		}
	}
	return nil
}

// stampConfirmer names user as the confirmer when spec.confirmUUID is typed,
// and removes the confirmer when it is empty.
func stampConfirmer(r *ichorv1alpha1.MachineReclaim, user string) {
	if r.Spec.ConfirmUUID == "" {
		user = ""
	}
	stamp(r, ichorv1alpha1.ConfirmedByAnnotation, user)
}

// stamp sets annotation key to user. An empty user (the API server always
// names one) removes the annotation rather than keep a value the client chose.
func stamp(obj metav1.Object, key, user string) {
	a := obj.GetAnnotations()
	if user == "" {
		if _, ok := a[key]; ok {
			delete(a, key)
			obj.SetAnnotations(a)
		}
		return
	}
	if a == nil {
		a = map[string]string{}
	}
	a[key] = user
	obj.SetAnnotations(a)
}

// annotationField is the refusal's field for annotation key.
func annotationField(key string) string {
	return fmt.Sprintf("metadata.annotations[%s]", key)
}

// requesterOnCreate refuses a new object whose requester annotation names
// anyone but the user creating it. The mutating webhook has stamped it by then,
// so this only bites when the mutating webhook is not installed: an absent
// annotation passes (the status then names nobody), a client's own value never does.
func requesterOnCreate(obj metav1.Object, user string) []guard.Refusal {
	v, ok := obj.GetAnnotations()[ichorv1alpha1.RequestedByAnnotation]
	if !ok || v == user {
		return nil
	}
	return []guard.Refusal{{
		Field:  annotationField(ichorv1alpha1.RequestedByAnnotation),
		Rule:   fmt.Sprintf("names %q, but the API server authenticated this create as %q; only Ichor's mutating admission webhook sets this annotation", v, user),
		WayOut: "leave the annotation out (check that the ichor-mutating-webhook MutatingWebhookConfiguration is installed)",
	}}
}

// keptAnnotation refuses an update that changes, removes or adds annotation
// key: it records a user as the API server saw them, so nobody may rewrite it.
func keptAnnotation(old, obj metav1.Object, key string) []guard.Refusal {
	was, hadIt := old.GetAnnotations()[key]
	is, hasIt := obj.GetAnnotations()[key]
	if was == is && hadIt == hasIt {
		return nil
	}
	r := guard.Refusal{Field: annotationField(key)}
	switch {
	case !hadIt:
		r.Rule = fmt.Sprintf("is set only by Ichor's admission webhook, and this object was created without it; the update sets it to %q", is)
		r.WayOut = "leave the annotation out"
	case !hasIt:
		r.Rule = fmt.Sprintf("records the user %q as the API server authenticated them and cannot be removed", was)
		r.WayOut = "keep the annotation (a manifest replaced over the object must carry it unchanged)"
	default:
		r.Rule = fmt.Sprintf("records the user %q as the API server authenticated them and cannot be changed to %q", was, is)
		r.WayOut = "leave the annotation as it is (remove it from the manifest you apply)"
	}
	return []guard.Refusal{r}
}

// confirmerRefusals checks the confirmer annotation of a MachineReclaim update:
// unchanged unless spec.confirmUUID changes, and then the user who writes it
// (absent when the UUID is cleared), as the mutating webhook stamps it.
func confirmerRefusals(user string, old, r *ichorv1alpha1.MachineReclaim) []guard.Refusal {
	if old.Spec.ConfirmUUID == r.Spec.ConfirmUUID {
		return keptAnnotation(old, r, ichorv1alpha1.ConfirmedByAnnotation)
	}
	return confirmerOnWrite(user, r)
}

// confirmerOnWrite checks the confirmer annotation of a write that sets
// spec.confirmUUID: absent or the writer when the UUID is typed, absent when
// it is empty.
func confirmerOnWrite(user string, r *ichorv1alpha1.MachineReclaim) []guard.Refusal {
	v, ok := r.Annotations[ichorv1alpha1.ConfirmedByAnnotation]
	switch {
	case !ok:
		return nil
	case r.Spec.ConfirmUUID == "":
		return []guard.Refusal{{
			Field:  annotationField(ichorv1alpha1.ConfirmedByAnnotation),
			Rule:   fmt.Sprintf("names %q, but spec.confirmUUID is empty: nobody confirmed", v),
			WayOut: "leave the annotation out; Ichor's mutating admission webhook sets it on the write that types the UUID",
		}}
	case v != user:
		return []guard.Refusal{{
			Field:  annotationField(ichorv1alpha1.ConfirmedByAnnotation),
			Rule:   fmt.Sprintf("names %q, but the API server authenticated the write of spec.confirmUUID as %q; only Ichor's mutating admission webhook sets this annotation", v, user),
			WayOut: "leave the annotation out (check that the ichor-mutating-webhook MutatingWebhookConfiguration is installed)",
		}}
	}
	return nil
}

// requester returns the user name the API server authenticated the request as.
func requester(ctx context.Context) (string, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return "", apierrors.NewInternalError(err)
	}
	return req.UserInfo.Username, nil
}
