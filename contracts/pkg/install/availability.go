package install

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// Availability is how the controller and ichor-ui run (architecture,
// "Deployment"): two replicas, a PodDisruptionBudget and anti-affinity, or,
// on a cluster with a single schedulable node, one replica and no
// PodDisruptionBudget (with two replicas and minAvailable 1 on one node, a
// drain of that node would never finish).
type Availability struct {
	// SchedulableNodes is how many nodes can run the pods.
	SchedulableNodes int
	// Replicas is the replica count.
	Replicas int32
	// PDB says whether the PodDisruptionBudget exists.
	PDB bool
}

// HighlyAvailable reports whether the Deployment runs two replicas.
func (a Availability) HighlyAvailable() bool { return a.Replicas > 1 }

// String says it for a log line and a condition message.
func (a Availability) String() string {
	nodes := fmt.Sprintf("%d schedulable nodes", a.SchedulableNodes)
	if a.SchedulableNodes == 1 {
		nodes = "1 schedulable node"
	}

	if a.PDB {
		return fmt.Sprintf("%s: %d replicas with a PodDisruptionBudget", nodes, a.Replicas)
	}

	return fmt.Sprintf("%s: %d replica, no PodDisruptionBudget", nodes, a.Replicas)
}

// transientTaints are the taints a node carries while it is not ready or
// cannot be reached; they come and go with a reboot, so they do not change
// how many nodes count (a flip to one replica in the middle of an upgrade
// would drop the PodDisruptionBudget exactly when drains need it).
var transientTaints = map[string]bool{
	corev1.TaintNodeNotReady:      true,
	corev1.TaintNodeUnreachable:   true,
	corev1.TaintNodeUnschedulable: true,
}

// SchedulableNodes counts the nodes the pods of template can run on: nodes
// whose labels match its nodeSelector and whose NoSchedule and NoExecute
// taints it tolerates. A cordon, not-ready and unreachable do not take a node
// out of the count: they are a drain's, a reboot's or an outage's and pass;
// a node that is gone for good is deleted.
func SchedulableNodes(nodes []corev1.Node, template *corev1.PodSpec) int {
	n := 0

	for i := range nodes {
		if nodeFits(&nodes[i], template) {
			n++
		}
	}

	return n
}

func nodeFits(node *corev1.Node, pod *corev1.PodSpec) bool {
	if node.DeletionTimestamp != nil {
		return false
	}

	if len(pod.NodeSelector) > 0 && !labels.SelectorFromSet(pod.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}

	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule || transientTaints[t.Key] {
			continue
		}

		tolerated := false

		for j := range pod.Tolerations {
			if pod.Tolerations[j].ToleratesTaint(klog.Background(), t, true) {
				tolerated = true

				break
			}
		}

		if !tolerated {
			return false
		}
	}

	return true
}

// Decide is the availability of a Deployment whose pods can run on
// schedulable nodes. A Deployment that must stay single (MustStaySingle)
// runs one replica whatever the count.
func Decide(schedulable int, single bool) Availability {
	a := Availability{SchedulableNodes: schedulable, Replicas: 1}
	if schedulable >= 2 && !single {
		a.Replicas, a.PDB = 2, true
	}

	return a
}

// MustStaySingle reports whether a pod spec is ichor-ui as an OIDC issuer
// (an --issuer argument) without a shared signing key (no
// --signing-key-file): its key would be made in each replica's memory, so
// one replica's tokens would not verify on another. It runs one replica (see
// Decide). Ichor's manifest mounts the key the controller keeps
// (ichor-ui-signing-key) and shares the sessions through IchorUISessions,
// so its ichor-ui runs two replicas with sign-in on.
func MustStaySingle(pod *corev1.PodSpec) bool {
	for _, c := range pod.Containers {
		issuer, sharedKey := false, false

		for _, a := range c.Args {
			switch {
			case strings.HasPrefix(a, "--issuer=") || a == "--issuer":
				issuer = true
			case strings.HasPrefix(a, "--signing-key-file=") && a != "--signing-key-file=":
				sharedKey = true
			}
		}

		if issuer && !sharedKey {
			return true
		}
	}

	return false
}
