// Package kubeupgrade holds the pure decisions of a Kubernetes upgrade
// (architecture, "Upgrades"; issue 22), shared by the render, the controller,
// the CLI and ichor-ui:
//
//   - Pins: which Kubernetes version each component of a machine's
//     configuration runs while an upgrade goes on. A change of
//     spec.kubernetesVersion does not move a node by itself: until the
//     kubernetes operation reaches a machine's component, the machine's render
//     keeps the version the cluster ran (status.kubernetesUpgrade.version). The
//     intermediate configurations are renders, never writes to spec.
//   - RemovedAPIs: the APIs in use that the target no longer serves, read
//     from a kube-apiserver's apiserver_requested_deprecated_apis.
//   - Retag: an image reference moved to another version.
//
// The stages follow talosctl upgrade-k8s
// (t:pkg/cluster/kubernetes/talos_managed.go): the control-plane static pods
// node by node, kube-proxy and the bootstrap manifests, then the kubelets
// (control planes first), so that no kubelet is ever newer than an API server.
package kubeupgrade

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Versions are the Kubernetes versions the components of one machine's
// configuration run ("1.36.3"); empty means the cluster's spec.kubernetesVersion.
type Versions struct {
	// ControlPlane is kube-apiserver's, kube-controller-manager's and kube-scheduler's.
	ControlPlane string
	// Proxy is kube-proxy's (a control plane's configuration carries it).
	Proxy string
	// Kubelet is the kubelet's.
	Kubelet string
}

// Pinned reports whether any component is pinned.
func (v Versions) Pinned() bool { return v != Versions{} }

// Normalize writes a Kubernetes version without its "v" ("1.37.2"); what does
// not parse is returned as it is.
func Normalize(v string) string {
	p, err := semver.ParseTolerant(v)
	if err != nil {
		return v
	}

	return p.String()
}

// Same reports whether two Kubernetes versions are the same release, with or without "v".
func Same(a, b string) bool { return Normalize(a) == Normalize(b) }

// Running is the Kubernetes version the cluster's machines run: the version
// they were last upgraded to (status.kubernetesUpgrade.version), or the spec
// when none is recorded yet.
func Running(c *ichorv1alpha1.TalosCluster) string {
	if v := c.Status.KubernetesUpgrade.Version; v != "" {
		return v
	}

	return c.Spec.KubernetesVersion
}

// IsKubernetes reports whether op is a kubernetes operation.
func IsKubernetes(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationKubernetes && op.Spec.Kubernetes != nil
}

// Finished reports whether an operation ended for good.
func Finished(op *ichorv1alpha1.TalosOperation) bool {
	return op.Status.Phase == ichorv1alpha1.OperationSucceeded || op.Status.Phase == ichorv1alpha1.OperationFailed
}

// Governing is the kubernetes operation of cluster c that decides its
// machines' pins: the newest one (not being deleted) whose target is the
// cluster's spec.kubernetesVersion; nil when there is none.
func Governing(c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation) *ichorv1alpha1.TalosOperation {
	var out *ichorv1alpha1.TalosOperation

	for i := range ops {
		op := &ops[i]
		if op.Namespace != c.Namespace || op.Spec.ClusterName != c.Name || !IsKubernetes(op) || op.DeletionTimestamp != nil ||
			!Same(op.Spec.Kubernetes.Version, c.Spec.KubernetesVersion) {
			continue
		}

		if out == nil || out.CreationTimestamp.Before(&op.CreationTimestamp) ||
			(out.CreationTimestamp.Equal(&op.CreationTimestamp) && out.Name < op.Name) {
			out = op
		}
	}

	return out
}

// Unfinished is the kubernetes operation of cluster c that has not finished
// (the oldest, with several), or nil.
func Unfinished(c *ichorv1alpha1.TalosCluster, ops []ichorv1alpha1.TalosOperation) *ichorv1alpha1.TalosOperation {
	var out *ichorv1alpha1.TalosOperation

	for i := range ops {
		op := &ops[i]
		if op.Namespace != c.Namespace || op.Spec.ClusterName != c.Name || op.Spec.Type != ichorv1alpha1.OperationKubernetes ||
			op.DeletionTimestamp != nil || Finished(op) {
			continue
		}

		if out == nil || op.CreationTimestamp.Before(&out.CreationTimestamp) {
			out = op
		}
	}

	return out
}

// StageIndex is the position of a stage in ichorv1alpha1.KubernetesStages; -1
// for none (the operation has not reached its stages yet: select).
func StageIndex(stage string) int {
	return slices.Index(ichorv1alpha1.KubernetesStages, stage)
}

// Pins are the versions machine m's render runs, from the operation that
// governs the cluster (Governing over ops). Without a recorded running
// version, or with the spec at it, nothing is pinned.
func Pins(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, ops []ichorv1alpha1.TalosOperation) Versions {
	return PinsFor(c, m, Governing(c, ops))
}

// PinsFor are the versions machine m's render runs while op (nil: none) is
// the cluster's kubernetes operation:
//
//   - the running version R = status.kubernetesUpgrade.version; nothing is
//     pinned when it is unset or equal to the spec (the target);
//   - a succeeded operation pins nothing: every machine runs the target;
//   - otherwise every component is pinned to R, except those the operation
//     has reached: the control-plane components of a machine from the moment
//     its control-plane step started (and of every machine once the stage is
//     done); kube-proxy likewise with the kube-proxy stage; the kubelet of a
//     machine from the moment its kubelet step started. A machine the
//     operation does not list follows the stages: its control plane moves once
//     the control-plane stage is done, its kubelet only when the operation
//     has succeeded.
func PinsFor(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine, op *ichorv1alpha1.TalosOperation) Versions {
	running := c.Status.KubernetesUpgrade.Version
	if running == "" || Same(running, c.Spec.KubernetesVersion) {
		return Versions{}
	}

	if op != nil && op.Status.Phase == ichorv1alpha1.OperationSucceeded {
		return Versions{}
	}

	pin := Normalize(running)
	out := Versions{ControlPlane: pin, Proxy: pin, Kubelet: pin}

	if op == nil || op.Status.Phase == ichorv1alpha1.OperationFailed {
		return out
	}

	at := StageIndex(op.Status.Step)

	var entry *ichorv1alpha1.MachineProgress

	for i := range op.Status.Machines {
		if op.Status.Machines[i].Name == m.Name {
			entry = &op.Status.Machines[i]
		}
	}

	reached := func(stage string) bool {
		idx := StageIndex(stage)
		switch {
		case at > idx:
			return true
		case at < idx:
			return false
		default:
			return entry != nil && entry.Stage == stage && Started(entry)
		}
	}

	if reached(ichorv1alpha1.KubernetesStageControlPlane) {
		out.ControlPlane = ""
	}

	if reached(ichorv1alpha1.KubernetesStageKubeProxy) {
		out.Proxy = ""
	}

	if at == StageIndex(ichorv1alpha1.KubernetesStageKubelet) && entry != nil && entry.Stage == ichorv1alpha1.KubernetesStageKubelet && Started(entry) {
		out.Kubelet = ""
	}

	return out
}

// Started reports whether the operation started (or finished) a machine's current stage.
func Started(p *ichorv1alpha1.MachineProgress) bool {
	switch p.Phase {
	case ichorv1alpha1.MachineInProgress, ichorv1alpha1.MachineDone, ichorv1alpha1.MachineFailed, ichorv1alpha1.MachineSkipped:
		return true
	default:
		return false
	}
}

// Retag moves image to Kubernetes version to when its tag is the version
// from ("v1.37.2", or with a kubelet flavour such as "v1.37.2-fat", whose
// flavour is kept); any other image (a digest, another tag a patch pinned)
// is returned as it is.
func Retag(image, from, to string) string {
	repo, tag, ok := splitTag(image)
	if !ok {
		return image
	}

	fromTag := "v" + Normalize(from)

	rest, found := strings.CutPrefix(tag, fromTag)
	if !found || (rest != "" && !strings.HasPrefix(rest, "-")) {
		return image
	}

	return repo + ":v" + Normalize(to) + rest
}

// ImageVersion is the Kubernetes version an image's tag names ("1.37.2"), or "".
func ImageVersion(image string) string {
	_, tag, ok := splitTag(image)
	if !ok {
		return ""
	}

	tag, _, _ = strings.Cut(tag, "-")

	v, err := semver.ParseTolerant(tag)
	if err != nil || strings.Count(tag, ".") != 2 {
		return ""
	}

	return v.String()
}

func splitTag(image string) (repo, tag string, ok bool) {
	if strings.Contains(image, "@") {
		return "", "", false
	}

	slash := strings.LastIndex(image, "/")

	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return "", "", false
	}

	return image[:colon], image[colon+1:], true
}

// Compare orders two Kubernetes versions (-1, 0, 1); one that does not parse sorts first.
func Compare(a, b string) int {
	pa, ea := semver.ParseTolerant(a)
	pb, eb := semver.ParseTolerant(b)

	switch {
	case ea != nil || eb != nil:
		return cmp.Compare(boolInt(ea == nil), boolInt(eb == nil))
	default:
		return pa.Compare(pb)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}

	return 0
}

// Describe is what a refusal or a message shows of a version: "v1.37.2".
func Describe(v string) string {
	if v == "" {
		return "(none)"
	}

	return fmt.Sprintf("v%s", Normalize(v))
}
