// Package initflow is `ichor init`: it creates a cluster from its first
// control plane in maintenance mode (architecture, "Bootstrap"). Every step
// looks at what exists first, so a second run continues a half-done cluster;
// it never generates a second secrets bundle over the first.
package initflow

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// DefaultNamespace holds Ichor and the cluster's resources unless told otherwise.
const DefaultNamespace = "ichor-system"

// Presets of the cluster's shape.
const (
	PresetSingle    = "single"
	PresetCompactHA = "compact-ha"
	PresetStandard  = "standard"
	PresetLarge     = "large"
)

// Presets are the preset names, in order of size.
var Presets = []string{PresetSingle, PresetCompactHA, PresetStandard, PresetLarge}

// Topology is what a preset settles: the control-plane count and whether
// workloads may run on control planes.
type Topology struct {
	ControlPlanes int32
	Schedulable   bool
}

// PresetTopology maps a preset to its topology: single 1 schedulable,
// compact-ha 3 schedulable, standard 3 tainted, large 5 tainted (workers are
// added later through approval).
func PresetTopology(preset string) (Topology, error) {
	switch preset {
	case PresetSingle:
		return Topology{ControlPlanes: 1, Schedulable: true}, nil
	case PresetCompactHA:
		return Topology{ControlPlanes: 3, Schedulable: true}, nil
	case PresetStandard:
		return Topology{ControlPlanes: 3}, nil
	case PresetLarge:
		return Topology{ControlPlanes: 5}, nil
	}

	return Topology{}, fmt.Errorf("--preset %q is not a preset: use %s", preset, strings.Join(Presets, ", "))
}

// Install modes.
const (
	// InstallManifest installs Ichor in the cluster through the installer Job
	// (the controller and ichor-ui run in the cluster).
	InstallManifest = "manifest"
	// InstallNone applies only the namespace and the CRDs, which init's own
	// writes need; the controller runs elsewhere (the demo runs it as a local process).
	InstallNone = "none"
)

// Options are init's inputs. Validate checks them before anything is written.
type Options struct {
	// Cluster is the TalosCluster's name and the secrets store's directory.
	Cluster string
	// Namespace holds the custom resources and the bundle Secret.
	Namespace string
	// Preset is the topology preset.
	Preset string
	// Tunnel is Cilium's tunnel protocol, vxlan or geneve.
	Tunnel string
	// UIURL is ichor-ui's external https URL (for Ichor's own users); optional.
	UIURL string

	// Node is the address of the first control plane, in maintenance mode.
	Node string
	// TalosPort is the Talos API port; zero is 50000.
	TalosPort int
	// Fingerprint pins the node's maintenance certificate (its SPKI
	// fingerprint, as the console shows it); empty trusts the first one seen.
	Fingerprint string
	// InstallDisk is the system disk; nil picks the node's disk.
	InstallDisk *ichorv1alpha1.DiskSelector
	// ConfirmWipe allows installing to a disk that holds partitions.
	ConfirmWipe bool

	// Endpoint is the host of the Kubernetes API endpoint; empty is the node's address.
	Endpoint string
	// EndpointType is node, vip or loadBalancer; empty is node when the host
	// is the node's address, else vip.
	EndpointType string
	// EndpointPort is the API port; zero is 6443.
	EndpointPort int32

	// TalosVersion and KubernetesVersion default to the release's.
	TalosVersion      string
	KubernetesVersion string
	// CiliumVersion is the Cilium chart booted, one this Ichor embeds;
	// empty means the pinned one.
	CiliumVersion string

	// Install is manifest or none.
	Install string
	// InstallerImage is the installer Job's image (--install=manifest);
	// empty means this release's (contracts/pkg/install.InstallerImage).
	InstallerImage string
	// Wait follows the cluster's conditions after the writes, for at most Timeout.
	Wait    bool
	Timeout time.Duration
	// WriteKubeconfig, when set, also writes the admin kubeconfig to this
	// file (mode 0600), for the commands that follow.
	WriteKubeconfig string
}

// Validate checks the options and fills the defaults. It writes nothing.
func (o *Options) Validate() error {
	var errs []error

	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}

	if _, err := PresetTopology(o.Preset); err != nil {
		errs = append(errs, err)
	}

	switch o.Tunnel {
	case "":
		o.Tunnel = ciliumvalues.TunnelVXLAN
	case ciliumvalues.TunnelVXLAN, ciliumvalues.TunnelGeneve:
	default:
		errs = append(errs, fmt.Errorf("--cni-tunnel %q: use %s or %s", o.Tunnel, ciliumvalues.TunnelVXLAN, ciliumvalues.TunnelGeneve))
	}

	if err := o.validateCilium(); err != nil {
		errs = append(errs, err)
	}

	if o.UIURL != "" {
		if err := install.CheckUIURL(o.UIURL); err != nil {
			errs = append(errs, fmt.Errorf("--ui-url %w", err))
		}
	}

	if o.Node == "" {
		errs = append(errs, errors.New("--node is missing: give the address of the first control plane, booted in maintenance mode"))
	} else if net.ParseIP(o.Node) == nil {
		errs = append(errs, fmt.Errorf("--node %q is not an IP address: give the address the node shows on its console in maintenance mode", o.Node))
	}

	if o.Endpoint == "" {
		o.Endpoint = o.Node
	}

	if o.EndpointType == "" {
		o.EndpointType = ichorv1alpha1.EndpointTypeVIP
		if o.Endpoint == o.Node {
			o.EndpointType = ichorv1alpha1.EndpointTypeNode
		}
	}

	switch o.EndpointType {
	case ichorv1alpha1.EndpointTypeNode:
		if o.Endpoint != o.Node {
			errs = append(errs, fmt.Errorf("--endpoint-type node needs --endpoint to be the node's address %s (or left out)", o.Node))
		}
	case ichorv1alpha1.EndpointTypeVIP, ichorv1alpha1.EndpointTypeLoadBalancer:
		if o.Endpoint == o.Node {
			errs = append(errs, fmt.Errorf("--endpoint-type %s needs --endpoint HOST other than the node's own address", o.EndpointType))
		}
	default:
		errs = append(errs, fmt.Errorf("--endpoint-type %q: use node, vip or loadBalancer", o.EndpointType))
	}

	if o.EndpointPort < 0 || o.EndpointPort > 65535 {
		errs = append(errs, fmt.Errorf("--endpoint-port %d is not a port", o.EndpointPort))
	}

	switch o.Install {
	case "":
		o.Install = InstallManifest
	case InstallManifest, InstallNone:
	default:
		errs = append(errs, fmt.Errorf("--install %q: use manifest (install Ichor in the cluster) or none (only the CRDs; the controller runs elsewhere)", o.Install))
	}

	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Minute
	}

	return errors.Join(errs...)
}

// validateCilium settles the bootstrap chart: one this Ichor embeds, on a
// Kubernetes version it supports.
func (o *Options) validateCilium() error {
	if o.CiliumVersion == "" {
		o.CiliumVersion = release.DefaultCiliumVersion
	}

	if !strings.HasPrefix(o.CiliumVersion, "v") {
		o.CiliumVersion = "v" + o.CiliumVersion
	}

	if !slices.Contains(release.CiliumVersions(), o.CiliumVersion) {
		return fmt.Errorf("--cilium-version %s: this Ichor embeds the Cilium charts %s; name one of them",
			o.CiliumVersion, strings.Join(release.CiliumVersions(), ", "))
	}

	kube := o.KubernetesVersion
	if kube == "" {
		kube = release.DefaultKubernetesVersion
	}

	if _, err := release.CheckCiliumPair(o.CiliumVersion, kube); err != nil {
		return fmt.Errorf("--cilium-version %s with Kubernetes %s: %w; choose another pair", o.CiliumVersion, kube, err)
	}

	return nil
}
