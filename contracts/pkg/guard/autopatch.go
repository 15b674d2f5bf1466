package guard

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/blang/semver/v4"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// AutoPatchServiceAccount is the ServiceAccount, in Ichor's namespace, that the
// controller impersonates to write automatic patch upgrades.
const AutoPatchServiceAccount = "ichor-auto-patch"

// AutoPatchUsername returns the Kubernetes user name of the auto-patch ServiceAccount.
func AutoPatchUsername(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + AutoPatchServiceAccount
}

// CheckAutoPatch limits what the auto-patch ServiceAccount may write to a
// TalosCluster: only talosVersion and kubernetesVersion, each only to a newer
// patch of the running minor, and only while spec.autoPatch.enabled is on.
func CheckAutoPatch(old, c *ichorv1alpha1.TalosCluster) []Refusal {
	wayOut := "automatic patch upgrades move talosVersion and kubernetesVersion within their minor only; a person starts any other change"
	if !old.Spec.AutoPatch.Enabled {
		return []Refusal{{Field: "spec.autoPatch.enabled", Rule: "automatic patch upgrades are off for this cluster", WayOut: "set spec.autoPatch.enabled: true to allow them"}}
	}
	rest, oldRest := c.Spec, old.Spec
	rest.TalosVersion, rest.KubernetesVersion = oldRest.TalosVersion, oldRest.KubernetesVersion
	var out []Refusal
	if !reflect.DeepEqual(rest, oldRest) {
		out = append(out, Refusal{Field: fieldSpec, Rule: "the auto-patch ServiceAccount changed a field other than talosVersion and kubernetesVersion", WayOut: wayOut})
	}
	if r := patchOnly("spec.talosVersion", old.Spec.TalosVersion, c.Spec.TalosVersion, wayOut); r != nil {
		out = append(out, *r)
	}
	if r := patchOnly("spec.kubernetesVersion", old.Spec.KubernetesVersion, c.Spec.KubernetesVersion, wayOut); r != nil {
		out = append(out, *r)
	}
	return out
}

func patchOnly(field, from, to, wayOut string) *Refusal {
	if from == to {
		return nil
	}
	f, errF := semver.ParseTolerant(from)
	t, errT := semver.ParseTolerant(to)
	if errF != nil || errT != nil || f.Major != t.Major || f.Minor != t.Minor || !t.GT(f) || len(t.Pre) > 0 {
		return &Refusal{Field: field, Rule: fmt.Sprintf("%s to %s is not a newer patch of the running minor", from, to), WayOut: wayOut}
	}
	return nil
}

// ControllerServiceAccount is the controller's own ServiceAccount, in Ichor's namespace.
const ControllerServiceAccount = "ichor-controller"

// ControllerUsername returns the Kubernetes user name of the controller's own ServiceAccount.
func ControllerUsername(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + ControllerServiceAccount
}

// CheckAutoPatchMetadata refuses a write of the auto-patch ServiceAccount
// that changes the TalosCluster's labels, annotations, finalizers or owners:
// an annotation or a finalizer steers the controller as much as spec does.
func CheckAutoPatchMetadata(old, c *ichorv1alpha1.TalosCluster) []Refusal {
	same := func(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b) }
	if same(old.Labels, c.Labels) && same(old.Annotations, c.Annotations) &&
		slices.Equal(old.Finalizers, c.Finalizers) && reflect.DeepEqual(old.OwnerReferences, c.OwnerReferences) {
		return nil
	}
	return []Refusal{{Field: "metadata", Rule: "the auto-patch ServiceAccount changed labels, annotations, finalizers or owners",
		WayOut: "automatic patch upgrades write spec.talosVersion and spec.kubernetesVersion only; a person changes metadata"}}
}

// CheckAutoPatchVerb refuses a create or delete of a TalosCluster by the
// auto-patch ServiceAccount: it only moves the versions of an existing one.
func CheckAutoPatchVerb(verb string) []Refusal {
	return []Refusal{{Field: fieldSpec, Rule: "the auto-patch ServiceAccount may not " + verb + " a TalosCluster",
		WayOut: "a person creates and deletes clusters; the auto-patch ServiceAccount only moves the versions to a newer patch"}}
}

// CheckControllerWrite keeps principle 5 (architecture, "Principles"): the
// controller's own identity never changes a TalosCluster's spec. Automatic
// patch upgrades write as the auto-patch ServiceAccount instead.
func CheckControllerWrite(old, c *ichorv1alpha1.TalosCluster) []Refusal {
	if reflect.DeepEqual(old.Spec, c.Spec) {
		return nil
	}
	return []Refusal{{Field: fieldSpec, Rule: "the controller's own ServiceAccount never writes a TalosCluster's spec",
		WayOut: "write spec as a person, or, for a newer patch of the running minor, as the " + AutoPatchServiceAccount + " ServiceAccount with spec.autoPatch.enabled"}}
}

// AutoPatchPlan is what an automatic patch upgrade of a cluster writes.
type AutoPatchPlan struct {
	// TalosVersion and KubernetesVersion are the new values of the two
	// fields; "" leaves that field as it is.
	TalosVersion, KubernetesVersion string
	// Why says, when nothing is written, why not (for the logs).
	Why string
}

// PlanAutoPatch decides the automatic patch upgrade of c: for Talos and for
// Kubernetes, the newest version of available (each a list of releases,
// normally release.Pinned's) that is a newer patch of the running minor, when
// the component is settled (its running version, status.talosUpgrade.version
// or status.kubernetesUpgrade.version, is the spec's, and the Talos schematic
// too) and the new pair is one
// the compatibility table accepts. Nothing is planned while automatic patch
// upgrades are off, the cluster is paused or being deleted. Every plan passes
// CheckAutoPatch.
func PlanAutoPatch(c *ichorv1alpha1.TalosCluster, talosAvailable, kubernetesAvailable []string) AutoPatchPlan {
	switch {
	case !c.Spec.AutoPatch.Enabled:
		return AutoPatchPlan{Why: "spec.autoPatch.enabled is off"}
	case c.Spec.Paused:
		return AutoPatchPlan{Why: "the cluster is paused"}
	case c.DeletionTimestamp != nil:
		return AutoPatchPlan{Why: "the cluster is being deleted"}
	}
	var p AutoPatchPlan
	var why []string
	if u := c.Status.TalosUpgrade; u.Version != c.Spec.TalosVersion || u.Schematic != c.Spec.Schematic {
		why = append(why, "a Talos upgrade to "+c.Spec.TalosVersion+" has not completed")
	} else {
		p.TalosVersion = newestPatch(c.Spec.TalosVersion, talosAvailable)
	}
	if c.Status.KubernetesUpgrade.Version == "" || !kubeupgrade.Same(c.Status.KubernetesUpgrade.Version, c.Spec.KubernetesVersion) {
		why = append(why, "a Kubernetes upgrade to "+c.Spec.KubernetesVersion+" has not completed")
	} else {
		p.KubernetesVersion = newestPatch(c.Spec.KubernetesVersion, kubernetesAvailable)
	}
	talos, kube := cmp.Or(p.TalosVersion, c.Spec.TalosVersion), cmp.Or(p.KubernetesVersion, c.Spec.KubernetesVersion)
	if (p.TalosVersion != "" || p.KubernetesVersion != "") && release.CheckPair(talos, kube) != nil {
		return AutoPatchPlan{Why: release.CheckPair(talos, kube).Error()}
	}
	if p.TalosVersion != "" && release.TalosPath(c.Spec.TalosVersion, p.TalosVersion) != nil {
		why = append(why, release.TalosPath(c.Spec.TalosVersion, p.TalosVersion).Error())
		p.TalosVersion = ""
	}
	if p.TalosVersion == "" && p.KubernetesVersion == "" {
		if len(why) == 0 {
			why = append(why, "no newer patch of the running minor")
		}
		p.Why = strings.Join(why, "; ")
	}
	return p
}

// newestPatch is the newest final version of available that is a newer
// patch of current's minor, spelled as current is (with or without "v"), or "".
func newestPatch(current string, available []string) string {
	cur, err := semver.ParseTolerant(current)
	if err != nil {
		return ""
	}
	var best *semver.Version
	for _, a := range available {
		v, err := semver.ParseTolerant(a)
		if err != nil || len(v.Pre) > 0 || len(v.Build) > 0 || v.Major != cur.Major || v.Minor != cur.Minor || !v.GT(cur) {
			continue
		}
		if best == nil || v.GT(*best) {
			best = &v
		}
	}
	if best == nil {
		return ""
	}
	if strings.HasPrefix(current, "v") {
		return "v" + best.String()
	}
	return best.String()
}
