package storage

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// ExtensionLabelPrefix is the prefix of the Node labels Talos writes for
// each system extension of the running image, extensions.talos.dev/<name> =
// <version> (siderolabs/talos
// internal/app/machined/pkg/controllers/k8s/node_label_spec.go, from
// constants.K8sExtensionPrefix).
const ExtensionLabelPrefix = "extensions.talos.dev/"

// RequiredExtensions are the system extensions a preset needs in the node's
// installer image: Longhorn (both data engines) needs iscsi-tools and
// util-linux-tools (longhorn.io, "Talos Linux Support"); raw and filesystem
// need none.
func RequiredExtensions(preset string) []string {
	switch preset {
	case ichorv1alpha1.StoragePresetLonghornV1, ichorv1alpha1.StoragePresetLonghornV2:
		return []string{"iscsi-tools", "util-linux-tools"}
	default:
		return nil
	}
}

// NodeExtensions is one selected machine and the labels of its Node; Found
// is false while the machine has no Node.
type NodeExtensions struct {
	Machine string
	Found   bool
	Labels  map[string]string
}

// Reasons of the ExtensionsPresent condition.
const (
	ExtensionsPresentReason  = "ExtensionsPresent"
	ExtensionsMissingReason  = "ExtensionsMissing"
	NoExtensionsNeededReason = "NoneRequired"
	NodesNotFoundReason      = "NodesNotFound"
	NodesUnreadableReason    = "NodesUnreadable"
)

// ExtensionsReport is the ExtensionsPresent condition's status, reason and
// message, and the required extensions some selected node lacks.
type ExtensionsReport struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
	Missing []string
}

// CheckExtensions decides ExtensionsPresent for a preset from the selected
// machines' Nodes: True when every Node carries every required extension's
// label, False naming the machines and what they lack, Unknown while a
// machine has no Node to read. It is informational: it never gates Ready.
func CheckExtensions(preset string, nodes []NodeExtensions) ExtensionsReport {
	required := RequiredExtensions(preset)
	if len(required) == 0 {
		return ExtensionsReport{Status: metav1.ConditionTrue, Reason: NoExtensionsNeededReason,
			Message: fmt.Sprintf("the %s preset needs no system extension", preset)}
	}

	var (
		lacking  []string
		missing  []string
		notFound []string
	)

	for _, n := range nodes {
		if !n.Found {
			notFound = append(notFound, n.Machine)

			continue
		}

		var lacks []string

		for _, e := range required {
			if _, ok := n.Labels[ExtensionLabelPrefix+e]; !ok {
				lacks = append(lacks, e)

				if !slices.Contains(missing, e) {
					missing = append(missing, e)
				}
			}
		}

		if len(lacks) > 0 {
			lacking = append(lacking, fmt.Sprintf("%s lacks %s", n.Machine, strings.Join(lacks, ", ")))
		}
	}

	slices.Sort(missing)
	slices.Sort(lacking)
	slices.Sort(notFound)

	switch {
	case len(lacking) > 0:
		return ExtensionsReport{Status: metav1.ConditionFalse, Reason: ExtensionsMissingReason, Missing: missing, Message: fmt.Sprintf(
			"the %s preset needs the system extensions %s in the installer image: %s; add them to the cluster's schematic (an installer-image change: the Talos upgrade rolls it out)",
			preset, strings.Join(required, ", "), strings.Join(first(lacking), "; "))}
	case len(notFound) > 0:
		return ExtensionsReport{Status: metav1.ConditionUnknown, Reason: NodesNotFoundReason, Message: fmt.Sprintf(
			"no Kubernetes Node yet for %s, whose extensions are read from their Node's %s* labels", strings.Join(first(notFound), ", "), ExtensionLabelPrefix)}
	default:
		return ExtensionsReport{Status: metav1.ConditionTrue, Reason: ExtensionsPresentReason, Message: fmt.Sprintf(
			"every selected node (%d) has %s", len(nodes), strings.Join(required, ", "))}
	}
}

// first is the first five of names, with a count of the rest.
func first(names []string) []string {
	if len(names) <= 5 {
		return names
	}

	return append(slices.Clone(names[:5]), fmt.Sprintf("and %d more", len(names)-5))
}
