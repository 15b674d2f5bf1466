// Package release holds the versions Ichor pins and the compatibility rules
// between them. The rules come from Talos machinery's own compatibility
// package, so Ichor never disagrees with Talos about which pairs it supports.
package release

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
)

const (
	// DefaultTalosVersion is the Talos release Ichor installs when a cluster names none.
	DefaultTalosVersion = "v1.14.1"
	// DefaultKubernetesVersion is the Kubernetes release Ichor installs when a cluster names none.
	// Talos 1.14 supports Kubernetes 1.32 to 1.37 (machinery compatibility/talos114).
	DefaultKubernetesVersion = "1.37.2"
)

// CheckKubernetesSupported reports whether Kubernetes kubernetesVersion can run on
// Talos talosVersion. The error says which pair is refused and why.
func CheckKubernetesSupported(talosVersion, kubernetesVersion string) error {
	talos, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talosVersion})
	if err != nil {
		return fmt.Errorf("talos version %q is not a valid version (expected e.g. %s): %w", talosVersion, DefaultTalosVersion, err)
	}
	kube, err := compatibility.ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return fmt.Errorf("kubernetes version %q is not a valid version (expected e.g. %s): %w", kubernetesVersion, DefaultKubernetesVersion, err)
	}
	if err := kube.SupportedWith(talos); err != nil {
		return fmt.Errorf("kubernetes %s cannot run on talos %s: %w", kubernetesVersion, talosVersion, err)
	}
	return nil
}
