package plan_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// TestPreview: a patch edit is rendered on every machine it targets, before
// and after, and each gets its changed paths and apply mode; machines it
// does not target, pending machines and other clusters' are left out; a
// document machinery refuses is reported on the machine.
func TestPreview(t *testing.T) {
	t.Parallel()

	b, err := bundle.Generate(secrets.NewFixedClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"},
		Spec: ichorv1alpha1.TalosClusterSpec{
			VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:     ichorv1alpha1.ClusterEndpoint{Host: "10.0.0.10"},
			ControlPlane: ichorv1alpha1.ControlPlaneTopology{Count: 1},
			CNI:          ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium},
		},
	}
	machine := func(name, cluster, role string, labels map[string]string) ichorv1alpha1.TalosMachine {
		return ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels},
			Spec:       ichorv1alpha1.TalosMachineSpec{ClusterName: cluster, Role: role},
		}
	}
	machines := []ichorv1alpha1.TalosMachine{
		machine("w-2", "prod", ichorv1alpha1.RoleWorker, nil),
		machine("cp-1", "prod", ichorv1alpha1.RoleControlPlane, nil),
		machine("w-1", "prod", ichorv1alpha1.RoleWorker, map[string]string{"zone": "a"}),
		machine("pending", "prod", "", nil),
		machine("other", "staging", ichorv1alpha1.RoleWorker, nil),
	}
	patch := func(name, layer string, target ichorv1alpha1.PatchTarget, docs ...mirror.PatchDocument) *ichorv1alpha1.TalosConfigPatch {
		return &ichorv1alpha1.TalosConfigPatch{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       ichorv1alpha1.TalosConfigPatchSpec{ClusterName: "prod", Layer: layer, Target: target, Documents: docs},
		}
	}
	sysctl := mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "10"}}}
	existing := patch("tuning", ichorv1alpha1.LayerCluster, ichorv1alpha1.PatchTarget{}, sysctl)
	base := render.Input{Cluster: c, Bundle: b, Patches: []ichorv1alpha1.TalosConfigPatch{*existing}}

	type row struct{ machine, mode, paths string }
	rows := func(imp plan.Impact) []row {
		out := make([]row, 0, len(imp.Machines))
		for _, m := range imp.Machines {
			var paths []string
			for _, ch := range m.Changes {
				paths = append(paths, string(ch.Op)+" "+ch.Path.String())
			}
			mode := m.Mode
			if m.WaitsForRollout {
				mode += " (rollout)"
			}
			if len(m.Errors) > 0 {
				mode = "error: " + strings.Join(m.Errors, "; ")
			}
			out = append(out, row{m.Machine, mode, strings.Join(paths, ", ")})
		}
		return out
	}

	for _, tc := range []struct {
		name string
		edit plan.PatchEdit
		want []row
	}{
		{
			"create cluster layer", plan.PatchEdit{New: patch("net", ichorv1alpha1.LayerCluster, ichorv1alpha1.PatchTarget{},
				mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"net.core.somaxconn": "1024"}}})},
			[]row{
				{"cp-1", plan.ModeNoReboot, `added SysctlConfig:params["net.core.somaxconn"]`},
				{"w-1", plan.ModeNoReboot, `added SysctlConfig:params["net.core.somaxconn"]`},
				{"w-2", plan.ModeNoReboot, `added SysctlConfig:params["net.core.somaxconn"]`},
			},
		},
		{
			"selector layer", plan.PatchEdit{New: patch("zone-a", ichorv1alpha1.LayerSelector,
				ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}},
				mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"vm.swappiness": "20"}}})},
			[]row{{"w-1", plan.ModeNoReboot, `changed SysctlConfig:params["vm.swappiness"]`}},
		},
		{
			"apiserver restart waits on the control plane", plan.PatchEdit{New: patch("api", ichorv1alpha1.LayerRole,
				ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane},
				mirror.PatchDocument{KubeAPIServerConfig: &mirror.KubeAPIServerConfig{Env: map[string]string{"GOGC": "50"}}})},
			[]row{{"cp-1", plan.ModeAPIServerRestart + " (rollout)", "added KubeAPIServerConfig:env.GOGC"}},
		},
		{
			"delete", plan.PatchEdit{Old: existing},
			[]row{
				{"cp-1", plan.ModeNoReboot, `removed SysctlConfig:params["vm.swappiness"]`},
				{"w-1", plan.ModeNoReboot, `removed SysctlConfig:params["vm.swappiness"]`},
				{"w-2", plan.ModeNoReboot, `removed SysctlConfig:params["vm.swappiness"]`},
			},
		},
		{
			"edit to the same values", plan.PatchEdit{Old: existing, New: existing},
			[]row{{"cp-1", plan.ModeNone, ""}, {"w-1", plan.ModeNone, ""}, {"w-2", plan.ModeNone, ""}},
		},
	} {
		imp, err := plan.Preview(plan.PreviewInput{Base: base, Machines: machines, Edit: tc.edit})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := rows(imp); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
		if !imp.Valid() {
			t.Errorf("%s: not valid: %+v", tc.name, imp)
		}
	}

	// A VLAN without its parent link: machinery's validation refuses it,
	// naming the field, on the machine it targets.
	bad := patch("vlan", ichorv1alpha1.LayerMachine, ichorv1alpha1.PatchTarget{MachineName: "w-2"},
		mirror.PatchDocument{VLANConfig: &mirror.VLANConfig{Name: "eth0.10", VlanID: 10}})
	imp, err := plan.Preview(plan.PreviewInput{Base: base, Machines: machines, Edit: plan.PatchEdit{New: bad}})
	if err != nil {
		t.Fatal(err)
	}
	if len(imp.Machines) != 1 || imp.Machines[0].Machine != "w-2" || imp.Valid() {
		t.Fatalf("the VLAN without a parent must be refused on w-2 alone: %+v", imp)
	}
	if msg := strings.Join(imp.Machines[0].Errors, "; "); !strings.Contains(msg, "parent") {
		t.Errorf("the error must name the parent field: %s", msg)
	}
	// Its allowed neighbour: with the parent it validates.
	bad.Spec.Documents[0].VLANConfig.Parent = "eth0"
	imp, err = plan.Preview(plan.PreviewInput{Base: base, Machines: machines, Edit: plan.PatchEdit{New: bad}})
	if err != nil || !imp.Valid() || imp.Machines[0].Mode != plan.ModeNoReboot {
		t.Fatalf("the VLAN with its parent must validate and apply without a reboot: %+v %v", imp, err)
	}
}
