package guard

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func TestPlanAutoPatch(t *testing.T) {
	settled := func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.AutoPatch.Enabled = true
		c.Spec.TalosVersion, c.Spec.KubernetesVersion = "v1.14.0", "1.37.0"
		c.Status.TalosUpgrade.Version, c.Status.KubernetesUpgrade.Version = "v1.14.0", "1.37.0"
	}
	talos := []string{"v1.13.9", "v1.14.0", "v1.14.1", "v1.14.3-beta.0", "v1.15.0", "garbage"}
	kube := []string{"1.36.9", "1.37.2", "v1.37.1", "1.38.0"}
	for _, tc := range []struct {
		name         string
		mutate       func(*ichorv1alpha1.TalosCluster)
		talos, kube  string
		why          string
		talosOffered []string
	}{
		{name: "both", mutate: func(*ichorv1alpha1.TalosCluster) {}, talos: "v1.14.1", kube: "1.37.2"},
		{name: "off", mutate: func(c *ichorv1alpha1.TalosCluster) { c.Spec.AutoPatch.Enabled = false }, why: "off"},
		{name: "paused", mutate: func(c *ichorv1alpha1.TalosCluster) { c.Spec.Paused = true }, why: "paused"},
		{name: "deleting", mutate: func(c *ichorv1alpha1.TalosCluster) { c.DeletionTimestamp = &metav1.Time{} }, why: "deleted"},
		{name: "talos in flight", mutate: func(c *ichorv1alpha1.TalosCluster) { c.Status.TalosUpgrade.Version = "v1.13.9" }, kube: "1.37.2"},
		{name: "a schematic in flight", mutate: func(c *ichorv1alpha1.TalosCluster) { c.Spec.Schematic = "abc" }, kube: "1.37.2"},
		// The kubernetesupgrade reconciler records the version without "v" (kubeupgrade.Normalize).
		{name: "kubernetes spelt with v", mutate: func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "v1.37.0" }, talos: "v1.14.1", kube: "v1.37.2"},
		{name: "both in flight", mutate: func(c *ichorv1alpha1.TalosCluster) {
			c.Status.TalosUpgrade.Version, c.Status.KubernetesUpgrade.Version = "", "1.36.9"
		}, why: "has not completed"},
		{name: "newest already", mutate: func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.TalosVersion, c.Status.TalosUpgrade.Version = "v1.14.1", "v1.14.1"
			c.Spec.KubernetesVersion, c.Status.KubernetesUpgrade.Version = "1.37.2", "1.37.2"
		}, why: "no newer patch"},
		{name: "only a pre-release and next minor", mutate: func(*ichorv1alpha1.TalosCluster) {}, talosOffered: []string{"v1.14.3-beta.0", "v1.15.0"}, kube: "1.37.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(settled, tc.mutate)
			offered := talos
			if tc.talosOffered != nil {
				offered = tc.talosOffered
			}
			p := PlanAutoPatch(c, offered, kube)
			if p.TalosVersion != tc.talos || p.KubernetesVersion != tc.kube || !strings.Contains(p.Why, tc.why) {
				t.Fatalf("got %+v, want talos %q kubernetes %q why %q", p, tc.talos, tc.kube, tc.why)
			}
			if p.TalosVersion == "" && p.KubernetesVersion == "" {
				return
			}
			// Every plan is a write the webhook lets the auto-patch ServiceAccount make.
			next := c.DeepCopy()
			if p.TalosVersion != "" {
				next.Spec.TalosVersion = p.TalosVersion
			}
			if p.KubernetesVersion != "" {
				next.Spec.KubernetesVersion = p.KubernetesVersion
			}
			expect(t, CheckAutoPatch(c, next), nil)
		})
	}
}

func TestCheckAutoPatchMetadataAndVerbs(t *testing.T) {
	old := cluster()
	expect(t, CheckAutoPatchMetadata(old, cluster()), nil)
	expect(t, CheckAutoPatchMetadata(old, cluster(func(c *ichorv1alpha1.TalosCluster) { c.Annotations = map[string]string{} })), nil)
	expect(t, CheckAutoPatchMetadata(old, cluster(func(c *ichorv1alpha1.TalosCluster) {
		c.Annotations = map[string]string{ichorv1alpha1.PausedReasonAnnotation: "x"}
	})), map[string][]string{"metadata": {"annotations"}})
	expect(t, CheckAutoPatchMetadata(old, cluster(func(c *ichorv1alpha1.TalosCluster) { c.Finalizers = []string{"x"} })),
		map[string][]string{"metadata": {"finalizers"}})
	expect(t, CheckAutoPatchVerb("delete"), map[string][]string{"spec": {"may not delete"}})
	expect(t, CheckControllerWrite(old, cluster()), nil)
	expect(t, CheckControllerWrite(old, cluster(func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.2" })),
		map[string][]string{"spec": {"never writes", AutoPatchServiceAccount}})
	if ControllerUsername("ichor-system") != "system:serviceaccount:ichor-system:ichor-controller" {
		t.Error(ControllerUsername("ichor-system"))
	}
}
