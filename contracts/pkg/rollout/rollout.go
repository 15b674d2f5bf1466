// Package rollout is the plan of a config rollout (architecture,
// "Configuration reconcile"): which machines a TalosOperation of type config
// would work on and why, read from the TalosMachines' status, and whether
// another config rollout of the cluster has not finished. `ichor config
// apply` and ichor-ui's StartConfigRollout both decide with it, so the CLI
// and the console refuse and plan alike. Next is the running rollout's choice
// of the machines it works on in a pass (the worker budget), which the
// controller's config operation makes with it. The functions are pure: the
// callers list the objects.
package rollout

import (
	"cmp"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// What a config operation does to a waiting machine, as Machine.Rollout names it.
const (
	// KindReboot is a reboot-requiring change: cordon, drain, staged apply,
	// reboot, uncordon.
	KindReboot = "reboot"
	// KindAPIServerRestart is a change that restarts the kube-apiserver: an
	// apply without reboot and no drain.
	KindAPIServerRestart = "kube-apiserver-restart"
	// KindDrift is a node that differs from the render and gets it again.
	KindDrift = "drift"
)

// Machine is one machine a config rollout would work on. It carries paths
// only, never values.
type Machine struct {
	// Name is the TalosMachine's name.
	Name string `json:"name"`
	// Role is controlplane or worker.
	Role string `json:"role"`
	// Rollout lists what the operation does to it: KindReboot or
	// KindAPIServerRestart, then KindDrift.
	Rollout []string `json:"rollout"`
	// Paths are status.rebootRequiredPaths: the rendered changes that wait.
	Paths []string `json:"rebootRequiredPaths,omitempty"`
	// DriftPaths are status.driftPaths: where the node differs from the render.
	DriftPaths []string `json:"driftPaths,omitempty"`
	// Held is the hold annotation that makes the operation skip it, if any.
	Held string `json:"heldBy,omitempty"`
}

// Plan is what a config rollout of a cluster would do.
type Plan struct {
	// Machines wait for the rollout, in the operation's order: control
	// planes first, then by name.
	Machines []Machine
	// Matched counts the machines of the cluster the selector matched,
	// waiting or not: zero with a selector means the selector is wrong.
	Matched int
}

// Configured is the operation's own choice of machines (the controller's
// config rollout selects with it): approved, addressed, provisioned and not
// being removed.
func Configured(m *ichorv1alpha1.TalosMachine) bool {
	return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.Spec.Address != "" &&
		meta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition) && m.DeletionTimestamp == nil
}

// Waiting reads from a machine's status what a config operation would do to
// it; false when nothing waits.
func Waiting(m *ichorv1alpha1.TalosMachine) (Machine, bool) {
	w := Machine{
		Name: m.Name, Role: m.Spec.Role,
		Paths: slices.Clone(m.Status.RebootRequiredPaths), DriftPaths: slices.Clone(m.Status.DriftPaths),
	}
	cond := func(t string) bool { return meta.IsStatusConditionTrue(m.Status.Conditions, t) }
	switch {
	case cond(ichorv1alpha1.RebootRequiredCondition):
		w.Rollout = append(w.Rollout, KindReboot)
	case cond(ichorv1alpha1.APIServerRestartRequiredCondition):
		w.Rollout = append(w.Rollout, KindAPIServerRestart)
	case len(w.Paths) > 0:
		// Paths without their condition: the status is being rewritten; the
		// operation decides the mode from the node itself.
		w.Rollout = append(w.Rollout, KindReboot)
	}
	if cond(ichorv1alpha1.DriftedCondition) || len(w.DriftPaths) > 0 {
		w.Rollout = append(w.Rollout, KindDrift)
	}
	w.Held = HoldOf(m)
	return w, len(w.Rollout) > 0
}

// APIServerRestartPending names the machines of cluster whose kube-apiserver
// still runs an earlier configuration (APIServerRestartRequired), in the
// order given: what `ichor cluster authentication get` and the console's
// Cluster authentication card say waits for a config rollout.
func APIServerRestartPending(cluster string, machines []ichorv1alpha1.TalosMachine) []string {
	var out []string
	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName == cluster && meta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.APIServerRestartRequiredCondition) {
			out = append(out, m.Name)
		}
	}
	return out
}

// HoldOf is the hold annotation a machine carries (the operation skips it
// while it does), or "".
func HoldOf(m *ichorv1alpha1.TalosMachine) string {
	for _, a := range []string{ichorv1alpha1.HoldUpgradeAnnotation, ichorv1alpha1.HoldApplyAnnotation} {
		if _, ok := m.Annotations[a]; ok {
			return a
		}
	}
	return ""
}

// For plans a config rollout of cluster over the machines sel matches (nil
// matches all): the configured ones with something waiting, in the
// operation's order. machines may hold other clusters' machines; they are
// ignored.
func For(cluster string, sel labels.Selector, machines []ichorv1alpha1.TalosMachine) Plan {
	if sel == nil {
		sel = labels.Everything()
	}
	p := Plan{Machines: []Machine{}}
	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName != cluster || !sel.Matches(labels.Set(m.Labels)) {
			continue
		}
		p.Matched++
		if !Configured(m) {
			continue
		}
		if w, ok := Waiting(m); ok {
			p.Machines = append(p.Machines, w)
		}
	}
	slices.SortStableFunc(p.Machines, func(a, b Machine) int {
		return cmp.Or(cmp.Compare(roleOrder(a.Role), roleOrder(b.Role)), cmp.Compare(a.Name, b.Name))
	})
	return p
}

func roleOrder(role string) int {
	if role == ichorv1alpha1.RoleControlPlane {
		return 0
	}
	return 1
}

// ParseSelector reads a label selector written as kubectl -l takes it; ""
// is no selector (nil, everything). The error says how to write one.
func ParseSelector(s string) (*metav1.LabelSelector, labels.Selector, error) {
	if s == "" {
		return nil, labels.Everything(), nil
	}
	ls, err := metav1.ParseToLabelSelector(s)
	if err != nil {
		return nil, nil, fmt.Errorf("%q is not a label selector (%w): write it as kubectl -l does, e.g. zone=a or 'tier in (edge,core)'", s, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, nil, fmt.Errorf("%q: %w", s, err)
	}
	return ls, sel, nil
}

// Finished reports whether an operation has ended for good.
func Finished(op *ichorv1alpha1.TalosOperation) bool {
	return op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed
}

// Unfinished is the config operation of cluster that has not finished (and
// is not being deleted), or nil: a second one is refused, that one is
// followed or resumed instead. With several, the oldest.
func Unfinished(cluster string, ops []ichorv1alpha1.TalosOperation) *ichorv1alpha1.TalosOperation {
	var out *ichorv1alpha1.TalosOperation
	for i := range ops {
		o := &ops[i]
		if o.Spec.ClusterName != cluster || o.Spec.Type != ichorv1alpha1.OperationConfig || Finished(o) || o.DeletionTimestamp != nil {
			continue
		}
		if out == nil || o.CreationTimestamp.Before(&out.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&out.CreationTimestamp) && o.Name < out.Name) {
			out = o
		}
	}
	return out
}

// NewOperation is the config operation a rollout of cluster creates in ns:
// a generated name config-…, the selector as given (nil for all machines).
func NewOperation(ns, cluster string, sel *metav1.LabelSelector) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "config-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName:     cluster,
			Type:            ichorv1alpha1.OperationConfig,
			MachineSelector: sel,
		},
	}
}
