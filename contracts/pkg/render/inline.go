package render

import (
	"fmt"
	"regexp"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// PatchInlineManifests names the system-layer patch that carries the
// bootstrap inline manifests (`ichor init` puts Cilium there, and nothing else).
const PatchInlineManifests = "ichor-inline-manifests"

// InlineManifest is a Kubernetes manifest Talos server-side applies once the
// first control plane's API server runs (architecture, "Bootstrap": Cilium is
// the only one, the component Kubernetes cannot start without).
type InlineManifest struct {
	// Name names the entry (a DNS label).
	Name string
	// Contents is multi-document YAML.
	Contents string
}

var inlineManifestName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// inlineManifestDocs renders the entries as KubeInlineManifestConfig documents
// under a contract with multi-document Kubernetes configuration (machinery
// config/types/k8s/inline_manifest.go), else as cluster.inlineManifests of the
// v1alpha1 document. They go only to control planes: Talos applies them from a
// control plane's bootstrap manifests controller.
func inlineManifestDocs(in Input, vc *coreconfig.VersionContract) ([]doc, error) {
	if len(in.InlineManifests) == 0 || in.Machine.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return nil, nil
	}

	seen := map[string]bool{}
	legacyEntries := make([]any, 0, len(in.InlineManifests))

	var docs []doc

	for _, im := range in.InlineManifests {
		if !inlineManifestName.MatchString(im.Name) {
			return nil, fmt.Errorf("inline manifest name %q is not a DNS label", im.Name)
		}

		if seen[im.Name] {
			return nil, fmt.Errorf("inline manifest %q is given twice", im.Name)
		}

		seen[im.Name] = true

		if vc.MultidocKubernetesConfigSupported() {
			docs = append(docs, multidoc("KubeInlineManifestConfig", doc{keyName: im.Name, "manifest": im.Contents}))

			continue
		}

		legacyEntries = append(legacyEntries, doc{keyName: im.Name, "contents": im.Contents})
	}

	if len(legacyEntries) > 0 {
		docs = append(docs, legacy(doc{keyCluster: doc{"inlineManifests": legacyEntries}}))
	}

	return docs, nil
}
