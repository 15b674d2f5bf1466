package guard

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
)

func configPatch(docs ...mirror.PatchDocument) *ichorv1alpha1.TalosConfigPatch {
	return &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec:       ichorv1alpha1.TalosConfigPatchSpec{ClusterName: "prod", Layer: ichorv1alpha1.LayerCluster, Documents: docs},
	}
}

func TestPatchRequirements(t *testing.T) {
	t.Parallel()
	sysctl := mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}}
	kubeletDNS := mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{ClusterDNS: []string{"10.96.0.10"}}}
	kubeletImage := mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{ClusterDNS: []string{"10.96.0.10"}, Image: "evil/kubelet"}}
	inline := mirror.PatchDocument{KubeInlineManifestConfig: &mirror.KubeInlineManifestConfig{Name: "x", Manifest: "kind: ClusterRoleBinding"}}
	relabel := func(p *ichorv1alpha1.TalosConfigPatch) *ichorv1alpha1.TalosConfigPatch {
		p.Labels = map[string]string{"team": "a"}
		return p
	}
	for _, tc := range []struct {
		name     string
		old, new *ichorv1alpha1.TalosConfigPatch
		want     []string // nil: no requirement
	}{
		{"create plain", nil, configPatch(sysctl, kubeletDNS), nil},
		{"create privileged", nil, configPatch(sysctl, inline), []string{"creating", "spec.documents[1].kubeInlineManifestConfig", "KubeInlineManifestConfig: its manifests are applied"}},
		{"add a privileged field", configPatch(kubeletDNS), configPatch(kubeletImage), []string{"changing", "spec.documents[0].kubeletConfig.image", "KubeletConfig:image"}},
		{"drop a privileged document", configPatch(sysctl, inline), configPatch(sysctl), []string{"changing", "spec.documents[1].kubeInlineManifestConfig (before the change)"}},
		{"change a plain field of a privileged patch", configPatch(sysctl, inline), configPatch(kubeletDNS, inline), []string{"changing", "spec.documents[1].kubeInlineManifestConfig"}},
		{"metadata only", configPatch(inline), relabel(configPatch(inline)), nil},
		{"change a plain patch", configPatch(sysctl), configPatch(kubeletDNS), nil},
		{"delete privileged", configPatch(kubeletImage), nil, []string{"deleting", "spec.documents[0].kubeletConfig.image"}},
		{"delete plain", configPatch(sysctl), nil, nil},
	} {
		reqs := PatchRequirements(tc.old, tc.new)
		if tc.want == nil {
			if len(reqs) != 0 {
				t.Errorf("%s: %+v, want none", tc.name, reqs)
			}
			continue
		}
		if len(reqs) != 1 {
			t.Fatalf("%s: %d requirements, want 1: %+v", tc.name, len(reqs), reqs)
		}
		r := reqs[0]
		if r.Permission != (Permission{Verb: VerbUpdate, Resource: "talosconfigpatches", Subresource: "privileged", Namespace: "ns", Name: "p"}) {
			t.Errorf("%s: permission %+v", tc.name, r.Permission)
		}
		msg := r.Refusal("otto").Error()
		for _, w := range append(tc.want, "`update` on `talosconfigpatches/privileged`", `user "otto"`) {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %q does not say %q", tc.name, msg, w)
			}
		}
	}
}

func TestConfigRolloutRequirements(t *testing.T) {
	t.Parallel()
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "roll"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationConfig},
	}
	patches := []privileged.Patch{{Name: "kubelet", Paths: []string{"KubeletConfig:image"}}}
	reqs := ConfigRolloutRequirements(op, patches)
	if len(reqs) != 1 || reqs[0].Permission != PrivilegedPatchPermission("ns", "") {
		t.Fatalf("config rollout with a privileged patch: %+v", reqs)
	}
	if msg := reqs[0].Refusal("otto").Error(); !strings.Contains(msg, `kubelet (KubeletConfig:image)`) || !strings.Contains(msg, "`update` on `talosconfigpatches/privileged`") {
		t.Errorf("message %q", msg)
	}
	if reqs := ConfigRolloutRequirements(op, nil); len(reqs) != 0 {
		t.Errorf("no privileged patch: %+v", reqs)
	}
	op.Spec.Type = ichorv1alpha1.OperationKubernetes
	if reqs := ConfigRolloutRequirements(op, patches); len(reqs) != 0 {
		t.Errorf("not a config rollout: %+v", reqs)
	}
}
