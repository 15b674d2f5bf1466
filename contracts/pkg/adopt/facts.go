package adopt

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Machine is what Read took from one configured node. Config is never
// printed or serialised.
type Machine struct {
	// Address is the address the node was reached at.
	Address string `json:"address"`
	// Hostname and UUID say which machine it is (HostnameStatus, SystemInformation).
	Hostname string `json:"hostname,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	// TalosVersion is the running Talos version (COSI runtime.Version).
	TalosVersion string `json:"talosVersion"`
	// Config is the node's active machine configuration.
	Config []byte `json:"-"`
	// KubePrismHealthy is KubePrism's health as the node reports it (false
	// when it reports none).
	KubePrismHealthy bool `json:"kubePrismHealthy"`
}

// InlineManifest is one inline manifest of a live configuration.
type InlineManifest struct {
	Name     string
	Contents string
}

// Facts are what a live configuration says about its cluster and machine,
// read through machinery's typed accessors, so the legacy v1alpha1 document
// and the multi-document form read the same.
type Facts struct {
	// Role is controlplane or worker (machine.type init counts as controlplane).
	Role string
	// ClusterName and ClusterID name the cluster (cluster.id is not a secret).
	ClusterName, ClusterID string
	// Endpoint is the cluster's control-plane URL.
	Endpoint *url.URL
	// KubernetesVersion is the kubelet image's tag without the v (1.37.2); "" if unknown.
	KubernetesVersion string
	// PodSubnets, ServiceSubnets and DNSDomain are the cluster network.
	PodSubnets, ServiceSubnets []string
	DNSDomain                  string
	// Schedulable: a control plane without the control-plane NoSchedule taint.
	Schedulable bool
	// KubeProxy is true when Talos deploys kube-proxy.
	KubeProxy bool
	// KubePrismPort is KubePrism's port; zero when it is off.
	KubePrismPort int
	// TalosCNI is Talos's own CNI: flannel, none or custom.
	TalosCNI string
	// CustomCNIURLs are the manifests of a custom Talos CNI.
	CustomCNIURLs []string
	// InlineManifests and ExtraManifests are the bootstrap manifests beside Talos's own.
	InlineManifests []InlineManifest
	ExtraManifests  []string
	// InstallDisk is the install disk's device path when the configuration
	// names one by path ("" otherwise).
	InstallDisk string
}

// TalosCNI values.
const (
	TalosCNIFlannel = constants.FlannelCNI
	TalosCNINone    = constants.NoneCNI
	TalosCNICustom  = constants.CustomCNI
)

// ParseConfig loads a live configuration.
func ParseConfig(b []byte) (coreconfig.Provider, error) {
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("the machine configuration does not load: %w", err)
	}

	return cfg, nil
}

var devPathMatch = regexp.MustCompile(`^disk\.dev_path\s*==\s*"([^"]+)"$`)

// ReadFacts reads the facts of one live configuration.
func ReadFacts(cfg coreconfig.Provider) (Facts, error) {
	var f Facts

	if cfg.Machine() == nil || cfg.Cluster() == nil {
		return f, errors.New("the configuration has no machine or cluster section")
	}

	if cfg.Machine().Type().IsControlPlane() {
		f.Role = ichorv1alpha1.RoleControlPlane
	} else {
		f.Role = ichorv1alpha1.RoleWorker
	}

	if cc := cfg.K8sClusterConfig(); cc != nil {
		f.ClusterName = cc.ClusterName()
		f.Endpoint = cc.ClusterEndpoint()
	}

	if di := cfg.DiscoveryIdentityConfig(); di != nil {
		f.ClusterID = di.ClusterID()
	}

	if k := cfg.K8sKubeletConfig(); k != nil {
		f.KubernetesVersion = imageTag(k.Image())
	}

	if n := cfg.K8sNetworkConfig(); n != nil {
		for _, p := range n.PodCIDRs() {
			f.PodSubnets = append(f.PodSubnets, p.String())
		}

		for _, p := range n.ServiceCIDRs() {
			f.ServiceSubnets = append(f.ServiceSubnets, p.String())
		}

		f.DNSDomain = n.DNSDomain()
	}

	if f.Role == ichorv1alpha1.RoleControlPlane {
		f.Schedulable = true

		if nc := cfg.K8sNodeConfig(); nc != nil {
			if _, tainted := nc.Taints()[constants.LabelNodeRoleControlPlane]; tainted {
				f.Schedulable = false
			}
		}

		if raw := cfg.RawV1Alpha1(); raw != nil && raw.ClusterConfig != nil && raw.ClusterConfig.AllowSchedulingOnControlPlanes != nil { //nolint:staticcheck // the legacy field is what older configurations carry
			f.Schedulable = *raw.ClusterConfig.AllowSchedulingOnControlPlanes //nolint:staticcheck // see above
		}
	}

	f.KubeProxy = true
	if p := cfg.K8sProxyConfig(); p != nil {
		f.KubeProxy = p.Enabled()
	}

	if kp := cfg.K8sKubePrismConfig(); kp != nil {
		f.KubePrismPort = kp.Port()
	}

	f.TalosCNI = TalosCNINone
	if cfg.K8sFlannelCNIConfig() != nil {
		f.TalosCNI = TalosCNIFlannel
	} else if raw := cfg.RawV1Alpha1(); raw != nil && raw.ClusterConfig != nil &&
		raw.ClusterConfig.ClusterNetwork != nil && raw.ClusterConfig.ClusterNetwork.CNI != nil { //nolint:staticcheck // a custom CNI is only in the legacy field
		if c := raw.ClusterConfig.ClusterNetwork.CNI; c.CNIName == TalosCNICustom { //nolint:staticcheck // see above
			f.TalosCNI = TalosCNICustom
			f.CustomCNIURLs = append(f.CustomCNIURLs, c.CNIUrls...)
		}
	}

	for _, m := range cfg.K8sInlineManifestConfigs() {
		f.InlineManifests = append(f.InlineManifests, InlineManifest{Name: m.Name(), Contents: m.Contents()})
	}

	for _, m := range cfg.K8sExternalManifestConfigs() {
		f.ExtraManifests = append(f.ExtraManifests, m.URL())
	}

	if ui := cfg.UnattendedInstallConfig(); ui != nil {
		if m := devPathMatch.FindStringSubmatch(strings.TrimSpace(ui.VolumeSelector().String())); m != nil {
			f.InstallDisk = m[1]
		}
	} else if in := cfg.Machine().Install(); in != nil {
		f.InstallDisk = in.Disk()
	}

	return f, nil
}

// imageTag is an image reference's tag without a leading v ("" without one).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")

	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}

	return strings.TrimPrefix(image[i+1:], "v")
}
