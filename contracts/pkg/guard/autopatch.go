package guard

import (
	"fmt"
	"reflect"

	"github.com/blang/semver/v4"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
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
