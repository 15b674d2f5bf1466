package installer

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
)

// detectNetworkPolicies decides, before the snapshot, whether this run
// applies Ichor's CiliumNetworkPolicies (contracts/pkg/netpol): when the API
// server serves cilium.io/v2 CiliumNetworkPolicy, that is when Cilium's CRD
// is installed and Established, and the controller has written its egress
// policies (ichor-controller-egress, ichor-ui-egress: controller netpolicy).
// Before those exist the default deny would cut the controller's egress to
// Talos nodes and S3 stores, which only they allow; the controller applies
// the whole set itself, egress first, once it has written them. Then the
// policies join what the snapshot holds and a rollback puts back.
func (in *Installer) detectNetworkPolicies(ctx context.Context) error {
	in.policies, in.policiesWhy = nil, ""

	_, err := in.c.RESTMapper().RESTMapping(netpol.GVK.GroupKind(), netpol.GVK.Version)

	switch {
	case apimeta.IsNoMatchError(err):
		in.policiesWhy = fmt.Sprintf("the API server does not serve %s %s (CRD %s)", netpol.GVK.GroupVersion(), netpol.GVK.Kind, netpol.CRDName)

		return nil
	case err != nil:
		return fmt.Errorf("asking the API server whether it serves %s %s: %w", netpol.GVK.GroupVersion(), netpol.GVK.Kind, err)
	}

	for _, name := range []string{netpol.ControllerEgressPolicy, netpol.UIEgressPolicy} {
		o := &unstructured.Unstructured{}
		o.SetGroupVersionKind(netpol.GVK)

		err := in.c.Get(ctx, client.ObjectKey{Namespace: in.o.Namespace, Name: name}, o)
		if apierrors.IsNotFound(err) {
			in.policiesWhy = fmt.Sprintf("the controller has not written its egress policy %s yet (it does once it runs on a node "+
				"of a Cilium cluster it manages, and then applies the set itself)", name)

			return nil
		}

		if err != nil {
			return fmt.Errorf("reading %s %s/%s: %w", netpol.GVK.Kind, in.o.Namespace, name, err)
		}
	}

	in.policies = netpol.Policies(in.o.Namespace, netpol.Options{})

	return nil
}

// applyNetworkPolicies is step 7: Ichor's CiliumNetworkPolicies, allows
// first and the default deny last, when the API server serves their kind;
// otherwise the step says so and changes nothing. The post-checks that
// follow reach the webhooks under the new policies.
func (in *Installer) applyNetworkPolicies(ctx context.Context) error {
	if in.policies == nil {
		in.stepf("network policies: skipped, %s: %s is not isolated by the installer", in.policiesWhy, in.o.Namespace)

		return nil
	}

	in.stepf("network policies: applying %s", names(in.policies))

	for _, o := range in.policies {
		if err := in.apply(ctx, o); err != nil {
			return err
		}
	}

	return nil
}
