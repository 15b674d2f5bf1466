package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
)

// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-talosconfigpatch,mutating=false,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=talosconfigpatches,verbs=create;update;delete,versions=v1alpha1,name=vtalosconfigpatch.ichor.maesh.dev,admissionReviewVersions=v1
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosconfigpatches,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// patchValidator gates the TalosConfigPatches that carry privileged
// configuration (contracts/pkg/privileged): creating, changing or deleting
// one needs `update` on talosconfigpatches/privileged.
type patchValidator struct{ *checker }

func (v *patchValidator) subject(p *ichorv1alpha1.TalosConfigPatch) subject {
	return subject{kind: "TalosConfigPatch", resource: guard.ResourceTalosConfigPatches, namespace: p.Namespace, name: p.Name, cluster: p.Spec.ClusterName}
}

func (v *patchValidator) ValidateCreate(ctx context.Context, p *ichorv1alpha1.TalosConfigPatch) (admission.Warnings, error) {
	return v.decide(ctx, v.subject(p), nil, guard.PatchRequirements(nil, p))
}

func (v *patchValidator) ValidateUpdate(ctx context.Context, old, p *ichorv1alpha1.TalosConfigPatch) (admission.Warnings, error) {
	return v.decide(ctx, v.subject(p), nil, guard.PatchRequirements(old, p))
}

// ValidateDelete needs the verb unless the patch can no longer reach a node:
// its cluster is gone or going, or its namespace is being deleted (the
// namespace controller and the garbage collector must be able to finish).
func (v *patchValidator) ValidateDelete(ctx context.Context, p *ichorv1alpha1.TalosConfigPatch) (admission.Warnings, error) {
	reqs := guard.PatchRequirements(p, nil)
	if len(reqs) == 0 {
		return nil, nil
	}
	orphaned, err := v.patchOrphaned(ctx, p)
	if err != nil || orphaned {
		return nil, err
	}
	return v.decide(ctx, v.subject(p), nil, reqs)
}

// patchOrphaned reports whether p applies to nothing any more.
func (v *patchValidator) patchOrphaned(ctx context.Context, p *ichorv1alpha1.TalosConfigPatch) (bool, error) {
	c, err := guard.LoadCluster(ctx, v.reader, p.Namespace, p.Spec.ClusterName)
	if err != nil {
		return false, apierrors.NewInternalError(err)
	}
	if c == nil || c.DeletionTimestamp != nil {
		return true, nil
	}
	ns := &corev1.Namespace{}
	if err := v.reader.Get(ctx, client.ObjectKey{Name: p.Namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, apierrors.NewInternalError(fmt.Errorf("reading Namespace %s: %w", p.Namespace, err))
	}
	return ns.DeletionTimestamp != nil, nil
}

// checkPrivilegedRollout refuses a config rollout that would apply
// privileged patches to a user without `update` on
// talosconfigpatches/privileged: a patch written before that rule existed
// never passed the check above.
func (v *operationValidator) checkPrivilegedRollout(ctx context.Context, op *ichorv1alpha1.TalosOperation) (admission.Warnings, error) {
	if op.Spec.Type != ichorv1alpha1.OperationConfig {
		return nil, nil
	}
	list := &ichorv1alpha1.TalosConfigPatchList{}
	if err := v.reader.List(ctx, list, client.InNamespace(op.Namespace)); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("listing TalosConfigPatches in %s: %w", op.Namespace, err))
	}
	reqs := guard.ConfigRolloutRequirements(op, privileged.OfCluster(op.Spec.ClusterName, list.Items))
	s := operationSubject(op)
	return v.decide(ctx, s, nil, reqs)
}
