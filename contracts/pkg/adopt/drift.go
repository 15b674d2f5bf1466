package adopt

import (
	"strings"

	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Class is a drift class (architecture, "ichor adopt").
type Class string

// The drift classes.
const (
	// ClassRepresentable (A): stored as a TalosConfigPatch or a spec field.
	ClassRepresentable Class = "A"
	// ClassIchorOwned (B): the first render changes it; listed, needs consent, does not block.
	ClassIchorOwned Class = "B"
	// ClassBlocking (C): blocks the machine.
	ClassBlocking Class = "C"
)

// Drift is one difference between what Ichor would render and what a node
// runs, without the values.
type Drift struct {
	// Path is the value's path ("Kind:field" or "Kind/name:field").
	Path string `json:"path"`
	// Op is added (Ichor would add it), removed (Ichor would drop it) or changed.
	Op plan.Op `json:"op"`
	// Class is A, B or C.
	Class Class `json:"class"`
	// Why says why the path is in its class.
	Why string `json:"why"`

	// kind and name are the document the path is in.
	kind, name string
}

// Reasons of the classification.
const (
	whySecret      = "secret material that is not the secrets bundle's: a wrong or partial bundle (no patch is made from it)"
	whyTalosCNI    = "Talos's own CNI: Ichor removes it and runs Cilium"
	whyKubeProxy   = "kube-proxy: Ichor renders it from spec.cni.kubeProxy"
	whyKubePrism   = "KubePrism: Ichor turns it on at port 7445 (Cilium reaches the API server through it)"
	whyCiliumEntry = "the Cilium inline manifest: taken over as Ichor's Cilium release, then removed"
	whyOtherInline = "an inline manifest other than Cilium's: Ichor renders no other bootstrap manifests"
	whyExtra       = "extra manifests: Ichor renders none"
	whyInstall     = "the install target: kept in spec.install and spec.talosVersion"
	whyPatch       = "stored as a TalosConfigPatch of this document"
	whyNotRepr     = "Ichor renders this value itself and no TalosConfigPatch may carry it"
)

// secretKinds are the documents that carry the bundle's material
// (configpatch.Denied gives them the reasonSecrets reason).
var secretKinds = map[string]bool{
	"DiscoveryIdentityConfig":  true,
	"KubeAPIServerCAConfig":    true,
	"KubeAggregatorCAConfig":   true,
	"KubeEtcdEncryptionConfig": true,
	"KubeServiceAccountConfig": true,
}

// secretFields are the v1alpha1 fields the secrets bundle fills
// (machinery config/generate: the bundle's certs, tokens and keys).
var secretFields = []string{
	"machine.ca", "machine.token", "machine.acceptedCAs",
	"cluster.id", "cluster.secret", "cluster.token", "cluster.ca", "cluster.acceptedCAs", "cluster.aggregatorCA",
	"cluster.serviceAccount", "cluster.etcd.ca", "cluster.secretboxEncryptionSecret", "cluster.aescbcEncryptionSecret",
}

// classify sorts one difference. origin is where the render took the value
// from (zero for a value only the node has); cilium names the inline
// manifest entries that install Cilium; inline are the node's inline entries.
func classify(ch plan.Change, origin render.Origin, cilium map[string]bool, inline []InlineManifest) (Class, string) {
	p := ch.Path
	legacy := p.Kind == render.LegacyKind

	under := func(prefixes ...string) bool {
		if !legacy {
			return false
		}

		for _, pre := range prefixes {
			if p.Field == pre || strings.HasPrefix(p.Field, pre+".") || strings.HasPrefix(p.Field, pre+"[") {
				return true
			}
		}

		return false
	}

	switch {
	case secretKinds[p.Kind] || under(secretFields...):
		return ClassBlocking, whySecret
	case p.Kind == "KubeFlannelCNIConfig" || under("cluster.network.cni") || (origin.Layer == render.LayerSystem && origin.Patch == render.PatchCNI):
		return ClassIchorOwned, whyTalosCNI
	case p.Kind == "KubeProxyConfig" || under("cluster.proxy") || (origin.Layer == render.LayerSystem && origin.Patch == render.PatchKubeProxy):
		return ClassIchorOwned, whyKubeProxy
	case p.Kind == "KubePrismConfig" || under("machine.features.kubePrism") || (origin.Layer == render.LayerSystem && origin.Patch == render.PatchKubePrism):
		return ClassIchorOwned, whyKubePrism
	case p.Kind == "KubeInlineManifestConfig":
		if cilium[p.Name] {
			return ClassIchorOwned, whyCiliumEntry
		}

		return ClassBlocking, whyOtherInline
	case under("cluster.inlineManifests"):
		for _, m := range inline {
			if !cilium[m.Name] {
				return ClassBlocking, whyOtherInline
			}
		}

		return ClassIchorOwned, whyCiliumEntry
	case p.Kind == "KubeExternalManifestConfig" || under("cluster.extraManifests", "cluster.extraManifestHeaders"):
		return ClassBlocking, whyExtra
	case p.Kind == "UnattendedInstallConfig" || under("machine.install") || (origin.Layer == render.LayerSystem && origin.Patch == render.PatchInstall):
		return ClassRepresentable, whyInstall
	case configpatch.IsAllowed(p.Kind):
		return ClassRepresentable, whyPatch
	default:
		return ClassBlocking, whyNotRepr
	}
}

// Classify sorts the differences between a render and a live configuration.
func Classify(res *render.Result, live []byte, cilium map[string]bool, inline []InlineManifest) ([]Drift, error) {
	desired, err := render.ConfigValues(res.Bytes)
	if err != nil {
		return nil, err
	}

	current, err := render.ConfigValues(live)
	if err != nil {
		return nil, err
	}

	origins, err := res.Origins()
	if err != nil {
		return nil, err
	}

	changes := plan.Diff(desired, current)
	out := make([]Drift, 0, len(changes))

	for _, ch := range changes {
		c, why := classify(ch, origins[ch.Path], cilium, inline)
		out = append(out, Drift{Path: ch.Path.String(), Op: ch.Op, Class: c, Why: why, kind: ch.Path.Kind, name: ch.Path.Name})
	}

	return out, nil
}

// Count is how many drifts are of class c.
func Count(ds []Drift, c Class) int {
	n := 0

	for _, d := range ds {
		if d.Class == c {
			n++
		}
	}

	return n
}
