package talos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What a Kubernetes upgrade reads from and asks of a node (issue 22; the
// reference procedure is talosctl upgrade-k8s,
// t:pkg/cluster/kubernetes/talos_managed.go).

// StaticPod is a control-plane static pod as the node's kubelet reports it
// (StaticPodStatus "kube-system/<component>-<node>", k8s namespace,
// t:internal/app/machined/pkg/controllers/k8s/kubelet_static_pod.go).
type StaticPod struct {
	// Component is kube-apiserver, kube-controller-manager or kube-scheduler.
	Component string
	// Image is the image its container runs.
	Image string
	// Ready is the pod's Ready condition.
	Ready bool
}

// StaticPods reads the node's StaticPodStatus resources by component.
func (n *Node) StaticPods(ctx context.Context) (map[string]StaticPod, error) {
	list, err := safe.StateListAll[*k8s.StaticPodStatus](ctx, n.c.COSI)
	if err != nil {
		return nil, fmt.Errorf("read StaticPodStatus: %w", err)
	}

	out := map[string]StaticPod{}

	for r := range list.All() {
		b, err := json.Marshal(r.TypedSpec().PodStatus)
		if err != nil {
			continue
		}

		var st corev1.PodStatus
		if json.Unmarshal(b, &st) != nil || len(st.ContainerStatuses) == 0 {
			continue
		}

		_, name, _ := strings.Cut(r.Metadata().ID(), "/")

		component := ""

		for _, c := range []string{k8s.APIServerID, k8s.ControllerManagerID, k8s.SchedulerID} {
			if strings.HasPrefix(name, c+"-") {
				component = c
			}
		}

		if component == "" {
			continue
		}

		ready := false

		for _, c := range st.Conditions {
			if c.Type == corev1.PodReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}

		out[component] = StaticPod{Component: component, Image: st.ContainerStatuses[0].Image, Ready: ready}
	}

	return out, nil
}

// Containerd namespaces an image is pulled into, as upgrade-k8s pre-pulls:
// the control-plane images into the CRI's, the kubelet into the system one.
const (
	ImageNamespaceCRI    = "cri"
	ImageNamespaceSystem = "system"
)

// PullImage pulls image into the node's containerd namespace (ImageNamespaceCRI
// or ImageNamespaceSystem) through Talos's ImageService, as upgrade-k8s
// pre-pulls (t:pkg/cluster/kubernetes/talos_managed.go prePullImages; Ichor uses
// the ImageService that replaces the legacy MachineService.ImagePull). It
// returns the reference the node pinned. Pulling is idempotent.
func (n *Node) PullImage(ctx context.Context, namespace, image string) (string, error) {
	inst := &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}
	if namespace == ImageNamespaceSystem {
		inst = &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM}
	}

	stream, err := n.c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{
		Containerd: inst,
		ImageRef:   image,
	})
	if err != nil {
		return "", err
	}

	pinned := ""

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return pinned, nil
		}

		if err != nil {
			return "", err
		}

		if name := msg.GetName(); name != "" {
			pinned = name
		}
	}
}

// Manifest is one of the Manifest resources a control plane renders
// (controlplane namespace): Talos's bootstrap manifests ("00-…" to "13-…")
// and the inline manifests ("99-<name>").
type Manifest struct {
	// ID is the resource's ID.
	ID string
	// Objects are its Kubernetes objects.
	Objects []*unstructured.Unstructured
}

// InlineManifestPrefix starts the IDs of the Manifest resources of the
// configuration's inline manifests (t:internal/app/machined/pkg/controllers/k8s/extra_manifest.go).
const InlineManifestPrefix = "99-"

// Manifests reads the node's Manifest resources in ID order, as
// upgrade-k8s's manifests sync reads them
// (siderolabs/go-kubernetes kubernetes/manifests GetBootstrapManifests).
func (n *Node) Manifests(ctx context.Context) ([]Manifest, error) {
	list, err := safe.StateListAll[*k8s.Manifest](ctx, n.c.COSI)
	if err != nil {
		return nil, fmt.Errorf("read the Manifest resources: %w", err)
	}

	var out []Manifest

	for r := range list.All() {
		m := Manifest{ID: r.Metadata().ID()}
		for _, item := range r.TypedSpec().Items {
			m.Objects = append(m.Objects, &unstructured.Unstructured{Object: item.Object})
		}

		out = append(out, m)
	}

	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })

	return out, nil
}

// KubePrism is KubePrism's health as the node reports it (KubePrismStatuses
// "k8s-loadbalancer" in the k8s namespace, m:resources/k8s/kubeprism.go):
// Found is false when the node has no such resource (KubePrism off, or not
// started yet).
type KubePrism struct {
	Found   bool
	Host    string
	Healthy bool
}

// KubePrismStatus reads KubePrism's health.
func (n *Node) KubePrismStatus(ctx context.Context) (KubePrism, error) {
	r, err := safe.StateGetByID[*k8s.KubePrismStatuses](ctx, n.c.COSI, k8s.KubePrismStatusesID)
	if state.IsNotFoundError(err) {
		return KubePrism{}, nil
	}

	if err != nil {
		return KubePrism{}, fmt.Errorf("read KubePrismStatuses: %w", err)
	}

	return KubePrism{Found: true, Host: r.TypedSpec().Host, Healthy: r.TypedSpec().Healthy}, nil
}
