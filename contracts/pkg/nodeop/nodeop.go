// Package nodeop builds the TalosOperations that act on nodes, a node
// operation (reboot, shutdown or reset of one machine) and a cluster
// shutdown, as `ichor node ...`, `ichor cluster shutdown` and ichor-ui create
// them, and says step by step what each does, so that the CLI's prompt and
// the console's dialog read alike. The checks are guard's (CheckOperation,
// OperationRequirements); the steps are what the operation controller does
// (controller/internal/controller/operation, node.go and shutdown.go).
package nodeop

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Wipe modes of a reset, as spec.node.wipeMode takes them.
const (
	WipeStateEphemeral = "state-ephemeral"
	WipeSystemDisk     = "system-disk"
	WipeAll            = "all"
)

// WipeModes are the wipe modes of a reset, the default first.
var WipeModes = []string{WipeStateEphemeral, WipeSystemDisk, WipeAll}

// Actions are the node actions, in the order they are offered.
var Actions = []string{ichorv1alpha1.NodeActionReboot, ichorv1alpha1.NodeActionShutdown, ichorv1alpha1.NodeActionReset}

// CheckAction says what is wrong with an action and wipe mode as a person
// asked for them, or "" when nothing is: an unknown action or wipe mode, or
// a wipe mode for an action other than reset. field names the field asked
// (a flag or a request field) and wipeField the wipe mode's.
func CheckAction(action, wipeMode, field, wipeField string) string {
	switch {
	case !slices.Contains(Actions, action):
		return fmt.Sprintf("%s %q is not a node action: choose reboot, shutdown or reset", field, action)
	case wipeMode != "" && action != ichorv1alpha1.NodeActionReset:
		return fmt.Sprintf("%s is only for a reset; leave it empty for a %s", wipeField, action)
	case wipeMode != "" && !slices.Contains(WipeModes, wipeMode):
		return fmt.Sprintf("%s %q is not a wipe mode: choose state-ephemeral (the default), system-disk or all", wipeField, wipeMode)
	}

	return ""
}

// Destructive reports whether an action needs the machine's name typed as
// consent: a shutdown (the node stays off until someone powers it on) and a
// reset (its data goes).
func Destructive(action string) bool {
	return action == ichorv1alpha1.NodeActionShutdown || action == ichorv1alpha1.NodeActionReset
}

// Node is the TalosOperation of type node that acts on machine m: reboot,
// shutdown or reset, the reset with wipeMode ("" is state-ephemeral).
func Node(m *ichorv1alpha1.TalosMachine, action, wipeMode string) *ichorv1alpha1.TalosOperation {
	a := &ichorv1alpha1.NodeAction{MachineName: m.Name, Action: action}
	if action == ichorv1alpha1.NodeActionReset && wipeMode != "" && wipeMode != WipeStateEphemeral {
		a.WipeMode = wipeMode
	}

	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, GenerateName: "node-" + action + "-"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: m.Spec.ClusterName,
			Type:        ichorv1alpha1.OperationNode,
			Node:        a,
		},
	}
}

// Shutdown is the TalosOperation that shuts cluster down.
func Shutdown(namespace, cluster string) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "shutdown-"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: cluster, Type: ichorv1alpha1.OperationShutdown},
	}
}

// NodeSteps says what a node operation does to machine m, step by step.
func NodeSteps(m *ichorv1alpha1.TalosMachine, action, wipeMode string) []string {
	var steps []string
	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		steps = append(steps, "check etcd's health on every control plane")
	}

	steps = append(steps, "evacuate the storage system from the node (if a storage integration selects it)")

	switch action {
	case ichorv1alpha1.NodeActionReboot:
		steps = append(steps, "cordon and drain the Node", "reboot the node (once)", "wait for a new boot, running and Ready", "uncordon the Node")
	case ichorv1alpha1.NodeActionShutdown:
		steps = append(steps, "power the node off (once); Talos's shutdown sequence cordons and drains it", "wait until it stops answering",
			"power it on yourself to bring it back; Talos uncordons it at boot")
	case ichorv1alpha1.NodeActionReset:
		steps = append(steps, "cordon and drain the Node", "reset the node (once), wiping "+wiped(wipeMode)+"; data on what is wiped is lost",
			"delete its Kubernetes Node")
		if wipeMode == WipeSystemDisk || wipeMode == WipeAll {
			steps = append(steps, "boot it from its install media: once it answers in maintenance mode, the machine reconciler installs its configuration again")
		} else {
			steps = append(steps, "the machine reconciler installs its configuration again once it answers in maintenance mode")
		}
	}

	return steps
}

// wiped is what a reset in wipeMode wipes, as a person reads it.
func wiped(wipeMode string) string {
	switch wipeMode {
	case WipeSystemDisk:
		return "the whole system disk"
	case WipeAll:
		return "the system disk and every user disk"
	default:
		return "STATE and EPHEMERAL"
	}
}

// ShutdownSteps says what a cluster shutdown does, step by step.
func ShutdownSteps() []string {
	return []string{
		"hold the cluster lock until the shutdown has completed: no other operation starts meanwhile",
		"power every worker off at once (once each); Talos's shutdown sequence cordons and drains them",
		"wait until no worker answers",
		"power every control plane off in one burst (once each, without a drain), the controller's own node last; " +
			"etcd loses its quorum only now, and no member is removed, so no data is lost",
		"wait for you to power the machines on (Ichor cannot): the operation completes once every machine answers on a new boot",
	}
}

// CARotation is the TalosOperation that rotates cluster's Talos API CA and
// Kubernetes CA, or one of them (talos or kubernetes false), and the
// aggregator CA (and the etcd CA, which the webhook refuses) on request.
func CARotation(namespace, cluster string, talos, kubernetes, aggregator, etcd bool) *ichorv1alpha1.TalosOperation {
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: cluster + "-rotate-ca-"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: cluster, Type: ichorv1alpha1.OperationCARotation},
	}

	if !talos || !kubernetes || aggregator || etcd {
		op.Spec.CARotation = &ichorv1alpha1.CARotation{Talos: &talos, Kubernetes: &kubernetes, Aggregator: aggregator, Etcd: etcd}
	}

	return op
}

// CARotationSteps says what the CA rotation op does, step by step (the
// stages of the controller's ca-rotation, Talos's own procedure); one of the
// aggregator CA alone hands no credentials out and restarts no client.
func CARotationSteps(op *ichorv1alpha1.TalosOperation) []string {
	r := op.Spec.CARotation
	if r != nil && r.Talos != nil && !*r.Talos && r.Kubernetes != nil && !*r.Kubernetes {
		return []string{
			"hold the cluster lock until the rotation has completed; make the new aggregator CA and keep it in the bundle Secret beside the old one",
			"every kube-apiserver accepts front proxies of the new aggregator CA beside the old one (applied live to the control planes, one at a time; no reboot)",
			"the new aggregator CA issues the front proxy's certificate; the old one is still accepted",
			"drop the old aggregator CA; the old bundle leaves the Secret (your talosconfig and kubeconfig do not change)",
		}
	}

	return []string{
		"hold the cluster lock until the rotation has completed; make the new CAs and keep them in the bundle Secret beside the old ones",
		"every node and kube-apiserver accepts the new CAs beside the old ones (applied live, control planes first, one at a time; no reboot)",
		"wait until you hold credentials of the new CAs (the CLI stores them; the console hands them out as a download): " +
			"the next stage changes what the servers present",
		"the new CAs issue: every node and kube-apiserver presents certificates of them; the old ones are still accepted",
		"wait until every namespace's kube-root-ca.crt carries the new Kubernetes CA, then drop the old CAs: " +
			"talosconfigs and kubeconfigs of the old CAs stop working",
		"restart, one at a time, the clients that keep the old Kubernetes CA (CoreDNS, kube-proxy, Cilium, ichor-ui); the old bundle leaves the Secret",
	}
}

// KeyRotation is the TalosOperation that rotates cluster's service-account
// signing key and secretbox key, or one of them (serviceAccount or secretbox
// false).
func KeyRotation(namespace, cluster string, serviceAccount, secretbox bool) *ichorv1alpha1.TalosOperation {
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: cluster + "-rotate-keys-"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: cluster, Type: ichorv1alpha1.OperationKeyRotation},
	}

	if !serviceAccount || !secretbox {
		op.Spec.KeyRotation = &ichorv1alpha1.KeyRotation{ServiceAccount: serviceAccount, Secretbox: secretbox}
	}

	return op
}

// KeyRotationSteps says what a key rotation does, step by step (the stages
// of the controller's key-rotation).
func KeyRotationSteps() []string {
	return []string{
		"hold the cluster lock until the rotation has completed; make the new keys and keep them in the bundle Secret beside the old ones",
		"every control plane verifies tokens of the new service-account key and decrypts with the new secretbox key (applied live, one at a time; no reboot)",
		"the new keys sign and encrypt; the old ones still verify and decrypt",
		"write every Secret again, so it is encrypted with the new key; legacy service-account token Secrets are signed again",
		"wait for the pods' projected tokens to be re-issued with the new key (an hour by default), then drop the old keys: tokens of the old key stop working",
		"give the new secretbox key Talos's name back and write every Secret once more; the old bundle leaves the Secret",
	}
}
