package guard

import (
	"fmt"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// CheckTalosUpgrade checks a Talos upgrade of cluster c to target before
// spec.talosVersion is written (the CLI's `ichor upgrade talos` and
// ichor-ui's UpgradeTalos; the webhook checks the same path and pair on the
// write): a final version newer than the cluster's, a step TalosPath
// accepts, a pair the compatibility table supports, no talos operation of
// the cluster still unfinished, and no shutdown of the cluster that has not
// completed (the talos operation would be refused). ops are the namespace's
// operations.
func CheckTalosUpgrade(c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation, target string) []Refusal {
	const field = "spec.talosVersion"

	var out []Refusal

	switch err := release.TalosPath(c.Spec.TalosVersion, target); {
	case err != nil:
		out = append(out, Refusal{Field: field, Rule: err.Error(), WayOut: wayOutTalosPath + "; `ichor upgrade talos --list` shows the candidates"})
	case target == c.Spec.TalosVersion:
		out = append(out, Refusal{Field: field, Rule: fmt.Sprintf("cluster %s is already at Talos %s", c.Name, target),
			WayOut: "choose a newer version (`ichor upgrade talos --list`)"})
	}

	if err := release.CheckPair(target, c.Spec.KubernetesVersion); err != nil {
		out = append(out, pairRefusal(field, err))
	}

	if s := UnfinishedShutdown(c.Name, "", ops); s != nil {
		out = append(out, shutdownLockRefusal(field, c.Name, s))
	}

	for i := range ops {
		op := &ops[i]
		if op.Spec.ClusterName != c.Name || op.Spec.Type != ichorv1alpha1.OperationTalos || op.DeletionTimestamp != nil ||
			op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed {
			continue
		}

		out = append(out, Refusal{Field: field,
			Rule: fmt.Sprintf("talos operation %s of cluster %s has not finished (phase %s)", op.Name, c.Name, op.Status.Phase),
			WayOut: fmt.Sprintf("let it finish (`ichor operation get %s --watch`), resume it (`ichor operation resume %s`) or delete it first",
				op.Name, op.Name)})
	}

	return out
}
