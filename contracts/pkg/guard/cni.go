package guard

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// Cilium chart upgrades (architecture, "Cilium", "Upgrades"): a TalosOperation
// of type cni moves the Helm release kube-system/cilium to another chart the
// running Ichor embeds, at most one minor up, never down. The checks here are
// the one set the webhook, ichor-ui and the CLI apply; the controller runs
// them again against Helm's own release record before it starts the Job.

const fieldOperationCNIVersion = "spec.cni.version"

// CNIVersion is a Cilium version in the form Ichor names charts (v1.2.3).
func CNIVersion(v string) string {
	if v == "" || strings.HasPrefix(v, "v") {
		return v
	}

	return "v" + v
}

// CNIUpgradeTarget is the chart `ichor cni upgrade` offers when no version is
// named: the newest embedded chart newer than running and at most one minor
// up; "" when there is none (or running is not a version).
func CNIUpgradeTarget(running string) string {
	r, err := semver.ParseTolerant(running)
	if err != nil {
		return ""
	}

	best := ""

	for _, v := range release.CiliumVersions() {
		t, err := semver.ParseTolerant(v)
		if err != nil || !t.GT(r) || t.Major != r.Major || t.Minor > r.Minor+1 {
			continue
		}

		if b, err := semver.ParseTolerant(best); best == "" || (err == nil && t.GT(b)) {
			best = v
		}
	}

	return best
}

// CNIFacts is what the cni upgrade checks read besides the cluster.
type CNIFacts struct {
	// Running is the Cilium version that runs; the webhook and the clients
	// take status.cni.ciliumVersion, the controller Helm's release record.
	Running string
	// Unfinished names the cluster's cni and kube-proxy operations that have
	// not finished, other than the one checked.
	Unfinished []string
}

// CheckCNIUpgrade checks a Cilium chart upgrade of cluster c to target.
func CheckCNIUpgrade(c *ichorv1alpha1.TalosCluster, facts CNIFacts, target string) []Refusal {
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return []Refusal{{Field: fieldSpecType,
			Rule:   fmt.Sprintf("cluster %q has an unmanaged CNI; Ichor does not upgrade or configure it", c.Name),
			WayOut: "manage the CNI with its own tooling"}}
	}

	var out []Refusal

	if len(facts.Unfinished) > 0 {
		out = append(out, Refusal{Field: fieldSpecType,
			Rule:   fmt.Sprintf("operation %s changes cluster %s's Cilium and has not finished", strings.Join(facts.Unfinished, ", "), c.Name),
			WayOut: fmt.Sprintf("wait for it (`ichor operation get %s --watch`), or resume or delete it first", facts.Unfinished[0])})
	}

	if cond := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition); cond == nil || cond.Status != "True" {
		why := "the controller has not reported it"
		if cond != nil {
			why = cond.Message
		}

		out = append(out, Refusal{Field: fieldSpecType,
			Rule: fmt.Sprintf("Cilium on cluster %s is not Ichor's Helm release yet (CNIHandover: %s); only the release Ichor owns is upgraded", c.Name, why),
			WayOut: fmt.Sprintf("wait until `kubectl get taloscluster %s -n %s -o jsonpath='{.status.conditions[?(@.type==\"CNIHandover\")].status}'` says True",
				c.Name, c.Namespace)})
	}

	embedded := release.CiliumVersions()
	t := CNIVersion(target)

	if !slices.Contains(embedded, t) {
		return append(out, Refusal{Field: fieldOperationCNIVersion,
			Rule:   fmt.Sprintf("Cilium %s is not a chart this Ichor embeds (it has %s); Cilium moves only to a chart of the running Ichor", target, strings.Join(embedded, ", ")),
			WayOut: "name one of those, or upgrade Ichor to one that carries the chart"})
	}

	running := CNIVersion(facts.Running)
	if running == "" {
		return append(out, Refusal{Field: fieldOperationCNIVersion,
			Rule:   fmt.Sprintf("the Cilium version cluster %s runs is not known yet (status.cni.ciliumVersion is empty)", c.Name),
			WayOut: "wait a few minutes for the controller to read it from the running agent, then try again"})
	}

	if err := ciliumStep(running, t); err != nil {
		out = append(out, Refusal{Field: fieldOperationCNIVersion, Rule: err.Error(),
			WayOut: cniWayOut(running)})
	}

	if _, err := release.CheckCiliumPair(t, c.Spec.KubernetesVersion); err != nil {
		out = append(out, pairRefusal(fieldOperationCNIVersion, err))
	}

	return out
}

// ciliumStep refuses a downgrade, no move, and a step of more than one minor.
func ciliumStep(running, target string) error {
	r, err := semver.ParseTolerant(running)
	if err != nil {
		return fmt.Errorf("the running Cilium %q is %w", running, release.ErrInvalidVersion)
	}

	t, err := semver.ParseTolerant(target)
	if err != nil {
		return fmt.Errorf("cilium %q is %w", target, release.ErrInvalidVersion)
	}

	switch {
	case t.EQ(r):
		return fmt.Errorf("cilium already runs %s", running)
	case t.LT(r):
		return fmt.Errorf("%w: cilium %s is older than the running %s; Ichor never moves Cilium down", release.ErrDowngrade, target, running)
	case t.Major != r.Major || t.Minor > r.Minor+1:
		return fmt.Errorf("cilium %s to %s skips a minor; Cilium moves one minor at a time", running, target)
	}

	return nil
}

func cniWayOut(running string) string {
	if next := CNIUpgradeTarget(running); next != "" {
		return fmt.Sprintf("the chart to move to from %s is %s (`ichor cni upgrade %s`)", running, next, next)
	}

	return fmt.Sprintf("this Ichor has no newer chart for Cilium %s; a newer Ichor brings one", running)
}

// UnfinishedCNI names the cluster's cni and kube-proxy operations among ops
// that have not finished (paused ones included), other than except.
func UnfinishedCNI(cluster, except string, ops []ichorv1alpha1.TalosOperation) []string {
	var out []string

	for i := range ops {
		o := &ops[i]
		if o.Name == except || o.Spec.ClusterName != cluster || o.DeletionTimestamp != nil ||
			(o.Spec.Type != ichorv1alpha1.OperationCNI && o.Spec.Type != ichorv1alpha1.OperationKubeProxy) {
			continue
		}

		if o.Status.Phase != ichorv1alpha1.OperationSucceeded && o.Status.Phase != ichorv1alpha1.OperationFailed {
			out = append(out, o.Name)
		}
	}

	return out
}

// loadCNIFacts adds a cni or kube-proxy operation's unfinished siblings to facts.
func loadCNIFacts(ctx context.Context, r client.Reader, op *ichorv1alpha1.TalosOperation, facts *OperationFacts) error {
	if op.Spec.Type != ichorv1alpha1.OperationCNI && op.Spec.Type != ichorv1alpha1.OperationKubeProxy {
		return nil
	}

	var list ichorv1alpha1.TalosOperationList
	if err := r.List(ctx, &list, client.InNamespace(op.Namespace)); err != nil {
		return fmt.Errorf("listing TalosOperations in %s: %w", op.Namespace, err)
	}

	facts.UnfinishedCNI = UnfinishedCNI(op.Spec.ClusterName, op.Name, list.Items)

	return nil
}

// checkCNIOperation checks a TalosOperation of type cni at admission.
func checkCNIOperation(op *ichorv1alpha1.TalosOperation, facts OperationFacts) []Refusal {
	if op.Spec.CNI == nil { // the CRD requires it; the unmanaged rule still speaks
		if r := CheckCNIUpgrade(facts.Cluster, CNIFacts{}, ""); len(r) > 0 && facts.Cluster.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
			return r
		}

		return nil
	}

	return CheckCNIUpgrade(facts.Cluster, CNIFacts{Running: facts.Cluster.Status.CNI.CiliumVersion, Unfinished: facts.UnfinishedCNI}, op.Spec.CNI.Version)
}

// checkBootstrapChart refuses a bootstrap chart annotation that names no
// embedded chart, and any change of it: the control planes' render keeps the
// bootstrap chart's bytes until the hand-over, so a change would move Cilium
// through Talos, outside Helm.
func checkBootstrapChart(old, c *ichorv1alpha1.TalosCluster) []Refusal {
	const field = "metadata.annotations[" + ichorv1alpha1.CNIBootstrapChartAnnotation + "]"

	v, had := c.Annotations[ichorv1alpha1.CNIBootstrapChartAnnotation]
	if old != nil {
		was, wasSet := old.Annotations[ichorv1alpha1.CNIBootstrapChartAnnotation]
		if was == v && wasSet == had {
			return nil
		}

		return []Refusal{{Field: field,
			Rule:   fmt.Sprintf("the bootstrap Cilium chart is a record of what `ichor init` booted (%q) and cannot change (to %q)", was, v),
			WayOut: "keep the annotation as it was; move Cilium with `ichor cni upgrade` once CNIHandover is True"}}
	}

	if had && !slices.Contains(release.CiliumVersions(), v) {
		return []Refusal{{Field: field,
			Rule:   fmt.Sprintf("%q is not a Cilium chart this Ichor embeds (it has %s)", v, strings.Join(release.CiliumVersions(), ", ")),
			WayOut: "name one of those, or leave the annotation out for " + release.DefaultCiliumVersion}}
	}

	return nil
}
