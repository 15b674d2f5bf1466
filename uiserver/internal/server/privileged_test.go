package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// TestPrivilegedPatchShownByTheConsoleAPI: the effective configuration marks
// privileged values, and the rollout plan names the cluster's privileged
// patches (whose rollout needs `update` on talosconfigpatches/privileged),
// from the same table as the webhook and the CLI; plain ones are not marked.
func TestPrivilegedPatchShownByTheConsoleAPI(t *testing.T) {
	ctx := context.Background()
	createMachine(t, "priv-w1", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	resp, err := machines(t, viewer(t)).GetEffectiveConfig(ctx, &ichorv1.GetEffectiveConfigRequest{Name: "priv-w1"})
	if err != nil {
		t.Fatal(err)
	}
	var image, plain bool
	for _, e := range resp.GetEntries() {
		switch {
		case e.GetKind() == "KubeletConfig" && e.GetField() == "image":
			image = true
			if !e.GetPrivileged() {
				t.Errorf("KubeletConfig:image is not marked privileged: %v", e)
			}
		case e.GetKind() == "KubeletConfig" && e.GetField() == "defaultRuntimeSeccompProfileEnabled":
			plain = true
			if e.GetPrivileged() {
				t.Errorf("KubeletConfig:defaultRuntimeSeccompProfileEnabled is marked privileged: %v", e)
			}
		}
	}
	if !image || !plain {
		t.Fatalf("the render must set the kubelet's image and a plain kubelet field: image %v, plain %v", image, plain)
	}

	preview := func() *ichorv1.PreviewConfigRolloutResponse {
		t.Helper()
		p, err := operations(t, viewer(t)).PreviewConfigRollout(ctx, &ichorv1.PreviewConfigRolloutRequest{})
		if err != nil {
			t.Fatalf("preview: %v", err)
		}
		return p
	}
	if pp := preview().GetPrivilegedPatches(); len(pp) != 0 {
		t.Fatalf("no privileged patch yet: %v", pp)
	}
	patch := func(name string, doc mirror.PatchDocument) {
		t.Helper()
		p := &ichorv1alpha1.TalosConfigPatch{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
			Spec: ichorv1alpha1.TalosConfigPatchSpec{
				ClusterName: testCluster, Layer: ichorv1alpha1.LayerRole,
				Target:    ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleWorker},
				Documents: []mirror.PatchDocument{doc},
			},
		}
		if err := admin.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.IgnoreNotFound(admin.Delete(context.Background(), p)) })
	}
	patch("priv-tuning", mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}})
	patch("priv-roots", mirror.PatchDocument{TrustedRootsConfig: &mirror.TrustedRootsConfig{Name: "corp"}})

	deadline := time.Now().Add(30 * time.Second)
	for {
		pp := preview().GetPrivilegedPatches()
		if len(pp) == 1 && pp[0].GetName() == "priv-roots" && strings.Join(pp[0].GetPaths(), ",") == "TrustedRootsConfig" {
			break
		}
		if len(pp) > 1 || time.Now().After(deadline) {
			t.Fatalf("the plan must name priv-roots (TrustedRootsConfig) alone: %v", pp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
