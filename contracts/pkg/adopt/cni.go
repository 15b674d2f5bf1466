package adopt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/maeshinshin/ichor/contracts/pkg/cni"
)

// Where a CNI came from.
const (
	// SourceTalos is Talos's own flannel (cluster.network.cni or the KubeFlannelCNIConfig document).
	SourceTalos = "talos"
	// SourceTalosCustom is Talos's custom CNI: manifests Talos applies from URLs.
	SourceTalosCustom = "talos-custom"
	// SourceInlineManifest is an entry of the inline manifests.
	SourceInlineManifest = "inline-manifest"
)

// kindDaemonSet is the kind a CNI runs its agent as.
const kindDaemonSet = "DaemonSet"

// CiliumIPAMKubernetes is the only Cilium IPAM mode adoption takes over.
const CiliumIPAMKubernetes = "kubernetes"

// ciliumDefaultIPAM is Cilium's IPAM mode when cilium-config does not name one
// (the chart's ipam.mode default and the agent's option default).
const ciliumDefaultIPAM = "cluster-pool"

// CNI is one CNI found in the live configurations.
type CNI struct {
	// Name is cilium, flannel, calico or other (contracts/pkg/cni's detected names).
	Name string `json:"name"`
	// Source is talos, talos-custom or inline-manifest.
	Source string `json:"source"`
	// InlineManifest names the inline manifest entry (Source inline-manifest).
	InlineManifest string `json:"inlineManifest,omitempty"`
	// IPAM is Cilium's IPAM mode, from its cilium-config ConfigMap.
	IPAM string `json:"ipam,omitempty"`
}

// String is "cilium (inline manifest cilium, IPAM kubernetes)".
func (c CNI) String() string {
	where := c.Source
	switch c.Source {
	case SourceTalos:
		where = "Talos's own, machine configuration"
	case SourceTalosCustom:
		where = "Talos custom CNI URLs"
	case SourceInlineManifest:
		where = "inline manifest " + c.InlineManifest
	}

	if c.IPAM != "" {
		where += ", IPAM " + c.IPAM
	}

	return fmt.Sprintf("%s (%s)", c.Name, where)
}

// ManifestContents is what an inline manifest holds, for the plan.
type ManifestContents struct {
	// Objects are "Kind namespace/name" of each object, in order.
	Objects []string
	// CNI is the CNI the manifest installs, or "".
	CNI string
	// CiliumIPAM is cilium-config's ipam ("" when the manifest has no cilium-config).
	CiliumIPAM string
}

// ReadManifest reads an inline manifest's objects and recognises a CNI by
// its DaemonSet: cilium, kube-flannel(-ds) or calico-node.
func ReadManifest(contents string) (ManifestContents, error) {
	var out ManifestContents

	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(contents), 4096)

	sawCiliumConfig := false

	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}

			return out, fmt.Errorf("the manifest is not YAML: %w", err)
		}

		if len(obj) == 0 {
			continue
		}

		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		ns, _ := meta["namespace"].(string)

		id := name
		if ns != "" {
			id = ns + "/" + name
		}

		out.Objects = append(out.Objects, kind+" "+id)

		switch {
		case kind == kindDaemonSet && name == "cilium":
			out.CNI = cni.DetectedCilium
		case kind == kindDaemonSet && (name == "kube-flannel" || name == "kube-flannel-ds"):
			out.CNI = cni.DetectedFlannel
		case kind == kindDaemonSet && name == "calico-node":
			out.CNI = cni.DetectedCalico
		case kind == "ConfigMap" && name == "cilium-config":
			sawCiliumConfig = true

			data, _ := obj["data"].(map[string]any)
			if ipam, ok := data["ipam"].(string); ok && ipam != "" {
				out.CiliumIPAM = ipam
			}
		}
	}

	if sawCiliumConfig && out.CiliumIPAM == "" {
		out.CiliumIPAM = ciliumDefaultIPAM
	}

	return out, nil
}

// DetectCNIs lists the CNIs the control planes' configurations install:
// Talos's own and those of the inline manifests (each entry once, by name).
// A CNI installed from outside the machine configuration (Helm, kubectl) is
// not seen here.
func DetectCNIs(controlPlanes []Facts) ([]CNI, error) {
	var out []CNI

	talos := map[string]bool{}
	inline := map[string]bool{}

	for _, f := range controlPlanes {
		switch f.TalosCNI {
		case TalosCNIFlannel:
			if !talos[TalosCNIFlannel] {
				talos[TalosCNIFlannel] = true

				out = append(out, CNI{Name: cni.DetectedFlannel, Source: SourceTalos})
			}
		case TalosCNICustom:
			if !talos[TalosCNICustom] {
				talos[TalosCNICustom] = true

				out = append(out, CNI{Name: cni.DetectedOther, Source: SourceTalosCustom})
			}
		}

		for _, m := range f.InlineManifests {
			if inline[m.Name] {
				continue
			}

			inline[m.Name] = true

			mc, err := ReadManifest(m.Contents)
			if err != nil {
				return nil, fmt.Errorf("inline manifest %s: %w", m.Name, err)
			}

			if mc.CNI == "" {
				continue
			}

			c := CNI{Name: mc.CNI, Source: SourceInlineManifest, InlineManifest: m.Name}
			if mc.CNI == cni.DetectedCilium {
				c.IPAM = mc.CiliumIPAM
				if c.IPAM == "" {
					c.IPAM = ciliumDefaultIPAM
				}
			}

			out = append(out, c)
		}
	}

	return out, nil
}

// ciliumInline names the inline manifest entries that install Cilium.
func ciliumInline(cnis []CNI) map[string]bool {
	out := map[string]bool{}

	for _, c := range cnis {
		if c.Name == cni.DetectedCilium && c.Source == SourceInlineManifest {
			out[c.InlineManifest] = true
		}
	}

	return out
}

// names joins the CNIs' descriptions.
func names(cnis []CNI) string {
	parts := make([]string, len(cnis))
	for i, c := range cnis {
		parts[i] = c.String()
	}

	return strings.Join(parts, " and ")
}
