package render_test

import (
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

type k8sImages struct{ apiserver, cm, sched, proxy, kubelet string }

func imagesOf(r *render.Result) k8sImages {
	var out k8sImages

	cfg := r.Config
	if c := cfg.K8sAPIServerConfig(); c != nil {
		out.apiserver = c.Image()
	}

	if c := cfg.K8sControllerManagerConfig(); c != nil {
		out.cm = c.Image()
	}

	if c := cfg.K8sSchedulerConfig(); c != nil {
		out.sched = c.Image()
	}

	if c := cfg.K8sProxyConfig(); c != nil {
		out.proxy = c.Image()
	}

	if c := cfg.K8sKubeletConfig(); c != nil {
		out.kubelet = c.Image()
	}

	return out
}

// Rule: a pinned component is rendered at its pin, the others at the spec;
// the pin shows as Ichor's own system-layer patch; an image a patch moved
// to another tag is left alone.
func TestRenderKubernetesPins(t *testing.T) {
	in := input(t)
	in.Cluster.Spec.CNI.KubeProxy = ichorv1alpha1.KubeProxyEnabled

	spec := imagesOf(renderOK(t, in))
	if spec.apiserver != "registry.k8s.io/kube-apiserver:v1.37.2" || spec.kubelet != "ghcr.io/siderolabs/kubelet:v1.37.2" ||
		spec.proxy != "registry.k8s.io/kube-proxy:v1.37.2" {
		t.Fatalf("spec images %+v", spec)
	}

	in.Kubernetes = kubeupgrade.Versions{ControlPlane: "1.36.3", Proxy: "1.36.3", Kubelet: "1.36.3"}
	r := renderOK(t, in)

	if got, want := imagesOf(r), (k8sImages{
		"registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-scheduler:v1.36.3", "registry.k8s.io/kube-proxy:v1.36.3", "ghcr.io/siderolabs/kubelet:v1.36.3",
	}); got != want {
		t.Fatalf("pinned images %+v, want %+v", got, want)
	}

	origins, err := r.Origins()
	if err != nil {
		t.Fatal(err)
	}

	found := false

	for p, o := range origins {
		if p.Kind == "KubeletConfig" && p.Field == "image" {
			found = o == (render.Origin{Layer: render.LayerSystem, Patch: render.PatchKubernetesPins})
		}
	}

	if !found {
		t.Fatal("the kubelet image's origin is not the pin patch")
	}

	// Only the kubelet pinned (the control plane moved): the rest at the spec.
	in.Kubernetes = kubeupgrade.Versions{Kubelet: "1.36.3"}
	if got := imagesOf(renderOK(t, in)); got.apiserver != spec.apiserver || got.proxy != spec.proxy || got.kubelet != "ghcr.io/siderolabs/kubelet:v1.36.3" {
		t.Fatalf("kubelet-only pin %+v", got)
	}

	// A worker has only a kubelet to pin.
	w := in
	w.Machine = machine("w-1", ichorv1alpha1.RoleWorker)
	w.Kubernetes = kubeupgrade.Versions{ControlPlane: "1.36.3", Proxy: "1.36.3", Kubelet: "1.36.3"}

	if got := imagesOf(renderOK(t, w)); got.kubelet != "ghcr.io/siderolabs/kubelet:v1.36.3" {
		t.Fatalf("worker %+v", got)
	}

	// Pins equal to the spec render the same bytes as no pins.
	same := input(t)
	same.Kubernetes = kubeupgrade.Versions{ControlPlane: "1.37.2", Kubelet: "v1.37.2"}

	if renderOK(t, same).Hash != renderOK(t, input(t)).Hash {
		t.Fatal("pins at the spec changed the render")
	}
}
