package guard

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/authn"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/kubeupgrade"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// The ways out of a refused version, without a command to list the versions
// (release.TalosPath and release.KubernetesSkew name the rule they break).
const (
	wayOutTalosPath      = "choose a newer Talos version that Talos upgrades to from the running one (the rule above says what it requires)"
	wayOutKubernetesSkew = "choose a newer Kubernetes version at most one minor up that the cluster's Talos supports"
)

// ValidControlPlaneCounts are the control-plane counts a cluster may declare.
var ValidControlPlaneCounts = []int32{1, 3, 5}

// ClusterFacts is what a cluster check needs to know beyond the object itself.
type ClusterFacts struct {
	// ApprovedControlPlanes is the number of approved control-plane TalosMachines of the cluster.
	ApprovedControlPlanes int
	// ApprovedWorkers is the number of approved worker TalosMachines of the cluster.
	ApprovedWorkers int
	// UnfinishedCNI names the cluster's unfinished cni and kube-proxy
	// operations (a kube-proxy switch waits for them).
	UnfinishedCNI []string
	// UIURL is the ichor-ui URL the IchorInstallation records ("" when
	// Ichor's users are off), read for spec.authentication.ichorUsers.
	UIURL string
}

// CheckControlPlaneCountLowered refuses, overridably, lowering the declared
// control-plane count below the control planes already approved: the count
// is the floor that keeps a control plane's removal from shrinking etcd, so
// lowering it under the members that exist is what a removal below quorum
// would start with.
func CheckControlPlaneCountLowered(old, count int32, approvedControlPlanes int) *Refusal {
	if count >= old || int(count) >= approvedControlPlanes {
		return nil
	}
	return &Refusal{
		Field: "spec.controlPlane.count",
		Rule: fmt.Sprintf("lowering the control-plane count from %d to %d leaves %d approved control planes above it: "+
			"the count is the floor that keeps their removal from shrinking etcd", old, count, approvedControlPlanes),
		WayOut: fmt.Sprintf("keep spec.controlPlane.count: %d, or hold the `override` verb on the cluster (the override is recorded), "+
			"then remove the extra control planes one at a time with `ichor node remove NAME`", old),
		Overridable: true,
	}
}

// CheckControlPlaneCount refuses a control-plane count other than 1, 3 or 5.
func CheckControlPlaneCount(count int32) *Refusal {
	if slices.Contains(ValidControlPlaneCounts, count) {
		return nil
	}
	return &Refusal{
		Field: "spec.controlPlane.count",
		Rule: fmt.Sprintf("the control-plane count must be 1, 3 or 5, not %d: two etcd members need both up, "+
			"four tolerate no more failures than three (an even count exists only transiently while machines are replaced)", count),
		WayOut: "set spec.controlPlane.count to 1, 3 or 5",
	}
}

// CheckSchedulable refuses making control planes unschedulable on a cluster with no worker.
func CheckSchedulable(schedulable *bool, approvedWorkers int) *Refusal {
	if schedulable == nil || *schedulable || approvedWorkers > 0 {
		return nil
	}
	return &Refusal{
		Field:  "spec.controlPlane.schedulable",
		Rule:   "control planes cannot be made unschedulable while the cluster has no approved worker: nothing could run workloads",
		WayOut: "approve a worker first, or keep spec.controlPlane.schedulable: true",
	}
}

// ValidateCluster checks a TalosCluster being created (old nil) or updated.
func ValidateCluster(old, c *ichorv1alpha1.TalosCluster, facts ClusterFacts) []Refusal {
	var out []Refusal
	add := func(r *Refusal) {
		if r != nil {
			out = append(out, *r)
		}
	}
	add(CheckControlPlaneCount(c.Spec.ControlPlane.Count))
	if old != nil {
		add(CheckControlPlaneCountLowered(old.Spec.ControlPlane.Count, c.Spec.ControlPlane.Count, facts.ApprovedControlPlanes))
		add(CheckClusterDowntime(old, c, ApprovedCounts{ControlPlanes: facts.ApprovedControlPlanes, Workers: facts.ApprovedWorkers}))
	}
	// Only a change is refused: `ichor init --preset standard` (or large)
	// creates the cluster tainted before any machine exists, workers to come
	// (architecture, "Presets"); nothing runs on it yet to be left without a node.
	if old != nil && boolValue(old.Spec.ControlPlane.Schedulable) != boolValue(c.Spec.ControlPlane.Schedulable) {
		add(CheckSchedulable(c.Spec.ControlPlane.Schedulable, facts.ApprovedWorkers))
	}
	out = append(out, checkCNI(old, c, facts)...)
	out = append(out, checkVersions(old, c)...)
	out = append(out, checkDiscovery(old, c)...)
	if reason := c.Annotations[ichorv1alpha1.PausedReasonAnnotation]; old == nil || old.Annotations[ichorv1alpha1.PausedReasonAnnotation] != reason {
		out = append(out, PauseReason(reason)...)
	}
	if c.Spec.CNI.Cilium != nil {
		out = append(out, CheckCiliumValues(c.Spec.CNI.Cilium.Values)...)
	}
	if old == nil || !reflect.DeepEqual(old.Spec.Authentication, c.Spec.Authentication) || old.Spec.VersionContract != c.Spec.VersionContract {
		add(CheckAuthentication(c))
		if c.Spec.Authentication.IchorUsers && (old == nil || !old.Spec.Authentication.IchorUsers) && facts.UIURL == "" {
			add(&Refusal{
				Field:  "spec.authentication.ichorUsers",
				Rule:   "Ichor's users are off: no ichor-ui URL is recorded on the IchorInstallation, so there is no issuer for the kube-apiserver to trust",
				WayOut: "turn Ichor's users on with an https URL for ichor-ui (`ichor init --ui-url URL`, or the installer's --ui-url), then set ichorUsers",
			})
		}
	}
	return out
}

// CheckAuthentication refuses a spec.authentication the render could not
// carry: one under a version contract without Talos's
// KubeAuthenticationConfig document (before v1.14), or one the
// kube-apiserver would refuse (authn.Configuration validates it as the
// kube-apiserver does; Talos does not validate it).
func CheckAuthentication(c *ichorv1alpha1.TalosCluster) *Refusal {
	if !authn.Enabled(c.Spec.Authentication) {
		return nil
	}
	if vc, err := bundle.Contract(c.Spec.VersionContract); err == nil && !vc.MultidocKubernetesConfigSupported() {
		return &Refusal{
			Field:  "spec.authentication",
			Rule:   "the kube-apiserver's authentication configuration needs Talos's KubeAuthenticationConfig document, which version contract " + c.Spec.VersionContract + " does not have",
			WayOut: "move the cluster to version contract v1.14 or later first, or leave spec.authentication empty",
		}
	}
	// ichor-ui's issuer is checked at render time (its address is the
	// controller's to publish); its fields here are placeholders of the right form.
	placeholder := &ichorv1alpha1.IssuerStatus{URL: "https://ichor.invalid", DiscoveryURL: "https://ichor.invalid:8444/.well-known/openid-configuration"}
	if _, err := authn.Configuration(c.Spec.Authentication, placeholder); err != nil {
		return &Refusal{
			Field:  "spec.authentication.external",
			Rule:   strings.TrimPrefix(err.Error(), "spec.authentication: "),
			WayOut: "correct the provider's fields (jwt[0] is spec.authentication.external: issuer.url is issuerURL, issuer.audiences is audiences, issuer.certificateAuthority is certificateAuthority)",
		}
	}
	return nil
}

func boolValue(b *bool) bool { return b != nil && *b }

func checkCNI(old, c *ichorv1alpha1.TalosCluster, facts ClusterFacts) []Refusal {
	var out []Refusal
	cni := c.Spec.CNI
	// A preset Ichor does not manage is refused on a write that sets it. A
	// cluster stored with one before (cni.Unsupported, the CNIUnsupported
	// condition) keeps passing the writes that leave it alone: its way out,
	// the allow-delete annotation and the deletion, must stay open.
	if (old == nil || old.Spec.CNI.Preset != cni.Preset) && cni.Preset != ichorv1alpha1.CNIPresetCilium && cni.Preset != ichorv1alpha1.CNIPresetUnmanaged {
		out = append(out, Refusal{
			Field:  fieldCNIPreset,
			Rule:   fmt.Sprintf("Cilium is the only CNI Ichor manages; preset %q is not supported", cni.Preset),
			WayOut: "set spec.cni.preset: cilium",
		})
	}
	out = append(out, checkBootstrapChart(old, c)...)
	if old == nil {
		if cni.Preset == ichorv1alpha1.CNIPresetUnmanaged && c.Annotations[ichorv1alpha1.AdoptedAnnotation] == "" {
			out = append(out, Refusal{
				Field:  fieldCNIPreset,
				Rule:   "the unmanaged preset exists only for adopted clusters",
				WayOut: "use spec.cni.preset: cilium (this release adopts no running cluster; the annotation " + ichorv1alpha1.AdoptedAnnotation + " marks one that was adopted)",
			})
		}
		return out
	}
	ocni := old.Spec.CNI
	if ocni.Preset != cni.Preset {
		out = append(out, Refusal{
			Field:  fieldCNIPreset,
			Rule:   fmt.Sprintf("the CNI preset is immutable (%q to %q)", ocni.Preset, cni.Preset),
			WayOut: "moving between managed and unmanaged means a new cluster; keep spec.cni.preset: " + ocni.Preset,
		})
	}
	if ocni.Tunnel != "" && ocni.Tunnel != cni.Tunnel {
		out = append(out, Refusal{
			Field:  "spec.cni.tunnel",
			Rule:   fmt.Sprintf("the tunnel protocol is immutable once set (%q to %q)", ocni.Tunnel, cni.Tunnel),
			WayOut: "keep spec.cni.tunnel: " + ocni.Tunnel,
		})
	}
	out = append(out, checkKubeProxyWrite(old, c, facts)...)
	if len(old.Spec.Network.PodSubnets) > 0 && !slices.Equal(old.Spec.Network.PodSubnets, c.Spec.Network.PodSubnets) {
		out = append(out, Refusal{
			Field:  "spec.network.podSubnets",
			Rule:   "the pod subnets are fixed once set",
			WayOut: "keep " + strings.Join(old.Spec.Network.PodSubnets, ",") + "; a new subnet means a new cluster",
		})
	}
	if len(old.Spec.Network.ServiceSubnets) > 0 && !slices.Equal(old.Spec.Network.ServiceSubnets, c.Spec.Network.ServiceSubnets) {
		out = append(out, Refusal{
			Field:  "spec.network.serviceSubnets",
			Rule:   "the service subnets are fixed once set",
			WayOut: "keep " + strings.Join(old.Spec.Network.ServiceSubnets, ",") + "; a new subnet means a new cluster",
		})
	}
	return out
}

func checkVersions(old, c *ichorv1alpha1.TalosCluster) []Refusal {
	var out []Refusal
	talos, kube := c.Spec.TalosVersion, c.Spec.KubernetesVersion
	talosChanged := old == nil || old.Spec.TalosVersion != talos
	kubeChanged := old == nil || old.Spec.KubernetesVersion != kube
	if old != nil && talosChanged {
		if err := release.TalosPath(old.Spec.TalosVersion, talos); err != nil {
			out = append(out, Refusal{
				Field:  "spec.talosVersion",
				Rule:   err.Error(),
				WayOut: wayOutTalosPath + "; a downgrade is never admitted",
			})
		}
	}
	if old != nil && kubeChanged {
		// From what the machines run: while a Kubernetes upgrade goes on the
		// spec is already ahead of them (status.kubernetesUpgrade.version).
		if err := release.KubernetesSkew(kubeupgrade.Running(old), kube); err != nil {
			out = append(out, Refusal{
				Field:  "spec.kubernetesVersion",
				Rule:   err.Error(),
				WayOut: wayOutKubernetesSkew + "; a downgrade is never admitted",
			})
		}
	}
	if talosChanged || kubeChanged {
		if err := release.CheckPair(talos, kube); err != nil {
			r := Refusal{
				Field:  "spec.kubernetesVersion",
				Rule:   err.Error(),
				WayOut: "choose a pair the compatibility table supports",
			}
			if errors.Is(err, release.ErrIncompatiblePair) {
				r.Overridable = true
				r.WayOut += ", or hold the `override` verb on the cluster (the override is recorded)"
			}
			out = append(out, r)
		}
	}
	if kubeChanged {
		// The Cilium the cluster runs is in the stored status (a create has
		// none: the Cilium Ichor installs then).
		probe := c
		if old != nil {
			probe = c.DeepCopy()
			probe.Status.CNI = old.Status.CNI
		}
		if r := CheckCiliumPair(probe, "spec.kubernetesVersion", kube); r != nil {
			out = append(out, *r)
		}
	}
	if old == nil || old.Spec.VersionContract != c.Spec.VersionContract || talosChanged {
		if err := release.CheckContract(c.Spec.VersionContract, talos); err != nil {
			out = append(out, Refusal{
				Field:  "spec.versionContract",
				Rule:   err.Error(),
				WayOut: "set a contract no newer than spec.talosVersion's minor (for Talos " + talos + ", at most its vMAJOR.MINOR)",
			})
		}
	}
	return out
}

// ClusterRequirements returns the permissions a create (old nil) or update of
// a TalosCluster needs beyond `create`/`update` on talosclusters.
func ClusterRequirements(old, c *ichorv1alpha1.TalosCluster) []Requirement {
	var out []Requirement
	if old == nil || old.Spec.SecretsBundleRef != c.Spec.SecretsBundleRef {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbUpdate, Resource: ResourceTalosClusters, Subresource: SubresourceSecretReferences, Namespace: c.Namespace, Name: c.Name},
			Field:      "spec.secretsBundleRef",
			Action:     actionSecretRef,
		})
	}
	if c.Annotations[ichorv1alpha1.TeardownResetMachinesAnnotation] == "true" &&
		(old == nil || old.Annotations[ichorv1alpha1.TeardownResetMachinesAnnotation] != "true") {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbResetNode, Resource: ResourceTalosOperations, Namespace: c.Namespace},
			Field:      "metadata.annotations[" + ichorv1alpha1.TeardownResetMachinesAnnotation + "]",
			Action:     "asking the teardown to reset every machine of the cluster",
		})
	}
	if old == nil && authn.Enabled(c.Spec.Authentication) || old != nil && !reflect.DeepEqual(old.Spec.Authentication, c.Spec.Authentication) {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbUpdate, Resource: ResourceTalosClusters, Subresource: SubresourceAuthentication, Namespace: c.Namespace, Name: c.Name},
			Field:      "spec.authentication",
			Action:     "changing whom the kube-apiserver accepts tokens from (an issuer names users and groups that RBAC trusts)",
		})
	}
	if !reflect.DeepEqual(ciliumValues(old), ciliumValues(c)) {
		out = append(out, Requirement{
			Permission: Permission{Verb: VerbUpdate, Resource: ResourceTalosClusters, Subresource: SubresourceCiliumValues, Namespace: c.Namespace, Name: c.Name},
			Field:      fieldCiliumValues,
			Action:     "changing Cilium's values (the chart can run privileged pods on every node)",
		})
	}
	return out
}

func ciliumValues(c *ichorv1alpha1.TalosCluster) map[string]any {
	if c == nil || c.Spec.CNI.Cilium == nil || c.Spec.CNI.Cilium.Values == nil || len(c.Spec.CNI.Cilium.Values.Raw) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(c.Spec.CNI.Cilium.Values.Raw, &m); err != nil {
		return map[string]any{"<unparseable>": string(c.Spec.CNI.Cilium.Values.Raw)}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// CheckCiliumValues refuses a user layer of Cilium values that is not a map
// or that sets an Ichor-owned key (including any *.secretsNamespace.name,
// pinned to cilium-secrets). The rule is ciliumvalues.Validate, the one
// check the webhook, the UI backend and the controller share.
func CheckCiliumValues(values *runtime.RawExtension) []Refusal {
	if values == nil {
		return nil
	}
	err := ciliumvalues.ValidateRaw(values.Raw)
	if err == nil {
		return nil
	}
	var owned *ciliumvalues.OwnedKeyError
	if errors.As(err, &owned) {
		return []Refusal{{
			Field:  fieldCiliumValues,
			Rule:   "the user layer may not set Ichor-owned keys: " + joinQuoted(owned.Keys),
			WayOut: "remove these keys; Ichor sets them (use spec.cni.kubeProxy and spec.cni.tunnel for the choices it offers)",
		}}
	}
	return []Refusal{{
		Field:  fieldCiliumValues,
		Rule:   err.Error(),
		WayOut: "write the values as a map of Helm values",
	}}
}

// ValidateClusterDelete refuses deleting a TalosCluster without the allow-delete annotation.
func ValidateClusterDelete(c *ichorv1alpha1.TalosCluster) []Refusal {
	if r := checkAllowDelete("TalosCluster", c.Annotations); r != nil {
		return []Refusal{*r}
	}
	return nil
}

func checkAllowDelete(kind string, annotations map[string]string) *Refusal {
	if annotations[ichorv1alpha1.AllowDeleteAnnotation] == annotationTrue {
		return nil
	}
	return &Refusal{
		Field:  "metadata.annotations[" + ichorv1alpha1.AllowDeleteAnnotation + "]",
		Rule:   "a " + kind + " is protected against deletion, so that a prune by other tooling cannot cascade into node resets",
		WayOut: "set the annotation " + ichorv1alpha1.AllowDeleteAnnotation + `: "true" first, then delete`,
	}
}

// FinalizerRequirements returns the override requirement for removing an
// Ichor finalizer (one with the ichor.maesh.dev/ prefix) from an object of the
// cluster clusterName in namespace.
func FinalizerRequirements(namespace, clusterName string, old, updated []string) []Requirement {
	var removed []string
	for _, f := range old {
		if strings.HasPrefix(f, ichorv1alpha1.FinalizerPrefix) && !slices.Contains(updated, f) {
			removed = append(removed, f)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	return []Requirement{{
		Permission: OverrideOn(namespace, clusterName),
		Field:      "metadata.finalizers",
		Action:     "removing the Ichor finalizer " + joinQuoted(removed) + " (it orphans whatever the removal sequence left half-done)",
	}}
}

// MaxPauseReason is the longest reason a pause may record (the
// ichor.maesh.dev/paused-reason annotation).
const MaxPauseReason = 512

// PauseReason refuses a pause reason that is too long to record.
func PauseReason(reason string) []Refusal {
	if n := len([]rune(reason)); n > MaxPauseReason {
		return []Refusal{{
			Field:  "metadata.annotations[" + ichorv1alpha1.PausedReasonAnnotation + "]",
			Rule:   fmt.Sprintf("the pause reason is %d characters long; it may be at most %d", n, MaxPauseReason),
			WayOut: "say it in fewer words (link to a ticket for the details)",
		}}
	}
	return nil
}
