package render

import (
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/stdpatches"

	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
)

// PatchKubernetesPins is the system-layer patch, applied last, that keeps a
// machine's Kubernetes components at the version they run while a Kubernetes
// upgrade has not reached them (kubeupgrade.Pins). Its origin shows in the
// effective configuration.
const PatchKubernetesPins = "ichor-kubernetes-upgrade"

// kubernetesPinStep is the step that moves the images of the pinned
// components of cfg from the spec's version to their pin, built with
// machinery's own patches (stdpatches, as talosctl upgrade-k8s patches a
// node's configuration, t:pkg/cluster/kubernetes/talos_managed.go). An image
// whose tag is not the spec's version (a patch pinned another one, or a
// digest) is left alone; none when nothing moves. One step per image: each
// is a document of its own (the legacy v1alpha1 form cannot share a patch).
func kubernetesPinSteps(cfg coreconfig.Provider, spec string, pins kubeupgrade.Versions) ([]Step, error) {
	type image struct {
		pin, current string
		patch        func(string) ([]byte, error)
	}

	var images []image

	if c := cfg.K8sAPIServerConfig(); c != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		images = append(images, image{pins.ControlPlane, c.Image(), func(img string) ([]byte, error) {
			return stdpatches.WithKubeAPIServerImage(stdpatches.GuessVersionContractKubeAPIServer(cfg), img)
		}})
	}

	if c := cfg.K8sControllerManagerConfig(); c != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		images = append(images, image{pins.ControlPlane, c.Image(), func(img string) ([]byte, error) {
			return stdpatches.WithKubeControllerManagerImage(stdpatches.GuessVersionContractKubeControllerManager(cfg), img)
		}})
	}

	if c := cfg.K8sSchedulerConfig(); c != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		images = append(images, image{pins.ControlPlane, c.Image(), func(img string) ([]byte, error) {
			return stdpatches.WithKubeSchedulerImage(stdpatches.GuessVersionContractKubeScheduler(cfg), img)
		}})
	}

	if c := cfg.K8sProxyConfig(); c != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		images = append(images, image{pins.Proxy, c.Image(), func(img string) ([]byte, error) {
			return stdpatches.WithKubeProxyImage(stdpatches.GuessVersionContractKubeProxy(cfg), img)
		}})
	}

	if c := cfg.K8sKubeletConfig(); c != nil {
		images = append(images, image{pins.Kubelet, c.Image(), func(img string) ([]byte, error) {
			return stdpatches.WithKubeletImage(stdpatches.GuessVersionContractKubelet(cfg), img)
		}})
	}

	var steps []Step

	for _, im := range images {
		if im.pin == "" || kubeupgrade.Same(im.pin, spec) {
			continue
		}

		moved := kubeupgrade.Retag(im.current, spec, im.pin)
		if moved == im.current {
			continue
		}

		b, err := im.patch(moved)
		if err != nil {
			return nil, err
		}

		s, err := bytesStep(LayerSystem, PatchKubernetesPins, b)
		if err != nil {
			return nil, err
		}

		steps = append(steps, s)
	}

	return steps, nil
}
