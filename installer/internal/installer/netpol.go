package installer

import (
	"context"
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
)

// detectNetworkPolicies decides, before the snapshot, whether this run
// applies Ichor's CiliumNetworkPolicies (contracts/pkg/netpol): when the API
// server serves cilium.io/v2 CiliumNetworkPolicy, that is when Cilium's CRD
// is installed and Established. Then they join what the snapshot holds and a
// rollback puts back.
func (in *Installer) detectNetworkPolicies() error {
	_, err := in.c.RESTMapper().RESTMapping(netpol.GVK.GroupKind(), netpol.GVK.Version)

	switch {
	case err == nil:
		in.policies = netpol.Policies(in.o.Namespace, netpol.Options{})
	case apimeta.IsNoMatchError(err):
		in.policies = nil
	default:
		return fmt.Errorf("asking the API server whether it serves %s %s: %w", netpol.GVK.GroupVersion(), netpol.GVK.Kind, err)
	}

	return nil
}

// applyNetworkPolicies is step 7: Ichor's CiliumNetworkPolicies, allows
// first and the default deny last, when the API server serves their kind;
// otherwise the step says so and changes nothing. The post-checks that
// follow reach the webhooks under the new policies.
func (in *Installer) applyNetworkPolicies(ctx context.Context) error {
	if in.policies == nil {
		in.stepf("network policies: skipped, the API server does not serve %s %s (CRD %s): %s is not isolated by Ichor",
			netpol.GVK.GroupVersion(), netpol.GVK.Kind, netpol.CRDName, in.o.Namespace)

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
