// Package attention turns the conditions of a cluster, its machines and its
// operations into the "Needs attention" list: one entry per problem, in plain
// language, with since when, what to do and the raw text behind it. ichor-ui
// serves it to the console (HealthService.ListAttention) and `ichor cluster
// get` prints it, so both say the same thing in the same words.
//
// One problem is told once: a machine's Ready, Reconciling and Stalled are a
// summary of its other conditions (SummarizeTalosMachine) and are not listed
// beside them; InSync repeats the reason of Drifted, RebootRequired or
// NodeHealthy and yields to them; the cluster's Ready repeats its machines'
// and is told only when no machine tells it; a machine's Paused repeats the
// cluster's; the cluster's CertificatesExpiring repeats its CAs' items
// (certificateItems, one per CA, from the same rule) and is not listed.
package attention

import (
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Severity says how urgent an item is.
type Severity string

// Severities, most urgent first.
const (
	// Error is a problem that stays until a person acts.
	Error Severity = "Error"
	// Warning is something that waits for a person, or will fix itself slowly.
	Warning Severity = "Warning"
	// Info is work in progress a person may want to follow.
	Info Severity = "Info"
)

// Action is what the console offers on an item.
type Action string

// Actions.
const (
	// ActionNone offers nothing beyond the link.
	ActionNone Action = ""
	// ActionApply starts the configuration rollout that changes wait for.
	ActionApply Action = "Apply"
	// ActionApprove opens the approval of a waiting machine.
	ActionApprove Action = "Approve"
	// ActionOpenNode opens the machine's node page.
	ActionOpenNode Action = "OpenNode"
	// ActionResumeOperation resumes a paused operation.
	ActionResumeOperation Action = "ResumeOperation"
	// ActionOpenOperation opens the operation's page.
	ActionOpenOperation Action = "OpenOperation"
	// ActionResumeCluster resumes a paused cluster.
	ActionResumeCluster Action = "ResumeCluster"
)

// Kinds of subject.
const (
	KindCluster   = "TalosCluster"
	KindMachine   = "TalosMachine"
	KindOperation = "TalosOperation"
	KindBackup    = "TalosEtcdBackup"
	KindStorage   = "TalosStorage"
)

// Item is one problem.
type Item struct {
	// Key names the problem, stable from one read to the next: kind/name/what.
	Key string `json:"key"`
	// Severity is Error, Warning or Info.
	Severity Severity `json:"severity"`
	// Kind is the subject's kind: TalosCluster, TalosMachine, TalosOperation or TalosEtcdBackup.
	Kind string `json:"kind"`
	// Subject is the name of the cluster, machine or operation.
	Subject string `json:"subject"`
	// Summary is the problem in plain language, one sentence naming the subject.
	Summary string `json:"summary"`
	// Detail is the raw text behind the summary: the condition's reason and message.
	Detail string `json:"detail,omitempty"`
	// Since is when the problem began (the condition's lastTransitionTime); zero when not known.
	Since time.Time `json:"since,omitzero"`
	// Action is what to do, for the console's button.
	Action Action `json:"action,omitempty"`
	// Command is the CLI command that does it, or that shows more.
	Command string `json:"command,omitempty"`
}

// Items lists what needs a person's attention in the cluster at now: its
// own conditions and its CAs that expire within CertificateWarning, its
// machines' conditions (those of other clusters are ignored), its
// operations' (paused, stopped on a failed step, failed) and its stale etcd
// backups. Errors come first, then warnings, then work in progress; the
// oldest first within each.
func Items(cluster *ichorv1alpha1.TalosCluster, machines []ichorv1alpha1.TalosMachine, operations []ichorv1alpha1.TalosOperation,
	backups []ichorv1alpha1.TalosEtcdBackup, now time.Time,
) []Item {
	var out []Item

	name := ""
	if cluster != nil {
		name = cluster.Name
	}

	machineTold := false

	for i := range machines {
		m := &machines[i]
		if name != "" && m.Spec.ClusterName != name {
			continue
		}

		items := machineItems(m)
		if len(items) > 0 && m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved {
			machineTold = true
		}

		out = append(out, items...)
	}

	if cluster != nil {
		out = append(out, clusterItems(cluster, machineTold)...)
		out = append(out, certificateItems(cluster, now)...)
	}

	out = append(out, operationItems(name, operations)...)
	out = append(out, backupItems(name, backups)...)

	sortItems(out)

	return out
}

// sortItems puts errors first, then warnings, then work in progress; the
// oldest first within each.
func sortItems(out []Item) {
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Severity != b.Severity {
			return rank[a.Severity] < rank[b.Severity]
		}

		if !a.Since.Equal(b.Since) {
			if a.Since.IsZero() || b.Since.IsZero() {
				return b.Since.IsZero()
			}

			return a.Since.Before(b.Since)
		}

		return a.Key < b.Key
	})
}

var rank = map[Severity]int{Error: 0, Warning: 1, Info: 2}

// Since is how long ago t was, in the largest whole unit (45s, 12m, 3h, 5d);
// "" for a zero t.
func Since(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}

	d := max(now.Sub(t), 0)

	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}

	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// detail is the raw text of a condition: "Reason: message".
func detail(c *metav1.Condition) string {
	switch {
	case c.Message == "":
		return c.Reason
	case c.Reason == "":
		return c.Message
	}

	return c.Reason + ": " + c.Message
}

func since(c *metav1.Condition) time.Time {
	if c == nil {
		return time.Time{}
	}

	return c.LastTransitionTime.Time
}

// paths is "(1 path)" or "(N paths)", or "" for none.
func paths(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return " (1 path)"
	}

	return fmt.Sprintf(" (%d paths)", n)
}

// clusterItems are the cluster's own problems. Its Ready is the summary of
// its machines: told only when no machine told it (machineTold false).
func clusterItems(c *ichorv1alpha1.TalosCluster, machineTold bool) []Item {
	var out []Item

	add := func(cond *metav1.Condition, sev Severity, action Action, command, summary string) {
		out = append(out, Item{
			Key: KindCluster + "/" + c.Name + "/" + cond.Type, Severity: sev, Kind: KindCluster, Subject: c.Name,
			Summary: summary, Detail: detail(cond), Since: since(cond), Action: action, Command: command,
		})
	}

	for i := range c.Status.Conditions {
		cond := &c.Status.Conditions[i]
		if !ichorv1alpha1.ConditionAbnormal(*cond) {
			continue
		}

		n := c.Name

		switch cond.Type {
		case ichorv1alpha1.ReadyCondition:
			if machineTold {
				continue
			}

			if cond.Reason == ichorv1alpha1.NoControlPlaneReadyReason {
				add(cond, Error, ActionNone, "ichor machine list", fmt.Sprintf("cluster %s has no ready control plane", n))
			} else {
				add(cond, Warning, ActionNone, "ichor machine list", fmt.Sprintf("cluster %s is not ready", n))
			}
		case ichorv1alpha1.PausedCondition:
			reason := c.Annotations[ichorv1alpha1.PausedReasonAnnotation]
			s := fmt.Sprintf("cluster %s is paused: the controllers do nothing on it", n)

			if reason != "" {
				s = fmt.Sprintf("cluster %s is paused (%s): the controllers do nothing on it", n, reason)
			}

			add(cond, Warning, ActionResumeCluster, "ichor cluster resume "+n, s)
		case ichorv1alpha1.VersionsCompatibleCondition:
			add(cond, Error, ActionNone, "", fmt.Sprintf("cluster %s runs a Talos and Kubernetes pair that is not supported", n))
		case ichorv1alpha1.CNIUnsupportedCondition:
			add(cond, Error, ActionNone, "", fmt.Sprintf("cluster %s names a CNI preset Ichor does not manage: the controllers change nothing on it", n))
		case ichorv1alpha1.CertificatesExpiringCondition:
			// certificateItems tells each expiring CA, with its own severity
			// and command, from status.certificates at now (fresher than the
			// condition, which moves only when the controller reconciles).
			continue
		case ichorv1alpha1.CARotationAdvisedCondition:
			add(cond, Warning, ActionNone, "", fmt.Sprintf("the certificate authorities of cluster %s should be rotated", n))
		case ichorv1alpha1.NetworkPoliciesAppliedCondition:
			add(cond, Warning, ActionNone, "", fmt.Sprintf("Ichor's network policies are not in place in cluster %s", n))
		case ichorv1alpha1.KubeProxyConsistentCondition:
			if cond.Reason == ichorv1alpha1.KubeProxySwitchingReason {
				add(cond, Info, ActionNone, "", fmt.Sprintf("kube-proxy of cluster %s is being switched: %s", n, cond.Message))

				break
			}

			add(cond, Error, ActionNone, "", fmt.Sprintf("Cilium and Talos disagree about kube-proxy on cluster %s", n))
		case ichorv1alpha1.TopologyTransitioningCondition:
			add(cond, Info, ActionNone, "", fmt.Sprintf("the control planes of cluster %s are changing in number", n))
		default:
			add(cond, Warning, ActionNone, "", fmt.Sprintf("cluster %s: %s is %s", n, cond.Type, cond.Status))
		}
	}

	return out
}
