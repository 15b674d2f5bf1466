package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-taloscluster,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=ichor.maesh.dev,resources=talosclusters,verbs=create;update;delete,versions=v1alpha1,name=vtaloscluster.ichor.maesh.dev,admissionReviewVersions=v1

// clusterValidator checks TalosClusters: topology, CNI, versions, Secret
// references, Cilium values, finalizers and deletion protection.
type clusterValidator struct{ *checker }

func (v *clusterValidator) subject(c *ichorv1alpha1.TalosCluster) subject {
	return subject{kind: "TalosCluster", resource: guard.ResourceTalosClusters, namespace: c.Namespace, name: c.Name, cluster: c.Name}
}

func (v *clusterValidator) facts(ctx context.Context, c *ichorv1alpha1.TalosCluster) (guard.ClusterFacts, error) {
	facts, err := guard.LoadClusterFacts(ctx, v.reader, c)
	if err != nil {
		return facts, internal(err)
	}
	return facts, nil
}

// ValidateCreate checks a new TalosCluster.
func (v *clusterValidator) ValidateCreate(ctx context.Context, c *ichorv1alpha1.TalosCluster) (admission.Warnings, error) {
	if v.user(ctx) == guard.AutoPatchUsername(v.namespace) {
		return v.decide(ctx, v.subject(c), guard.CheckAutoPatchVerb("create"), nil)
	}
	facts, err := v.facts(ctx, c)
	if err != nil {
		return nil, err
	}
	return v.decide(ctx, v.subject(c), guard.ValidateCluster(nil, c, facts), guard.ClusterRequirements(nil, c))
}

// ValidateUpdate checks a change to a TalosCluster.
func (v *clusterValidator) ValidateUpdate(ctx context.Context, old, c *ichorv1alpha1.TalosCluster) (admission.Warnings, error) {
	reqs := guard.FinalizerRequirements(c.Namespace, c.Name, old.Finalizers, c.Finalizers)
	if c.DeletionTimestamp != nil {
		// Only metadata can change on a deleting object; the spec checks would
		// otherwise stand in the way of the finalizer's removal.
		return v.decide(ctx, v.subject(c), nil, reqs)
	}
	facts, err := v.facts(ctx, c)
	if err != nil {
		return nil, err
	}
	reqs = append(reqs, guard.ClusterRequirements(old, c)...)
	refusals := guard.ValidateCluster(old, c, facts)
	switch v.user(ctx) {
	case guard.AutoPatchUsername(v.namespace):
		// Automatic patch upgrades (architecture, principle 5): the two
		// version fields, to a newer patch of the running minor, nothing else.
		refusals = append(refusals, guard.CheckAutoPatch(old, c)...)
		refusals = append(refusals, guard.CheckAutoPatchMetadata(old, c)...)
	case guard.ControllerUsername(v.namespace):
		refusals = append(refusals, guard.CheckControllerWrite(old, c)...)
	}
	return v.decide(ctx, v.subject(c), refusals, reqs)
}

// ValidateDelete checks the deletion of a TalosCluster.
func (v *clusterValidator) ValidateDelete(ctx context.Context, c *ichorv1alpha1.TalosCluster) (admission.Warnings, error) {
	if v.user(ctx) == guard.AutoPatchUsername(v.namespace) {
		return v.decide(ctx, v.subject(c), guard.CheckAutoPatchVerb("delete"), nil)
	}
	return v.decide(ctx, v.subject(c), guard.ValidateClusterDelete(c), nil)
}

// user is the name of the user the request comes from ("" when unknown).
func (v *clusterValidator) user(ctx context.Context) string {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return ""
	}
	return req.UserInfo.Username
}
