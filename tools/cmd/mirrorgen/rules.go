package main

// The generator's reviewed tables. Each table answers one question the Go
// types of machinery cannot answer on their own; the generator fails when a
// table entry no longer matches machinery, so a machinery bump that moves a
// field is noticed rather than silently dropped or mirrored.

const (
	goString                 = "string"
	schemaResourceList       = "resourceList"
	schemaCredentialProvider = "credentialProviderConfig" //nolint:gosec // a table key, not a credential

	pkgMeta       = "github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	pkgBlock      = "github.com/siderolabs/talos/pkg/machinery/config/types/block"
	pkgNetwork    = "github.com/siderolabs/talos/pkg/machinery/config/types/network"
	pkgV1Alpha1   = "github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	pkgCEL        = "github.com/siderolabs/talos/pkg/machinery/cel"
	pkgX509       = "github.com/siderolabs/crypto/x509"
	pkgNethelpers = "github.com/siderolabs/talos/pkg/machinery/nethelpers"
)

// substitution says how a machinery type with no usable exported fields (or a
// custom YAML form) is mirrored: as MirrorType, converted by two helper
// functions written by hand in the convert package. The helpers have the
// signatures func(in Mirror) (Machinery, error) and func(in Machinery) (Mirror, error).
type substitution struct {
	// MirrorType is a Go type expression valid in the mirror package.
	MirrorType string
	// Imports are the import paths MirrorType needs, keyed by path, value = alias.
	Imports map[string]string
	// ToMachinery and FromMachinery name the helper functions in package convert.
	ToMachinery, FromMachinery string
	// Format is a kubebuilder validation format, if any.
	Format string
	// Doc is appended to the field documentation to say what is accepted.
	Doc string
}

// substitutions is keyed by "importpath.Name".
var substitutions = map[string]substitution{
	pkgCEL + ".Expression": {
		MirrorType: goString, ToMachinery: "celToMachinery", FromMachinery: "celFromMachinery",
		Doc: "A CEL expression.",
	},
	pkgBlock + ".ByteSize": {
		MirrorType: goString, ToMachinery: "byteSizeToMachinery", FromMachinery: "byteSizeFromMachinery",
		Doc: "A byte size: a number of bytes or a human-readable size such as 100MiB.",
	},
	pkgBlock + ".Size": {
		MirrorType: goString, ToMachinery: "blockSizeToMachinery", FromMachinery: "blockSizeFromMachinery",
		Doc: "A size: a byte size such as 10GiB or a percentage such as 50%.",
	},
	pkgMeta + ".Addr": {
		MirrorType: goString, ToMachinery: "metaAddrToMachinery", FromMachinery: "metaAddrFromMachinery",
		Doc: "An IP address.",
	},
	pkgMeta + ".AddrPort": {
		MirrorType: goString, ToMachinery: "metaAddrPortToMachinery", FromMachinery: "metaAddrPortFromMachinery",
		Doc: "An IP address and port, such as 10.0.0.1:53 or [fd00::1]:53.",
	},
	pkgMeta + ".Prefix": {
		MirrorType: goString, ToMachinery: "metaPrefixToMachinery", FromMachinery: "metaPrefixFromMachinery",
		Doc: "An IP prefix in CIDR notation.",
	},
	pkgMeta + ".URL": {
		MirrorType: goString, ToMachinery: "metaURLToMachinery", FromMachinery: "metaURLFromMachinery",
		Doc: "A URL.",
	},
	pkgMeta + ".ArgValue": {
		MirrorType: "ArgValue", ToMachinery: "argValueToMachinery", FromMachinery: "argValueFromMachinery",
	},
	"net/netip.Addr": {
		MirrorType: goString, ToMachinery: "netipAddrToMachinery", FromMachinery: "netipAddrFromMachinery",
		Doc: "An IP address.",
	},
	"net/netip.AddrPort": {
		MirrorType: goString, ToMachinery: "netipAddrPortToMachinery", FromMachinery: "netipAddrPortFromMachinery",
		Doc: "An IP address and port.",
	},
	"net/netip.Prefix": {
		MirrorType: goString, ToMachinery: "netipPrefixToMachinery", FromMachinery: "netipPrefixFromMachinery",
		Doc: "An IP prefix in CIDR notation.",
	},
	"time.Duration": {
		MirrorType: "metav1.Duration", Imports: map[string]string{"k8s.io/apimachinery/pkg/apis/meta/v1": "metav1"},
		ToMachinery: "durationToMachinery", FromMachinery: "durationFromMachinery",
		Doc: "A duration such as 30s or 1h5m.",
	},
	pkgNetwork + ".PortRange": {
		MirrorType: goString, ToMachinery: "portRangeToMachinery", FromMachinery: "portRangeFromMachinery",
		Doc: "A port (80) or an inclusive port range (8000-8080).",
	},
	pkgV1Alpha1 + ".Endpoint": {
		MirrorType: goString, ToMachinery: "endpointToMachinery", FromMachinery: "endpointFromMachinery",
		Doc: "A URL.",
	},
	pkgV1Alpha1 + ".InstallDiskSizeMatcher": {
		MirrorType: goString, ToMachinery: "diskSizeMatcherToMachinery", FromMachinery: "diskSizeMatcherFromMachinery",
		Doc: "A size condition such as '>= 1TB' or '< 500GB'.",
	},
}

// textTypes are named non-struct types whose YAML form is their
// encoding.TextMarshaler text (machinery's enums and the hardware address):
// they are mirrored as strings and converted with MarshalText/UnmarshalText.
// Named types implementing MarshalText that are not listed make the generator fail.
var textTypePackages = map[string]bool{
	pkgNethelpers: true,
	"github.com/siderolabs/talos/pkg/machinery/resources/block":   true,
	"github.com/siderolabs/talos/pkg/machinery/resources/storage": true,
}

// structuralTypes implement MarshalYAML, but their YAML form is exactly their
// fields under the lower-cased field names (siderolabs/crypto's PEM pairs
// encode crt and key as base64, which is what a []byte field is in JSON), so
// they are mirrored field by field like any other struct.
var structuralTypes = map[string]bool{
	pkgX509 + ".PEMEncodedCertificate":       true,
	pkgX509 + ".PEMEncodedCertificateAndKey": true,
	pkgX509 + ".PEMEncodedKey":               true,
}

// integerTypes are named integer types with a custom YAML form (octal file
// modes, human-readable disk sizes) that the mirror carries as plain integers.
var integerTypes = map[string]bool{
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime.EtcFileMode": true,
	pkgV1Alpha1 + ".FileMode": true,
	pkgV1Alpha1 + ".DiskSize": true,
}

// byteTypes are named []byte types with a custom YAML form that is base64,
// which is also what encoding/json uses for []byte.
var byteTypes = map[string]bool{
	pkgV1Alpha1 + ".Base64Bytes": true,
}

// unstructuredAction says what happens to one meta.Unstructured field.
type unstructuredAction struct {
	// Typed, if not empty, names the upstream typed schema (a key of typedSchemas).
	Typed string
	// Reason is why the field is dropped (when Typed is empty).
	Reason string
}

// typedSchema is an upstream type an Unstructured field is mirrored as.
type typedSchema struct {
	MirrorType                 string
	Imports                    map[string]string
	ToMachinery, FromMachinery string
	Doc                        string
}

var typedSchemas = map[string]typedSchema{
	schemaResourceList: {
		MirrorType: "corev1.ResourceList", Imports: map[string]string{"k8s.io/api/core/v1": "corev1"},
		ToMachinery: "resourceListToMachinery", FromMachinery: "resourceListFromMachinery",
		Doc: "Typed as a Kubernetes resource list (for example cpu: 500m, memory: 1Gi).",
	},
	schemaCredentialProvider: {
		MirrorType: "*kubeletconfigv1.CredentialProviderConfig", Imports: map[string]string{"k8s.io/kubelet/config/v1": "kubeletconfigv1"},
		ToMachinery: "credentialProviderToMachinery", FromMachinery: "credentialProviderFromMachinery",
		Doc: "Typed as the kubelet's CredentialProviderConfig (kubelet.config.k8s.io/v1).",
	},
}

const (
	reasonFloat      = "its upstream schema (KubeletConfiguration) has float32 fields, which controller-gen only emits under allowDangerousTypes"
	reasonProxy      = "its upstream schema (KubeProxyConfiguration) lives in k8s.io/kube-proxy, not an acceptable dependency of the API package, and has float32 fields"
	reasonScheduler  = "its upstream schema (KubeSchedulerConfiguration) lives in k8s.io/kube-scheduler, not an acceptable dependency of the API package, and has float64/float32 fields"
	reasonAPIServer  = "its upstream schema lives in k8s.io/apiserver, not an acceptable dependency of the API package; the nested plugin configurations are themselves free-form"
	reasonPod        = "a full corev1.Pod schema would add hundreds of kilobytes to the CRD per occurrence (static pods are not a patch concern)"
	reasonOCI        = "the OCI runtime spec (opencontainers/runtime-spec) is not an acceptable dependency of the API package, and overrides are free-form by design"
	reasonSeccomp    = "a seccomp profile is free-form JSON with no schema in an acceptable dependency"
	reasonFlannel    = "flannel's backend configuration is free-form with no published Go schema"
	reasonEncryption = "the encryption configuration carries the etcd encryption keys (secret material)"
)

// unstructuredFields is the field-level override table for every
// meta.Unstructured field, keyed by document path (kind:path). Every
// meta.Unstructured field the generator meets must be listed.
var unstructuredFields = map[string]unstructuredAction{
	"CRIBaseRuntimeSpecConfig:overrides":             {Reason: reasonOCI},
	"KubeAdmissionControlConfig:configuration":       {Reason: reasonAPIServer},
	"KubeAuditPolicyConfig:configuration":            {Reason: reasonAPIServer},
	"KubeAuthenticationConfig:configuration":         {Reason: reasonAPIServer},
	"KubeAuthorizerConfig:webhook":                   {Reason: reasonAPIServer},
	"KubeCredentialProviderConfig:configuration":     {Typed: schemaCredentialProvider},
	"KubeEtcdEncryptionConfig:config":                {Reason: reasonEncryption},
	"KubeFlannelCNIConfig:backendExtraConfig":        {Reason: reasonFlannel},
	"KubeProxyConfig:config":                         {Reason: reasonProxy},
	"KubeSchedulerConfig:config":                     {Reason: reasonScheduler},
	"KubeStaticPodConfig:pod":                        {Reason: reasonPod},
	"KubeletConfig:config":                           {Reason: reasonFloat},
	"KubeAPIServerConfig:resources.requests":         {Typed: schemaResourceList},
	"KubeAPIServerConfig:resources.limits":           {Typed: schemaResourceList},
	"KubeControllerManagerConfig:resources.requests": {Typed: schemaResourceList},
	"KubeControllerManagerConfig:resources.limits":   {Typed: schemaResourceList},
	"KubeSchedulerConfig:resources.requests":         {Typed: schemaResourceList},
	"KubeSchedulerConfig:resources.limits":           {Typed: schemaResourceList},
	"KubeProxyConfig:resources.requests":             {Typed: schemaResourceList},
	"KubeProxyConfig:resources.limits":               {Typed: schemaResourceList},
	"KubeFlannelCNIConfig:resources.requests":        {Typed: schemaResourceList},
	"KubeFlannelCNIConfig:resources.limits":          {Typed: schemaResourceList},

	"v1alpha1:machine.pods":                                       {Reason: reasonPod},
	"v1alpha1:machine.baseRuntimeSpecOverrides":                   {Reason: reasonOCI},
	"v1alpha1:machine.seccompProfiles[].value":                    {Reason: reasonSeccomp},
	"v1alpha1:machine.kubelet.extraConfig":                        {Reason: reasonFloat},
	"v1alpha1:machine.kubelet.credentialProviderConfig":           {Typed: schemaCredentialProvider},
	"v1alpha1:cluster.apiServer.admissionControl[].configuration": {Reason: reasonAPIServer},
	"v1alpha1:cluster.apiServer.auditPolicy":                      {Reason: reasonAPIServer},
	"v1alpha1:cluster.apiServer.authorizationConfig[].webhook":    {Reason: reasonAPIServer},
	"v1alpha1:cluster.scheduler.config":                           {Reason: reasonScheduler},
	"v1alpha1:cluster.apiServer.resources.requests":               {Typed: schemaResourceList},
	"v1alpha1:cluster.apiServer.resources.limits":                 {Typed: schemaResourceList},
	"v1alpha1:cluster.controllerManager.resources.requests":       {Typed: schemaResourceList},
	"v1alpha1:cluster.controllerManager.resources.limits":         {Typed: schemaResourceList},
	"v1alpha1:cluster.scheduler.resources.requests":               {Typed: schemaResourceList},
	"v1alpha1:cluster.scheduler.resources.limits":                 {Typed: schemaResourceList},
}

// secretFields are the fields Talos's own config.SecretDocument.Redact
// replaces (machinery v1.14.1), keyed by document path. They are dropped from
// the mirror unconditionally: a TalosConfigPatch must never be able to carry
// or overwrite a token, a private key or an encryption key. The convert
// package's tests derive the same set from Redact and compare.
var secretFields = []string{
	"DiscoveryIdentityConfig:clusterSecret",
	"HCloudVIPConfig:apiToken",
	"KubeAPIServerCAConfig:issuingCA.key",
	"KubeAggregatorCAConfig:issuingCA.key",
	"KubeServiceAccountConfig:issuer.privateKey",
	"RawVolumeConfig:encryption.keys[].static.passphrase",
	"SwapVolumeConfig:encryption.keys[].static.passphrase",
	"UserVolumeConfig:encryption.keys[].static.passphrase",
	"VolumeConfig:encryption.keys[].static.passphrase",
	"RegistryAuthConfig:password",
	"RegistryAuthConfig:auth",
	"RegistryAuthConfig:identityToken",
	"RegistryTLSConfig:clientIdentity.key",
	"SideroLinkConfig:uniqueToken",
	"WireguardConfig:privateKey",
	"WireguardConfig:peers[].presharedKey",
	"KubeEtcdEncryptionConfig:config",
	"v1alpha1:machine.token",
	"v1alpha1:machine.ca.key",
	"v1alpha1:machine.registries.config{*}.auth.password",
	"v1alpha1:machine.registries.config{*}.auth.auth",
	"v1alpha1:machine.registries.config{*}.auth.identityToken",
	"v1alpha1:machine.registries.config{*}.tls.clientIdentity.key",
	"v1alpha1:machine.network.interfaces[].wireguard.privateKey",
	"v1alpha1:machine.network.interfaces[].vip.equinixMetal.apiToken",
	"v1alpha1:machine.network.interfaces[].vip.hcloud.apiToken",
	"v1alpha1:machine.network.interfaces[].vlans[].vip.equinixMetal.apiToken",
	"v1alpha1:machine.network.interfaces[].vlans[].vip.hcloud.apiToken",
	"v1alpha1:machine.systemDiskEncryption.state.keys[].static.passphrase",
	"v1alpha1:machine.systemDiskEncryption.ephemeral.keys[].static.passphrase",
	"v1alpha1:cluster.token",
	"v1alpha1:cluster.secret",
	"v1alpha1:cluster.aescbcEncryptionSecret",
	"v1alpha1:cluster.secretboxEncryptionSecret",
	"v1alpha1:cluster.ca.key",
	"v1alpha1:cluster.aggregatorCA.key",
	"v1alpha1:cluster.etcd.ca.key",
	"v1alpha1:cluster.serviceAccount.key",
}

// rootNames names the mirror type of a kind whose registered name is not a
// good Go identifier.
var rootNames = map[string]string{
	"v1alpha1": "V1Alpha1Config",
}
