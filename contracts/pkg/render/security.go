package render

import (
	"errors"
	"fmt"
	"net/url"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// kubeletServingDocs make every kubelet request a serving certificate from the
// cluster CA (spec.security.kubeletServingCertificates) with the kubelet's
// rotate-server-certificates flag, the knob Talos documents for it
// (talos.dev, Kubernetes guides, "Deploying Metrics Server": machine.kubelet.
// extraArgs rotate-server-certificates: true). Under a contract with
// multi-document Kubernetes configuration it is KubeletConfig's extraArgs.
//
// The kubelet then waits for its kubernetes.io/kubelet-serving CSR to be
// approved; Ichor's controller approves it, only for the node's own names and
// addresses (architecture, "Trust"), so no approver is installed here.
func kubeletServingDocs(c *ichorv1alpha1.TalosCluster, vc *coreconfig.VersionContract) []doc {
	if !c.Spec.Security.KubeletServingCertificates {
		return nil
	}

	args := doc{keyExtraArgs: doc{"rotate-server-certificates": "true"}}

	if vc.MultidocKubernetesConfigSupported() {
		return []doc{multidoc("KubeletConfig", args)}
	}

	return []doc{legacy(doc{keyMachine: doc{"kubelet": args}})}
}

// DefaultSecureBootSchematic is Image Factory's schematic without
// customizations: the SecureBoot installer of a cluster without
// spec.schematic. Sidero Labs publishes SecureBoot installers (signed with its
// key) only through Image Factory, as
// factory.talos.dev/installer-secureboot/<schematic>:<version> (talos.dev,
// "SecureBoot", SecureBoot with Sidero Labs images); there is no
// ghcr.io/siderolabs SecureBoot installer.
const DefaultSecureBootSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

// ErrSecureBootRequired is the error (wrapped) of a machine whose node does
// not boot with SecureBoot in a cluster that requires it: its configuration
// is held.
var ErrSecureBootRequired = errors.New("SecureBoot is required")

// SecureBootInstaller reports whether machine m installs the SecureBoot
// installer under spec.security.secureBoot:
//
//   - Off (or empty): never.
//   - Preferred: when the node is known to boot with SecureBoot
//     (status.secureBoot true); unknown or false takes the ordinary installer.
//   - Required: yes when the node boots with SecureBoot or its state is not
//     known yet (nil m, or status.secureBoot unset); a node known not to boot
//     with SecureBoot is an error wrapping ErrSecureBootRequired, and its
//     configuration is held.
func SecureBootInstaller(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine) (bool, error) {
	var state *bool
	if m != nil {
		state = m.Status.SecureBoot
	}

	switch c.Spec.Security.SecureBoot {
	case "", ichorv1alpha1.SecureBootOff:
		return false, nil
	case ichorv1alpha1.SecureBootPreferred:
		return state != nil && *state, nil
	case ichorv1alpha1.SecureBootRequired:
		if state != nil && !*state {
			return false, fmt.Errorf("machine %s: %w by cluster %s (spec.security.secureBoot Required) but the node does not boot with SecureBoot (status.secureBoot false); "+
				"its configuration is held: boot it from the SecureBoot ISO after a reset that wipes the system disk, or set spec.security.secureBoot to Preferred",
				m.Name, ErrSecureBootRequired, c.Name)
		}

		return true, nil
	default:
		return false, fmt.Errorf("cluster %s: spec.security.secureBoot %q is not Off, Preferred or Required", c.Name, c.Spec.Security.SecureBoot)
	}
}

// InstallerImage is the installer image of the cluster's Talos version for
// machine m (nil: no machine's SecureBoot state is known):
// spec.registry.installerImage when set (used as given: under SecureBoot it
// must be a SecureBoot installer), else the Image Factory's installer of
// spec.schematic (spec.registry.imageFactoryURL, or factory.talos.dev), else
// Talos's own installer. When SecureBootInstaller says so, the Image
// Factory's installer-secureboot of spec.schematic, or of the default
// schematic without one.
func InstallerImage(c *ichorv1alpha1.TalosCluster, m *ichorv1alpha1.TalosMachine) (string, error) {
	v := c.Spec.TalosVersion
	if v == "" {
		return "", fmt.Errorf("cluster %s: no talosVersion", c.Name)
	}

	secureBoot, err := SecureBootInstaller(c, m)
	if err != nil {
		return "", err
	}

	if c.Spec.Registry.InstallerImage != "" {
		return c.Spec.Registry.InstallerImage + ":" + v, nil
	}

	schematic := c.Spec.Schematic
	if schematic == "" && secureBoot {
		schematic = DefaultSecureBootSchematic
	}

	if schematic == "" {
		return DefaultInstallerRepository + ":" + v, nil
	}

	host := DefaultImageFactoryHost

	if c.Spec.Registry.ImageFactoryURL != "" {
		u, err := url.Parse(c.Spec.Registry.ImageFactoryURL)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("cluster %s: registry.imageFactoryURL %q is not a URL", c.Name, c.Spec.Registry.ImageFactoryURL)
		}

		host = u.Host
	}

	repo := "/installer/"
	if secureBoot {
		repo = "/installer-secureboot/"
	}

	return host + repo + schematic + ":" + v, nil
}
