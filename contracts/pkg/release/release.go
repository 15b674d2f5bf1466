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
	// DefaultCiliumVersion is the Cilium chart Ichor installs (embedded by
	// contracts/pkg/cilium from the Go module github.com/cilium/cilium). It is
	// the newest pinned release: Cilium 1.20 is e2e-tested on Kubernetes 1.33 to
	// 1.36 and no pinned release lists 1.37 yet, so DefaultKubernetesVersion
	// runs on the newest tested one (see CheckCiliumPair).
	DefaultCiliumVersion = "v1.20.2"
)

// CiliumVersions returns the Cilium chart versions Ichor embeds, oldest first:
// the default and the newest patch of the minor below it, which is the minor a
// cluster may run when it is taken over or upgraded one minor at a time
// (architecture "Cilium", "Upgrades" and "Takeover"). Cilium 1.18 is not
// embedded: it is two minors below the default and tested only up to
// Kubernetes 1.33.
func CiliumVersions() []string {
	return []string{"v1.19.3", DefaultCiliumVersion}
}

// CheckKubernetesSupported reports whether Kubernetes kubernetesVersion can run on
// Talos talosVersion. The error says which pair is refused and why; it is CheckPair.
func CheckKubernetesSupported(talosVersion, kubernetesVersion string) error {
	return CheckPair(talosVersion, kubernetesVersion)
}

// DefaultVersionContract is the Talos configuration contract of DefaultTalosVersion.
const DefaultVersionContract = "v1.14"

// Set is one set of versions: a Talos release and its version contract, a
// Kubernetes release and a Cilium chart.
type Set struct {
	Talos           string
	VersionContract string
	Kubernetes      string
	Cilium          string
}

// Pinned is the set this build of Ichor embeds (architecture, "Upgrades"):
// it decides a first install's versions and is the Recommended upgrade
// candidate when newer than what a cluster runs; it does not bound an upgrade.
var Pinned = Set{
	Talos:           DefaultTalosVersion,
	VersionContract: DefaultVersionContract,
	Kubernetes:      DefaultKubernetesVersion,
	Cilium:          DefaultCiliumVersion,
}
