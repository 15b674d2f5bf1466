// Package release holds the versions Ichor pins and the compatibility rules
// between them. The rules come from Talos machinery's own compatibility
// package, so Ichor never disagrees with Talos about which pairs it supports.
package release

const (
	// DefaultTalosVersion is the Talos release Ichor installs when a cluster names none.
	DefaultTalosVersion = "v1.14.1"
	// DefaultKubernetesVersion is the Kubernetes release Ichor installs when a cluster names none.
	// Talos 1.14 supports Kubernetes 1.32 to 1.37 (machinery compatibility/talos114).
	DefaultKubernetesVersion = "1.37.2"
)

// CheckKubernetesSupported reports whether Kubernetes kubernetesVersion can run on
// Talos talosVersion. The error says which pair is refused and why; it is CheckPair.
func CheckKubernetesSupported(talosVersion, kubernetesVersion string) error {
	return CheckPair(talosVersion, kubernetesVersion)
}
