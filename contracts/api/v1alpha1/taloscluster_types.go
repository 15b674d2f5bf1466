package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TalosCluster condition types.
const (
	// CNIHandoverCondition is true once Cilium runs as Ichor's Helm release and
	// the bootstrap inline manifest has been removed from the control planes.
	CNIHandoverCondition = "CNIHandover"
	// CNIUnsupportedCondition is true when the stored cluster names a CNI preset
	// Ichor does not manage; the controller then changes nothing.
	CNIUnsupportedCondition = "CNIUnsupported"
	// CARotationAdvisedCondition is true after an adoption: the previous
	// administrators' certificates stay valid until the CAs are rotated.
	CARotationAdvisedCondition = "CARotationAdvised"
	// NetworkPoliciesAppliedCondition says whether Ichor's CiliumNetworkPolicies isolate ichor-system.
	NetworkPoliciesAppliedCondition = "NetworkPoliciesApplied"
	// TopologyTransitioningCondition is true while the control-plane count is
	// changing (an even number of members is allowed only then).
	TopologyTransitioningCondition = "TopologyTransitioning"
	// VersionsCompatibleCondition is false when the running Talos, Kubernetes
	// and Cilium versions form a pair the compatibility table refuses.
	VersionsCompatibleCondition = "VersionsCompatible"
	// SecureBootCondition reports whether the nodes meet spec.security.secureBoot.
	SecureBootCondition = "SecureBoot"
	// KernelLockdownCondition reports whether the nodes meet spec.security.kernelLockdown.
	KernelLockdownCondition = "KernelLockdown"
	// KubeProxyConsistentCondition is false when kube-proxy's two owners
	// disagree with spec.cni.kubeProxy: Cilium's live config
	// (kube-proxy-replacement in ConfigMap kube-system/cilium-config) or,
	// when Cilium replaces kube-proxy, a kube-proxy DaemonSet still running.
	KubeProxyConsistentCondition = "KubeProxyConsistent"
	// CertificatesExpiringCondition is true while a CA recorded in
	// status.certificates expires within 30 days (or has expired); its
	// message names each such CA, its not-after and the way out.
	CertificatesExpiringCondition = "CertificatesExpiring"
)

// TalosCluster condition reasons.
const (
	// CNIHandoverPendingReason means the Cilium Helm release has not yet adopted the bootstrap objects.
	CNIHandoverPendingReason = "HandoverPending"
	// CNIHandoverDoneReason means the hand-over finished.
	CNIHandoverDoneReason = "HandoverDone"
	// CNIHandoverFailedReason means the last Helm run of the Cilium release
	// failed (the message says why and when the next one starts), or the
	// running Cilium cannot be taken over by this build.
	CNIHandoverFailedReason = "HandoverFailed"
	// AdoptedReason means the cluster was adopted.
	AdoptedReason = "Adopted"
	// CiliumCRDMissingReason means Cilium's CRDs do not exist, so no policy was applied.
	CiliumCRDMissingReason = "CiliumCRDMissing"
	// NetworkPoliciesInPlaceReason is a true NetworkPoliciesApplied: the
	// policy set and the egress policies were applied.
	NetworkPoliciesInPlaceReason = "Applied"
	// CNINotCiliumReason means the cluster does not run Cilium (as detected),
	// so no policy was applied.
	CNINotCiliumReason = "CNINotCilium"
	// NetworkPoliciesFailedReason means building or applying the policies
	// failed; the message says why.
	NetworkPoliciesFailedReason = "ApplyFailed"
	// CNIPresetUnsupportedReason is the reason of a true CNIUnsupported: the
	// stored spec.cni.preset is not one Ichor manages.
	CNIPresetUnsupportedReason = "PresetUnsupported"
	// UnsupportedPairReason means a version pair is refused by the compatibility table.
	UnsupportedPairReason = "UnsupportedPair"
	// KubeProxyConsistentReason is a true KubeProxyConsistent.
	KubeProxyConsistentReason = "Consistent"
	// KubeProxyMismatchReason is a false KubeProxyConsistent.
	KubeProxyMismatchReason = "Mismatch"
	// KubeProxySwitchingReason is an unknown KubeProxyConsistent while a
	// kube-proxy switch is pending or runs (the two owners change in turn).
	KubeProxySwitchingReason = "Switching"
	// CertificatesExpiringReason is a true CertificatesExpiring: a CA expires
	// within 30 days and none has expired yet.
	CertificatesExpiringReason = "CertificatesExpiring"
	// CertificatesExpiredReason is a true CertificatesExpiring once a CA has expired.
	CertificatesExpiredReason = "CertificatesExpired"
	// CertificatesValidReason is a false CertificatesExpiring: every recorded
	// CA is valid for more than 30 days.
	CertificatesValidReason = "CertificatesValid"
)

// CNI presets.
const (
	// CNIPresetCilium is the only managed CNI: Cilium as Ichor's own Helm release.
	CNIPresetCilium = "cilium"
	// CNIPresetUnmanaged keeps an adopted cluster's own CNI; only for adoption.
	CNIPresetUnmanaged = "unmanaged"
)

// Kube-proxy modes.
const (
	// KubeProxyEnabled runs Talos's kube-proxy.
	KubeProxyEnabled = "enabled"
	// KubeProxyReplaced turns kube-proxy off and lets Cilium replace it.
	KubeProxyReplaced = "replaced"
)

// TalosClusterSpec is the desired state of one Talos cluster.
// +kubebuilder:validation:XValidation:rule="self.cni.preset != 'unmanaged' || !has(self.cni.cilium)",message="spec.cni.cilium is refused with the unmanaged preset: Ichor does not configure an unmanaged CNI"
type TalosClusterSpec struct {
	// talosVersion is the Talos release the machines run, for example v1.14.1.
	// Changing it upgrades every machine (control planes first); a downgrade and
	// a step the Talos upgrade path refuses are rejected.
	// +required
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+\.\d+$`
	TalosVersion string `json:"talosVersion"`

	// versionContract is the Talos configuration contract the controller renders
	// for, for example v1.14. It is pinned so that a machinery update cannot change
	// what gets applied; it changes only through an operation a person starts.
	// +required
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+$`
	VersionContract string `json:"versionContract"`

	// kubernetesVersion is the Kubernetes release, for example 1.37.2. It must be
	// supported by talosVersion; an upgrade moves at most one minor.
	// +required
	// +kubebuilder:validation:Pattern=`^v?\d+\.\d+\.\d+$`
	KubernetesVersion string `json:"kubernetesVersion"`

	// schematic is the Image Factory schematic ID of the installer image. A change
	// is an upgrade even when talosVersion does not move.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	Schematic string `json:"schematic,omitempty"`

	// endpoint is where the Kubernetes API of the cluster is reached.
	// +required
	Endpoint ClusterEndpoint `json:"endpoint"`

	// secretsBundleRef names the Secret that holds the secrets bundle (the Talos,
	// Kubernetes and etcd CA keys). Setting or changing it needs `update` on
	// `talosclusters/secret-references`.
	// +required
	SecretsBundleRef SecretReference `json:"secretsBundleRef"`

	// controlPlane is the control-plane topology.
	// +required
	ControlPlane ControlPlaneTopology `json:"controlPlane"`

	// cni is the cluster's CNI: Cilium, as Ichor's own Helm release.
	// +required
	CNI CNISpec `json:"cni"`

	// network holds the pod and service subnets; each is fixed once set.
	// +optional
	Network ClusterNetwork `json:"network,omitempty"`

	// drift is what the controller does when a node's configuration differs from the render.
	// +optional
	Drift DriftSpec `json:"drift,omitempty"`

	// security holds hardening options, all off by default and rendered only when set.
	// +optional
	Security SecuritySpec `json:"security,omitempty"`

	// authentication is who the cluster's kube-apiserver accepts ID tokens
	// from besides its own credentials. A change restarts the kube-apiserver
	// and is rolled out by a config operation (`ichor config apply`), one
	// control plane at a time. It needs the v1.14 contract or later.
	// +optional
	Authentication AuthenticationSpec `json:"authentication,omitempty"`

	// discovery is where the controller looks for machines in maintenance mode.
	// +optional
	Discovery DiscoverySpec `json:"discovery,omitempty"`

	// monitoring exposes the control-plane metrics Talos binds locally.
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`

	// registry holds registry mirrors, the installer image source and the Image Factory.
	// +optional
	Registry RegistrySpec `json:"registry,omitempty"`

	// autoPatch lets a delegated ServiceAccount move talosVersion and
	// kubernetesVersion to newer patches of the running minors. Off by default.
	// +optional
	AutoPatch AutoPatchSpec `json:"autoPatch,omitempty"`

	// paused stops the controller from acting on the cluster; status is still reported.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// Endpoint types.
const (
	// EndpointTypeVIP is a Talos-managed shared virtual IP, recommended even for one node.
	EndpointTypeVIP = "vip"
	// EndpointTypeLoadBalancer is an external load balancer in front of the control planes.
	EndpointTypeLoadBalancer = "loadBalancer"
	// EndpointTypeNode is the address of one control plane: one API server.
	EndpointTypeNode = "node"
)

// ClusterEndpoint is the control-plane endpoint. Changing it later means
// re-issuing certificates.
type ClusterEndpoint struct {
	// type is how the endpoint is served: vip, loadBalancer or node.
	// +required
	// +kubebuilder:validation:Enum=vip;loadBalancer;node
	Type string `json:"type"`
	// host is the IP address or DNS name of the endpoint.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// port is the Kubernetes API port. Empty means 6443.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// ControlPlaneTopology is the shape of the control plane.
type ControlPlaneTopology struct {
	// count is the number of control planes: 1, 3 or 5. Two is refused (etcd
	// with two members needs both up), four has the fault tolerance of three.
	// An even number of members exists only transiently during a change.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Count int32 `json:"count"`
	// schedulable says whether workloads may run on the control planes. It is
	// required and has no automatic value; false with zero workers is refused.
	// +required
	Schedulable *bool `json:"schedulable"`
}

// CNISpec selects and configures the CNI.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.tunnel) || (has(self.tunnel) && self.tunnel == oldSelf.tunnel)",message="spec.cni.tunnel is immutable once set: changing the tunnel protocol of a running data plane is not supported"
// +kubebuilder:validation:XValidation:rule="self.preset != 'unmanaged' || !has(self.tunnel)",message="spec.cni.tunnel is refused with the unmanaged preset"
// +kubebuilder:validation:XValidation:rule="self.preset == 'unmanaged' || !has(self.unmanaged)",message="spec.cni.unmanaged is only for the unmanaged preset"
type CNISpec struct {
	// preset is `cilium` (Ichor installs and owns Cilium) or `unmanaged` (only for
	// an adopted cluster, which keeps its own CNI). It is immutable: moving
	// between managed and unmanaged means a new cluster.
	// +required
	// +kubebuilder:validation:Enum=cilium;unmanaged
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.cni.preset is immutable: moving between managed and unmanaged means a new cluster"
	Preset string `json:"preset"`
	// tunnel is Cilium's tunnel protocol, vxlan or geneve; immutable once set.
	// +optional
	// +kubebuilder:validation:Enum=vxlan;geneve
	Tunnel string `json:"tunnel,omitempty"`
	// kubeProxy is `enabled` (Talos runs kube-proxy) or `replaced` (Cilium
	// replaces it). Changing it needs the annotation
	// ichor.maesh.dev/allow-kube-proxy-switch: "true" on the same write.
	// +optional
	// +kubebuilder:validation:Enum=enabled;replaced
	KubeProxy string `json:"kubeProxy,omitempty"`
	// cilium configures the Cilium release.
	// +optional
	Cilium *CiliumSpec `json:"cilium,omitempty"`
	// unmanaged configures what the render says about an unmanaged CNI.
	// +optional
	Unmanaged *UnmanagedCNISpec `json:"unmanaged,omitempty"`
}

// CiliumSpec is the user's layer of Cilium's Helm values.
type CiliumSpec struct {
	// values is the user's layer of Helm values, between Ichor's defaults and the
	// Ichor-owned keys (which it may not set). Changing it needs `update` on
	// `talosclusters/cilium-values`.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Values *runtime.RawExtension `json:"values,omitempty"`
}

// UnmanagedCNISpec configures an adopted cluster's own CNI.
type UnmanagedCNISpec struct {
	// talosCNI is `default` (the render says nothing about the CNI) or `none`
	// (the render keeps cluster.network.cni.name: none).
	// +optional
	// +kubebuilder:validation:Enum=default;none
	TalosCNI string `json:"talosCNI,omitempty"`
}

// ClusterNetwork holds the cluster's subnets.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podSubnets) || (has(self.podSubnets) && self.podSubnets == oldSelf.podSubnets)",message="spec.network.podSubnets is fixed once set: it cannot change on a running cluster"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serviceSubnets) || (has(self.serviceSubnets) && self.serviceSubnets == oldSelf.serviceSubnets)",message="spec.network.serviceSubnets is fixed once set: it cannot change on a running cluster"
type ClusterNetwork struct {
	// podSubnets are the pod CIDRs (IPv4). Fixed once set.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.244.0.0/16"
	PodSubnets []string `json:"podSubnets,omitempty"`
	// serviceSubnets are the service CIDRs (IPv4). Fixed once set.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.96.0.0/12"
	ServiceSubnets []string `json:"serviceSubnets,omitempty"`
	// dnsDomain is the cluster's DNS domain. Empty means cluster.local.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DNSDomain string `json:"dnsDomain,omitempty"`
}

// Drift policies.
const (
	// DriftPolicyWarn reports drift and changes nothing (the default).
	DriftPolicyWarn = "Warn"
	// DriftPolicyAutoCorrect re-applies differences that need no reboot.
	DriftPolicyAutoCorrect = "AutoCorrect"
)

// DriftSpec is the cluster's drift policy.
type DriftSpec struct {
	// policy is Warn (report only) or AutoCorrect (re-apply non-reboot
	// differences). Empty means the installation's default.
	// +optional
	// +kubebuilder:validation:Enum=Warn;AutoCorrect
	Policy string `json:"policy,omitempty"`
}

// Values of spec.security.secureBoot.
const (
	// SecureBootOff installs Talos's ordinary installer.
	SecureBootOff = "Off"
	// SecureBootPreferred installs the SecureBoot installer on a node that
	// boots with SecureBoot, the ordinary one elsewhere.
	SecureBootPreferred = "Preferred"
	// SecureBootRequired installs the SecureBoot installer and holds the
	// configuration of a node that does not boot with SecureBoot.
	SecureBootRequired = "Required"
)

// SecuritySpec holds hardening options for clusters Ichor creates.
type SecuritySpec struct {
	// secureBoot is Off, Preferred or Required. Required holds the first
	// configuration of a node that does not boot with SecureBoot.
	// +optional
	// +kubebuilder:validation:Enum=Off;Preferred;Required
	SecureBoot string `json:"secureBoot,omitempty"`
	// kernelLockdown is the lockdown mode each node must report: none, integrity or confidentiality.
	// +optional
	// +kubebuilder:validation:Enum=none;integrity;confidentiality
	KernelLockdown string `json:"kernelLockdown,omitempty"`
	// kubeletServingCertificates makes kubelets request serving certificates,
	// which the controller approves for each node's own names and addresses.
	// +optional
	KubeletServingCertificates bool `json:"kubeletServingCertificates,omitempty"`
}

// AuthenticationSpec is the OIDC issuers the kube-apiserver trusts.
type AuthenticationSpec struct {
	// ichorUsers makes the kube-apiserver accept the ID tokens ichor-ui's
	// issuer makes for `ichor auth token` (users `ichor:<name>`, and the
	// external provider's users signed in through ichor-ui as `oidc:<name>`),
	// so RBAC and audit apply per user. It needs Ichor's users on (ichor-ui's
	// URL recorded by `ichor init --ui-url`); the kube-apiserver reads the
	// issuer's keys from ichor-ui's ClusterIP on port 8444.
	// +optional
	IchorUsers bool `json:"ichorUsers,omitempty"`
	// external is an OIDC provider whose ID tokens the kube-apiserver
	// accepts; its users are named `oidc:<claim>` and its groups `oidc:<group>`.
	// +optional
	External *ExternalOIDC `json:"external,omitempty"`
}

// ExternalOIDC is an OIDC provider the kube-apiserver trusts.
// +kubebuilder:validation:XValidation:rule="!has(self.usernameClaim) || self.usernameClaim != 'groups'",message="usernameClaim cannot be groups: name the claim that holds one user's name"
type ExternalOIDC struct {
	// issuerURL is the provider's issuer (the `iss` of its tokens): an https
	// URL the control planes reach, whose discovery document is at
	// /.well-known/openid-configuration under it.
	// +required
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && url(self).getQuery().size() == 0",message="must be an https URL without a query, for example https://login.example.com/realms/main"
	IssuerURL string `json:"issuerURL"`
	// audiences are the client IDs whose ID tokens are accepted (their `aud`).
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Audiences []string `json:"audiences"`
	// usernameClaim is the claim that names the user. Empty means sub.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/-]+$`
	UsernameClaim string `json:"usernameClaim,omitempty"`
	// groupsClaim is the claim that lists the user's groups. Empty means the
	// users get no group from the provider.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/-]+$`
	GroupsClaim string `json:"groupsClaim,omitempty"`
	// certificateAuthority is the PEM CA bundle that signs the provider's
	// serving certificate. Empty means the node's trusted roots.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	CertificateAuthority string `json:"certificateAuthority,omitempty"`
}

// DiscoverySpec is where the controller finds machines in maintenance mode.
type DiscoverySpec struct {
	// subnets are CIDRs scanned for the Talos API port.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 192.168.10.0/24"
	Subnets []string `json:"subnets,omitempty"`
	// addresses are single machines registered by IP address.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be an IP address"
	Addresses []string `json:"addresses,omitempty"`
	// interval is how often the subnets are scanned. Empty means five minutes.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// MonitoringSpec exposes control-plane metrics.
type MonitoringSpec struct {
	// exposeControlPlaneMetrics binds the controller-manager, scheduler and etcd
	// metrics on the node address instead of localhost.
	// +optional
	ExposeControlPlaneMetrics bool `json:"exposeControlPlaneMetrics,omitempty"`
	// scrapeCIDR restricts scraping to a CIDR with Talos's ingress firewall.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	ScrapeCIDR string `json:"scrapeCIDR,omitempty"`
}

// RegistrySpec holds registry settings pushed through the system layer.
type RegistrySpec struct {
	// mirrors are pull-through caches or private registries.
	// +optional
	// +listType=map
	// +listMapKey=registry
	// +kubebuilder:validation:MaxItems=32
	Mirrors []RegistryMirror `json:"mirrors,omitempty"`
	// installerImage overrides the repository of the Talos installer image.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	InstallerImage string `json:"installerImage,omitempty"`
	// imageFactoryURL is a self-hosted Image Factory. Empty means factory.talos.dev.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ImageFactoryURL string `json:"imageFactoryURL,omitempty"`
}

// RegistryMirror is one registry mirror.
type RegistryMirror struct {
	// registry is the registry host being mirrored, for example docker.io.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Registry string `json:"registry"`
	// endpoints are the mirror URLs, tried in order.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=512
	Endpoints []string `json:"endpoints"`
}

// AutoPatchSpec configures automatic patch upgrades.
type AutoPatchSpec struct {
	// enabled turns automatic patch upgrades on; the writes are made as the
	// ichor-auto-patch ServiceAccount and limited to newer patches of the running minor.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
}

// TalosClusterStatus is the observed state of a Talos cluster. It holds state
// and hashes, never rendered configuration.
type TalosClusterStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready, CNIHandover, CNIUnsupported, CARotationAdvised,
	// NetworkPoliciesApplied, TopologyTransitioning, VersionsCompatible, SecureBoot, KernelLockdown,
	// KubeProxyConsistent, CertificatesExpiring.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// talosVersion is the oldest Talos version a machine runs.
	// +optional
	TalosVersion string `json:"talosVersion,omitempty"`
	// kubernetesVersion is the oldest Kubernetes version a control plane runs.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// controlPlanes counts the control-plane machines.
	// +optional
	ControlPlanes MachineCounts `json:"controlPlanes,omitempty"`
	// workers counts the worker machines.
	// +optional
	Workers MachineCounts `json:"workers,omitempty"`
	// pendingMachines is the number of discovered machines waiting for approval.
	// +optional
	PendingMachines int32 `json:"pendingMachines,omitempty"`
	// discovery is what the last discovery found at each address: the response
	// of an add by address and the nodes a subnet scan found.
	// +optional
	Discovery DiscoveryStatus `json:"discovery,omitempty"`
	// cni is the observed CNI state.
	// +optional
	CNI CNIStatus `json:"cni,omitempty"`
	// certificates are the expiry dates of the cluster's CAs and of Ichor's own client certificates.
	// +optional
	Certificates CertificatesStatus `json:"certificates,omitempty"`
	// lockHolder is the identity that holds the cluster lock, if any.
	// +optional
	LockHolder string `json:"lockHolder,omitempty"`
	// clusterID is the Talos cluster ID from the secrets bundle.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
	// talosUpgrade is what the controller found about Talos upgrades: the
	// candidates from the release source and the target the machines were last
	// upgraded to.
	// +optional
	TalosUpgrade TalosUpgradeStatus `json:"talosUpgrade,omitempty"`
	// kubernetesUpgrade is the Kubernetes upgrade state: the version the
	// machines run and the candidates to upgrade to.
	// +optional
	KubernetesUpgrade KubernetesUpgradeStatus `json:"kubernetesUpgrade,omitempty"`
}

// KubernetesUpgradeStatus is the Kubernetes upgrade state of a cluster.
type KubernetesUpgradeStatus struct {
	// source is the registry the candidates were read from (the tags of the
	// kubelet image Talos runs).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Source string `json:"source,omitempty"`
	// checkedAt is when the registry was last read.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// message says why the registry could not be read, when it could not.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// candidates are the versions an upgrade may move to: Recommended, Patch,
	// then Next minor, newest first within each; the newest patch of the
	// running minor is the default.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Candidates []VersionCandidate `json:"candidates,omitempty"`
	// version is the spec.kubernetesVersion the machines were last upgraded to
	// (or installed with): a spec.kubernetesVersion that differs starts a
	// kubernetes operation, and until it has upgraded a machine's components
	// that machine's configuration keeps this version (the render pins it).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
}

// TalosUpgradeStatus is the Talos upgrade state of a cluster.
type TalosUpgradeStatus struct {
	// source is the release source the candidates were read from (an Image Factory).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Source string `json:"source,omitempty"`
	// checkedAt is when the release source was last read.
	// +optional
	CheckedAt *metav1.Time `json:"checkedAt,omitempty"`
	// message says why the release source could not be read, when it could not.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// candidates are the versions an upgrade may move to: Recommended, Patch,
	// then Next minor, newest first within each; the newest patch of the
	// running minor is the default.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Candidates []VersionCandidate `json:"candidates,omitempty"`
	// version is the spec.talosVersion the machines were last upgraded to (or
	// installed with): a spec.talosVersion that differs starts a talos operation.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
	// schematic is the spec.schematic the machines were last upgraded to (or installed with).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Schematic string `json:"schematic,omitempty"`
}

// Candidate groups.
const (
	// CandidateRecommended is the version of the release set the running Ichor pins.
	CandidateRecommended = "Recommended"
	// CandidatePatch is a newer patch of the running minor.
	CandidatePatch = "Patch"
	// CandidateNextMinor is a release of the next minor.
	CandidateNextMinor = "Next minor"
)

// VersionCandidate is one version an upgrade may move to.
type VersionCandidate struct {
	// version is the release, for example v1.14.2.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// group is Recommended, Patch or Next minor.
	// +required
	// +kubebuilder:validation:Enum=Recommended;Patch;Next minor
	Group string `json:"group"`
	// default marks the newest patch of the running minor.
	// +optional
	Default bool `json:"default,omitempty"`
}

// Discovery results of one address.
const (
	// DiscoveryResultPending means the node is a pending TalosMachine waiting for a person.
	DiscoveryResultPending = "Pending"
	// DiscoveryResultKnown means the node is an existing TalosMachine that discovery leaves alone.
	DiscoveryResultKnown = "Known"
	// DiscoveryResultAlreadyConfigured means the node runs a configured Talos
	// (its API wants a client certificate); nothing was created. Joining it needs a reclaim.
	DiscoveryResultAlreadyConfigured = "AlreadyConfigured"
	// DiscoveryResultUnreachable means nothing answered on the Talos API port, or the node did not answer the reads.
	DiscoveryResultUnreachable = "Unreachable"
	// DiscoveryResultConflict means the node is a pending TalosMachine whose
	// identity is weak or repeated (its IdentityConflict condition says which).
	DiscoveryResultConflict = "Conflict"
)

// DiscoveryStatus is what discovery found.
type DiscoveryStatus struct {
	// lastScanTime is when the subnets were last scanned.
	// +optional
	LastScanTime *metav1.Time `json:"lastScanTime,omitempty"`
	// nextScanTime is when the next scan is due: the interval after the last
	// one, or sooner for a scan request (the ichor.maesh.dev/scan-requested-at
	// annotation) that waits for the shortest gap between two scans.
	// +optional
	NextScanTime *metav1.Time `json:"nextScanTime,omitempty"`
	// lastHandledScanRequest is the value of the ichor.maesh.dev/scan-requested-at
	// annotation the last scan answered; a request is pending while the two differ.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	LastHandledScanRequest string `json:"lastHandledScanRequest,omitempty"`
	// message reports a problem with the discovery settings, such as a subnet too large to scan.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// addresses are the results of the registered addresses, then of the
	// addresses a scan found a Talos API on, sorted by address within each group.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=512
	Addresses []DiscoveryResult `json:"addresses,omitempty"`
}

// DiscoveryResult is what discovery found at one address.
type DiscoveryResult struct {
	// address is the probed IP address.
	// +required
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address"`
	// result is Pending, Known, AlreadyConfigured, Unreachable or Conflict.
	// +required
	// +kubebuilder:validation:Enum=Pending;Known;AlreadyConfigured;Unreachable;Conflict
	Result string `json:"result"`
	// machine is the TalosMachine the node is, as namespace/name when it is in another namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Machine string `json:"machine,omitempty"`
	// message explains the result: the conflict, or why the node did not answer.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// probedAt is when the address was probed.
	// +required
	ProbedAt metav1.Time `json:"probedAt"`
}

// MachineCounts counts machines of one role.
type MachineCounts struct {
	// approved is the number of approved machines.
	// +optional
	Approved int32 `json:"approved,omitempty"`
	// ready is the number of machines whose Ready condition is true.
	// +optional
	Ready int32 `json:"ready,omitempty"`
}

// CNIStatus is the observed CNI.
type CNIStatus struct {
	// detected is the CNI that runs: cilium, flannel, calico, other (a
	// DaemonSet that installs a CNI into the hosts, none of the three) or none,
	// read from the cluster's DaemonSets every few minutes, for display.
	// +optional
	// +kubebuilder:validation:Enum=cilium;flannel;calico;other;none
	Detected string `json:"detected,omitempty"`
	// ciliumVersion is the version of the installed Cilium (the chart's, which
	// its agent image shares), read from the running agent; the Kubernetes ↔
	// Cilium pair check holds a kubernetesVersion change to it.
	// +optional
	CiliumVersion string `json:"ciliumVersion,omitempty"`
	// valuesHash is the hash of the effective Cilium values last applied.
	// +optional
	ValuesHash string `json:"valuesHash,omitempty"`
	// kubeProxy is the kube-proxy mode Talos's side is rendered with
	// (enabled or replaced): spec.cni.kubeProxy as first seen, then what a
	// kube-proxy operation switched Talos to at its step kube-proxy-talos.
	// While it differs from spec.cni.kubeProxy a switch is pending.
	// +optional
	// +kubebuilder:validation:Enum=enabled;replaced
	KubeProxy string `json:"kubeProxy,omitempty"`
	// takenOverInlineManifest is the name of the foreign inline manifest entry taken over at adoption.
	// +optional
	TakenOverInlineManifest string `json:"takenOverInlineManifest,omitempty"`
}

// CertificatesStatus holds expiry dates (each CA's not-after, read from the
// public certificates of the secrets bundle; never a key).
type CertificatesStatus struct {
	// talosCAExpiry is when the Talos API CA expires.
	// +optional
	TalosCAExpiry *metav1.Time `json:"talosCAExpiry,omitempty"`
	// kubernetesCAExpiry is when the Kubernetes CA expires.
	// +optional
	KubernetesCAExpiry *metav1.Time `json:"kubernetesCAExpiry,omitempty"`
	// etcdCAExpiry is when the etcd CA expires.
	// +optional
	EtcdCAExpiry *metav1.Time `json:"etcdCAExpiry,omitempty"`
	// aggregatorCAExpiry is when the Kubernetes aggregator (front-proxy) CA expires.
	// +optional
	AggregatorCAExpiry *metav1.Time `json:"aggregatorCAExpiry,omitempty"`
	// clientCertificateExpiry would be when a long-lived Talos client
	// certificate of Ichor expires. It stays empty: Ichor issues its Talos
	// client certificate per connection (a 10-minute lifetime, renewed at each
	// connection), so its validity is bounded by the Talos API CA
	// (talosCAExpiry). Kept for API compatibility.
	// +optional
	ClientCertificateExpiry *metav1.Time `json:"clientCertificateExpiry,omitempty"`
}

// TalosCluster is one Talos cluster managed by Ichor: its versions, endpoint,
// topology, CNI, drift policy and security options. The secrets bundle is
// referenced, never embedded.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=tc,categories=ichor
// +kubebuilder:printcolumn:name="Talos",type=string,JSONPath=`.spec.talosVersion`
// +kubebuilder:printcolumn:name="Kubernetes",type=string,JSONPath=`.spec.kubernetesVersion`
// +kubebuilder:printcolumn:name="Control planes",type=integer,JSONPath=`.spec.controlPlane.count`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.endpoint.host`,priority=1
// +kubebuilder:printcolumn:name="CNI",type=string,JSONPath=`.status.cni.detected`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TalosCluster struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the cluster.
	// +required
	Spec TalosClusterSpec `json:"spec"`
	// status is the observed state of the cluster.
	// +optional
	Status TalosClusterStatus `json:"status,omitempty"`
}

// TalosClusterList is a list of TalosClusters.
//
// +kubebuilder:object:root=true
type TalosClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the clusters.
	Items []TalosCluster `json:"items"`
}
