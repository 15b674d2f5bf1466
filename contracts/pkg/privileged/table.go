// Package privileged is the one list of the Talos configuration that runs
// code as root on a node or acts as cluster-admin (architecture, "Trust"):
// whole document kinds and single fields, keyed by the document paths of
// contracts/pkg/configmeta ("Kind" or "Kind:dotted.path", the legacy
// document's kind being v1alpha1). Writing such configuration through a
// TalosConfigPatch needs `update` on talosconfigpatches/privileged, which
// only ichor-admin holds.
//
// The admission webhook (creating, changing and deleting a patch, and
// starting a config rollout), the CLI, ichor-ui and the field metadata
// (configmeta.Meta.Privileged) all read this table; nothing else lists these
// paths. The functions are pure.
package privileged

import (
	"strings"
)

// Entry is one privileged document kind or field.
type Entry struct {
	// Path is "Kind" for a whole document kind or "Kind:dotted.path" for a
	// field, as contracts/pkg/configmeta spells paths.
	Path string
	// Reason says what the configuration lets its author do.
	Reason string
}

// Kind is the document kind of the entry.
func (e Entry) Kind() string {
	kind, _, _ := strings.Cut(e.Path, ":")
	return kind
}

// Field is the dotted field path of the entry; empty for a whole document kind.
func (e Entry) Field() string {
	_, field, _ := strings.Cut(e.Path, ":")
	return field
}

const (
	reasonManifest  = "its manifests are applied to the cluster with cluster-admin rights"
	reasonImage     = "it chooses the image of a component that runs with full rights (root on the node, or the cluster's keys)"
	reasonArgs      = "it sets the command-line flags of a component that runs with full rights (root on the node, or the cluster's keys)"
	reasonEnv       = "it sets the environment of a component that runs with full rights (root on the node, or the cluster's keys)"
	reasonMounts    = "it mounts host paths into a component that runs with full rights (root on the node, or the cluster's keys)"
	reasonAPIAccess = "it lets pods reach the Talos API with the roles it names, os:admin included"
	reasonRoots     = "it adds certificate authorities every TLS client of the node trusts (image pulls, manifests, discovery)"
	reasonHostEnv   = "it sets the environment of Talos's own processes, which run as root"
	reasonFiles     = "it writes files on the node's root filesystem, which root processes read"
	reasonExtension = "it configures the service of a system extension, which runs as root (its files and environment)"
	reasonContainer = "it runs a container with Talos directly, with the capabilities and host mounts it chooses"
)

// table is the list. Whole kinds first, then fields by kind; the legacy
// v1alpha1 document's fields are the same settings as the multi-document
// kinds' (machinery v1.14.1, config/types/v1alpha1), and Ichor renders that
// document itself, so they are listed for the field metadata and the
// effective configuration even though a patch cannot carry the kind.
var table = []Entry{
	// Sources: machinery v1.14.1 config/types/k8s (inline_manifest.go,
	// external_manifest.go, talos_api_access.go), config/types/runtime
	// (environment.go, etc_file.go, extensions/service_config.go),
	// config/types/security (trusted_roots.go), config/types/container
	// (container_config.go: "declares a container to be run by Talos
	// directly, without Kubernetes", with a privileged security profile and
	// host-path mounts).
	{Path: "ContainerConfig", Reason: reasonContainer},
	{Path: "EnvironmentConfig", Reason: reasonHostEnv},
	{Path: "EtcFileConfig", Reason: reasonFiles},
	{Path: "ExtensionServiceConfig", Reason: reasonExtension},
	{Path: "KubeExternalManifestConfig", Reason: reasonManifest},
	{Path: "KubeInlineManifestConfig", Reason: reasonManifest},
	{Path: "KubeTalosAPIAccessConfig", Reason: reasonAPIAccess},
	{Path: "TrustedRootsConfig", Reason: reasonRoots},

	// The control plane's components and the kubelet. machinery v1.14.1's
	// multi-document kinds have no extraVolumes/extraMounts field (their
	// ExtraVolumes/ExtraMounts methods return fixed values), so only the
	// legacy document lists them.
	{Path: "KubeAPIServerConfig:image", Reason: reasonImage},
	{Path: "KubeAPIServerConfig:extraArgs", Reason: reasonArgs},
	{Path: "KubeAPIServerConfig:env", Reason: reasonEnv},
	{Path: "KubeControllerManagerConfig:image", Reason: reasonImage},
	{Path: "KubeControllerManagerConfig:extraArgs", Reason: reasonArgs},
	{Path: "KubeControllerManagerConfig:env", Reason: reasonEnv},
	{Path: "KubeSchedulerConfig:image", Reason: reasonImage},
	{Path: "KubeSchedulerConfig:extraArgs", Reason: reasonArgs},
	{Path: "KubeSchedulerConfig:env", Reason: reasonEnv},
	{Path: "KubeletConfig:image", Reason: reasonImage},
	{Path: "KubeletConfig:extraArgs", Reason: reasonArgs},
	// kube-proxy runs as a privileged DaemonSet on every node; Ichor's system
	// layer renders it, a patch cannot carry the kind.
	{Path: "KubeProxyConfig:image", Reason: reasonImage},
	{Path: "KubeProxyConfig:extraArgs", Reason: reasonArgs},

	// The legacy document.
	{Path: "v1alpha1:machine.env", Reason: reasonHostEnv},
	{Path: "v1alpha1:machine.files", Reason: reasonFiles},
	{Path: "v1alpha1:machine.features.kubernetesTalosAPIAccess", Reason: reasonAPIAccess},
	{Path: "v1alpha1:machine.kubelet.image", Reason: reasonImage},
	{Path: "v1alpha1:machine.kubelet.extraArgs", Reason: reasonArgs},
	{Path: "v1alpha1:machine.kubelet.extraMounts", Reason: reasonMounts},
	{Path: "v1alpha1:cluster.apiServer.image", Reason: reasonImage},
	{Path: "v1alpha1:cluster.apiServer.extraArgs", Reason: reasonArgs},
	{Path: "v1alpha1:cluster.apiServer.extraVolumes", Reason: reasonMounts},
	{Path: "v1alpha1:cluster.apiServer.env", Reason: reasonEnv},
	{Path: "v1alpha1:cluster.controllerManager.image", Reason: reasonImage},
	{Path: "v1alpha1:cluster.controllerManager.extraArgs", Reason: reasonArgs},
	{Path: "v1alpha1:cluster.controllerManager.extraVolumes", Reason: reasonMounts},
	{Path: "v1alpha1:cluster.controllerManager.env", Reason: reasonEnv},
	{Path: "v1alpha1:cluster.scheduler.image", Reason: reasonImage},
	{Path: "v1alpha1:cluster.scheduler.extraArgs", Reason: reasonArgs},
	{Path: "v1alpha1:cluster.scheduler.extraVolumes", Reason: reasonMounts},
	{Path: "v1alpha1:cluster.scheduler.env", Reason: reasonEnv},
	{Path: "v1alpha1:cluster.proxy.image", Reason: reasonImage},
	{Path: "v1alpha1:cluster.proxy.extraArgs", Reason: reasonArgs},
	{Path: "v1alpha1:cluster.etcd.image", Reason: reasonImage},
	{Path: "v1alpha1:cluster.etcd.extraArgs", Reason: reasonArgs},
	{Path: "v1alpha1:cluster.inlineManifests", Reason: reasonManifest},
	{Path: "v1alpha1:cluster.extraManifests", Reason: reasonManifest},
	{Path: "v1alpha1:cluster.extraManifestHeaders", Reason: reasonManifest},
	{Path: "v1alpha1:cluster.externalCloudProvider.manifests", Reason: reasonManifest},
}

// Entries returns the table, for documentation, tests and the UI.
func Entries() []Entry {
	return append([]Entry(nil), table...)
}

// Lookup returns the entry that makes the configuration at path privileged:
// the entry of the path itself or of a path above it (a whole kind covers
// all its fields; "Kind:extraArgs" covers "Kind:extraArgs{*}" and
// "Kind:extraArgs.feature-gates"). path is in configmeta's form ("Kind" or
// "Kind:dotted.path", [] for list elements, {*} or .key or ["key"] below a
// map); a render.Path's MetaPath is one.
func Lookup(path string) (Entry, bool) {
	best := -1
	for i, e := range table {
		if Covers(e.Path, path) && (best < 0 || len(e.Path) > len(table[best].Path)) {
			best = i
		}
	}
	if best < 0 {
		return Entry{}, false
	}
	return table[best], true
}

// Is reports whether the configuration at path is privileged.
func Is(path string) bool {
	_, ok := Lookup(path)
	return ok
}

// Contains reports whether path is privileged or holds privileged
// configuration below it ("v1alpha1:cluster.apiServer" holds the
// kube-apiserver's image), as a document or section shown as one value is.
func Contains(path string) bool {
	if Is(path) {
		return true
	}
	for _, e := range table {
		if Covers(path, e.Path) {
			return true
		}
	}
	return false
}

// Covers reports whether the entry at prefix applies to path: the same path,
// or a path below it. It is configmeta's rule too (configmeta imports this
// package, so the rule lives here once).
func Covers(prefix, path string) bool {
	if prefix == path {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	switch path[len(prefix)] {
	case '.', '[', '{':
		return true
	case ':':
		return !strings.Contains(prefix, ":")
	default:
		return false
	}
}
