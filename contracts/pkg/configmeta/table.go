package configmeta

// The table. Facts, with their sources:
//
//   - Since: the first Talos release tag (v1.0.0 … v1.13.0) whose machinery
//     registers the kind; kinds absent from v1.13.0 were introduced in v1.14.
//     Fields added later to an existing kind are not tracked individually
//     yet: they report their kind's version.
//   - Multi-document kinds apply without a reboot: Talos's controllers
//     reconcile them live, and from v1.14 an AUTO apply never reboots.
//   - The legacy v1alpha1 document: the subtrees listed below are those Talos
//     (up to v1.13, CanApplyImmediate) accepts without a reboot; everything
//     else in it (machine.files, machine.env, machine.udev, machine.disks,
//     machine.features.*, …) is treated as needing one, as Talos did.
//   - machine.install and UnattendedInstallConfig are read at install and
//     upgrade time; VolumeConfig (system volumes) and machine.systemDiskEncryption
//     are read when the volume is provisioned.
//   - APIServerRestart marks what is rendered into the kube-apiserver static pod
//     (its flags, its configuration files, its certificates and keys).
//
// The Talos minor versions that introduced kinds.
const (
	sinceV10  = "v1.0"
	sinceV15  = "v1.5"
	sinceV16  = "v1.6"
	sinceV17  = "v1.7"
	sinceV18  = "v1.8"
	sinceV110 = "v1.10"
	sinceV111 = "v1.11"
	sinceV112 = "v1.12"
	sinceV113 = "v1.13"
	sinceV114 = "v1.14"
)

var table = []entry{
	{path: "BGPInstanceConfig", meta: Meta{Since: sinceV114}},
	{path: "BlackholeRouteConfig", meta: Meta{Since: sinceV113}},
	{path: "BondConfig", meta: Meta{Since: sinceV112}},
	{path: "BridgeConfig", meta: Meta{Since: sinceV112}},
	{path: "CRIBaseRuntimeSpecConfig", meta: Meta{Since: sinceV114}},
	{path: "CRICustomizationConfig", meta: Meta{Since: sinceV114}},
	{path: "ContainerConfig", meta: Meta{Since: sinceV114}},
	{path: "DHCPv4Config", meta: Meta{Since: sinceV112}},
	{path: "DHCPv6Config", meta: Meta{Since: sinceV112}},
	{path: "DiscoveryIdentityConfig", meta: Meta{Since: sinceV114}},
	{path: "DiscoveryServiceConfig", meta: Meta{Since: sinceV114}},
	{path: "DummyLinkConfig", meta: Meta{Since: sinceV112}},
	{path: "EnvironmentConfig", meta: Meta{Since: sinceV113}},
	{path: "EtcFileConfig", meta: Meta{Since: sinceV114}},
	{path: "EthernetConfig", meta: Meta{Since: sinceV110}},
	{path: "EventSinkConfig", meta: Meta{Since: sinceV15}},
	{path: "ExistingVolumeConfig", meta: Meta{Since: sinceV111}},
	{path: "ExtensionServiceConfig", meta: Meta{Since: sinceV17}},
	{path: "ExternalVolumeConfig", meta: Meta{Since: sinceV113}},
	{path: "FilesystemScrubConfig", meta: Meta{Since: sinceV114}},
	{path: "FilesystemTrimConfig", meta: Meta{Since: sinceV114}},
	{path: "HCloudVIPConfig", meta: Meta{Since: sinceV112}},
	{path: "HTTPProbeConfig", meta: Meta{Since: sinceV114}},
	{path: "HostnameConfig", meta: Meta{Since: sinceV112}},
	{path: "ImageCacheConfig", meta: Meta{Since: sinceV114}},
	{path: "ImageVerificationConfig", meta: Meta{Since: sinceV113}},
	{path: "KernelModuleConfig", meta: Meta{Since: sinceV114}},
	{path: "KmsgLogConfig", meta: Meta{Since: sinceV15}},
	{path: "KubeAPIServerCAConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeAPIServerConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeAdmissionControlConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeAggregatorCAConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeAuditPolicyConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeAuthenticationConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeAuthorizerConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeClusterConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeControllerManagerConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeCoreDNSConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeCredentialProviderConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeEtcdEncryptionConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeExternalManifestConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeFlannelCNIConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeInlineManifestConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeNetworkConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeNodeConfig", meta: Meta{Since: sinceV114}},
	{path: "KubePrismConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeProxyConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeSchedulerConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeServiceAccountConfig", meta: Meta{APIServerRestart: true, Since: sinceV114}},
	{path: "KubeSpanConfig", meta: Meta{Since: sinceV113}},
	{path: "KubeSpanEndpointsConfig", meta: Meta{Since: sinceV18}},
	{path: "KubeStaticPodConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeTalosAPIAccessConfig", meta: Meta{Since: sinceV114}},
	{path: "KubeletConfig", meta: Meta{Since: sinceV114}},
	{path: "LVMLogicalVolumeConfig", meta: Meta{Since: sinceV114}},
	{path: "LVMVolumeGroupConfig", meta: Meta{Since: sinceV114}},
	{path: "Layer2VIPConfig", meta: Meta{Since: sinceV112}},
	{path: "LinkAliasConfig", meta: Meta{Since: sinceV112}},
	{path: "LinkConfig", meta: Meta{Since: sinceV112}},
	{path: "NetworkDefaultActionConfig", meta: Meta{Since: sinceV16}},
	{path: "NetworkRuleConfig", meta: Meta{Since: sinceV16}},
	{path: "OOMConfig", meta: Meta{Since: sinceV112}},
	{path: "PCIDriverRebindConfig", meta: Meta{Since: sinceV110}},
	{path: "RAIDArrayConfig", meta: Meta{Since: sinceV114}},
	{path: "RawVolumeConfig", meta: Meta{Since: sinceV111}},
	{path: "RegistryAuthConfig", meta: Meta{Since: sinceV112}},
	{path: "RegistryMirrorConfig", meta: Meta{Since: sinceV112}},
	{path: "RegistryTLSConfig", meta: Meta{Since: sinceV112}},
	{path: "ResolverConfig", meta: Meta{Since: sinceV112}},
	{path: "RoutingRuleConfig", meta: Meta{Since: sinceV113}},
	{path: "SecurityProfileConfig", meta: Meta{Since: sinceV114}},
	{path: "SideroLinkConfig", meta: Meta{Since: sinceV15}},
	{path: "StaticHostConfig", meta: Meta{Since: sinceV112}},
	{path: "SwapVolumeConfig", meta: Meta{Since: sinceV111}},
	{path: "SysctlConfig", meta: Meta{Since: sinceV114}},
	{path: "SysfsConfig", meta: Meta{Since: sinceV114}},
	{path: "TCPProbeConfig", meta: Meta{Since: sinceV113}},
	{path: "TimeSyncConfig", meta: Meta{Since: sinceV112}},
	{path: "TrustedRootsConfig", meta: Meta{Since: sinceV18}},
	{path: "UdevRulesConfig", meta: Meta{Since: sinceV114}},
	{path: "UnattendedInstallConfig", meta: Meta{InstallTimeOnly: true, Since: sinceV114}},
	{path: "UserVolumeConfig", meta: Meta{Since: sinceV110}},
	{path: "VLANConfig", meta: Meta{Since: sinceV112}},
	{path: "VRFConfig", meta: Meta{Since: sinceV113}},
	{path: "VethConfig", meta: Meta{Since: sinceV114}},
	{path: "VolumeConfig", meta: Meta{InstallTimeOnly: true, Since: sinceV18}},
	{path: "WatchdogTimerConfig", meta: Meta{Since: sinceV17}},
	{path: "WireguardConfig", meta: Meta{Since: sinceV112}},
	{path: "ZswapConfig", meta: Meta{Since: sinceV111}},
	{path: "v1alpha1", meta: Meta{RebootRequired: true, Since: sinceV10}},
	{path: "v1alpha1:debug", meta: Meta{}},
	{path: "v1alpha1:cluster", meta: Meta{}},
	{path: "v1alpha1:machine.ca", meta: Meta{}},
	{path: "v1alpha1:machine.acceptedCAs", meta: Meta{}},
	{path: "v1alpha1:machine.time", meta: Meta{}},
	{path: "v1alpha1:machine.certSANs", meta: Meta{}},
	{path: "v1alpha1:machine.network", meta: Meta{}},
	{path: "v1alpha1:machine.sysfs", meta: Meta{}},
	{path: "v1alpha1:machine.sysctls", meta: Meta{}},
	{path: "v1alpha1:machine.logging", meta: Meta{}},
	{path: "v1alpha1:machine.controlPlane", meta: Meta{}},
	{path: "v1alpha1:machine.kubelet", meta: Meta{}},
	{path: "v1alpha1:machine.kernel", meta: Meta{}},
	{path: "v1alpha1:machine.registries", meta: Meta{}},
	{path: "v1alpha1:machine.seccompProfiles", meta: Meta{}},
	{path: "v1alpha1:machine.nodeAnnotations", meta: Meta{}},
	{path: "v1alpha1:machine.nodeLabels", meta: Meta{}},
	{path: "v1alpha1:machine.nodeTaints", meta: Meta{}},
	{path: "v1alpha1:machine.features.kubernetesTalosAPIAccess", meta: Meta{}},
	{path: "v1alpha1:machine.features.kubePrism", meta: Meta{}},
	{path: "v1alpha1:machine.features.hostDNS", meta: Meta{}},
	{path: "v1alpha1:machine.features.imageCache", meta: Meta{}},
	{path: "v1alpha1:machine.features.nodeAddressSortAlgorithm", meta: Meta{}},
	{path: "v1alpha1:machine.install", meta: Meta{InstallTimeOnly: true}},
	{path: "v1alpha1:machine.systemDiskEncryption", meta: Meta{RebootRequired: true, InstallTimeOnly: true}},
	{path: "v1alpha1:machine.type", meta: Meta{RebootRequired: true, InstallTimeOnly: true}},
	{path: "v1alpha1:cluster.apiServer", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.ca", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.acceptedCAs", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.aggregatorCA", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.serviceAccount", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.network.serviceSubnets", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.clusterName", meta: Meta{APIServerRestart: true}},
	{path: "v1alpha1:cluster.controlPlane.endpoint", meta: Meta{APIServerRestart: true}},
}
