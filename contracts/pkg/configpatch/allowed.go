// Package configpatch holds the reviewed allow-list of the Talos document
// kinds a TalosConfigPatch may carry.
//
// Every document kind Talos machinery registers has a mirror type (package
// api/v1alpha1/config); this table decides which of them users may patch, so
// widening it needs a review, not generator work. tools/cmd/mirrorgen reads it
// to generate config.PatchDocument, the union type of spec.documents[]. The
// package imports nothing, so the generator can always build it.
package configpatch

// Allowed lists the document kinds a TalosConfigPatch may carry, sorted.
var Allowed = []string{
	"BGPInstanceConfig",
	"BlackholeRouteConfig",
	"BondConfig",
	"BridgeConfig",
	"CRICustomizationConfig",
	"ContainerConfig",
	"DHCPv4Config",
	"DHCPv6Config",
	"DiscoveryServiceConfig",
	"DummyLinkConfig",
	"EnvironmentConfig",
	"EtcFileConfig",
	"EthernetConfig",
	"EventSinkConfig",
	"ExistingVolumeConfig",
	"ExtensionServiceConfig",
	"ExternalVolumeConfig",
	"FilesystemScrubConfig",
	"FilesystemTrimConfig",
	"HTTPProbeConfig",
	"HostnameConfig",
	"ImageCacheConfig",
	"ImageVerificationConfig",
	"KernelModuleConfig",
	"KmsgLogConfig",
	"KubeAPIServerConfig",
	"KubeControllerManagerConfig",
	"KubeCoreDNSConfig",
	"KubeCredentialProviderConfig",
	"KubeExternalManifestConfig",
	"KubeInlineManifestConfig",
	"KubeNodeConfig",
	"KubeSchedulerConfig",
	"KubeSpanConfig",
	"KubeSpanEndpointsConfig",
	"KubeTalosAPIAccessConfig",
	"KubeletConfig",
	"LVMLogicalVolumeConfig",
	"LVMVolumeGroupConfig",
	"Layer2VIPConfig",
	"LinkAliasConfig",
	"LinkConfig",
	"NetworkDefaultActionConfig",
	"NetworkRuleConfig",
	"OOMConfig",
	"PCIDriverRebindConfig",
	"RAIDArrayConfig",
	"RawVolumeConfig",
	"RegistryMirrorConfig",
	"RegistryTLSConfig",
	"ResolverConfig",
	"RoutingRuleConfig",
	"SecurityProfileConfig",
	"StaticHostConfig",
	"SwapVolumeConfig",
	"SysctlConfig",
	"SysfsConfig",
	"TCPProbeConfig",
	"TimeSyncConfig",
	"TrustedRootsConfig",
	"UdevRulesConfig",
	"UserVolumeConfig",
	"VLANConfig",
	"VRFConfig",
	"VethConfig",
	"WatchdogTimerConfig",
	"ZswapConfig",
}

const (
	reasonSecrets    = "carries material the secrets bundle owns (CA keys, identity); its secret fields are dropped from the mirror"
	reasonUnusable   = "its essential field is secret material, which the mirror drops, so a patch could not express it"
	reasonFreeForm   = "its payload is a free-form configuration the mirror drops (see config.DroppedFields), so a patch would be empty"
	reasonTopology   = "rendered by Ichor's system layer from TalosCluster (endpoint, networking, CNI, kube-proxy, KubePrism)"
	reasonInstall    = "install-time configuration owned by Ichor's provisioning and the machine's disk roles"
	reasonLegacy     = "the legacy monolithic document carries the machine's identity and the bundle's secrets; Ichor renders it, and patches use the multi-document kinds"
	reasonSideroLink = "SideroLink ties the machine to Omni, which Ichor does not manage; its join token is secret"
)

// Denied lists every other mirrored kind with the reason it is not allowed.
var Denied = map[string]string{
	"CRIBaseRuntimeSpecConfig":   reasonFreeForm,
	"DiscoveryIdentityConfig":    reasonSecrets,
	"HCloudVIPConfig":            reasonUnusable,
	"KubeAPIServerCAConfig":      reasonSecrets,
	"KubeAdmissionControlConfig": reasonFreeForm,
	"KubeAggregatorCAConfig":     reasonSecrets,
	"KubeAuditPolicyConfig":      reasonFreeForm,
	"KubeAuthenticationConfig":   reasonFreeForm,
	"KubeAuthorizerConfig":       reasonFreeForm,
	"KubeClusterConfig":          reasonTopology,
	"KubeEtcdEncryptionConfig":   reasonSecrets,
	"KubeFlannelCNIConfig":       reasonTopology,
	"KubeNetworkConfig":          reasonTopology,
	"KubePrismConfig":            reasonTopology,
	"KubeProxyConfig":            reasonTopology,
	"KubeServiceAccountConfig":   reasonSecrets,
	"KubeStaticPodConfig":        reasonFreeForm,
	"RegistryAuthConfig":         reasonUnusable,
	"SideroLinkConfig":           reasonSideroLink,
	"UnattendedInstallConfig":    reasonInstall,
	"VolumeConfig":               reasonInstall,
	"WireguardConfig":            reasonUnusable,
	"v1alpha1":                   reasonLegacy,
}

// IsAllowed reports whether a TalosConfigPatch may carry the document kind.
func IsAllowed(kind string) bool {
	for _, k := range Allowed {
		if k == kind {
			return true
		}
	}

	return false
}
