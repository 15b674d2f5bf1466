package adopt_test

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// staticHost is a document a person added to a node with talosctl patch
// machineconfig: class A, stored as a patch.
const staticHost = "---\napiVersion: v1alpha1\nkind: StaticHostConfig\nname: 10.5.0.9\nhostnames:\n  - registry.lan\n"

// TestObjectsHeldWithPatches: the write phase's resources for a flannel
// cluster kept unmanaged, whose worker carries a document of its own: the
// TalosCluster carries the adoption annotation, each TalosMachine the
// adoption's hold, its identity and approval, and the worker's document is a
// machine-layer patch, so that the render with it has no class A or C drift
// from the live configuration (CheckLive, the release's check); without the
// patch the document is class A drift again.
func TestObjectsHeldWithPatches(t *testing.T) {
	c := gen(t, cniFlannel)
	ms := c.machines()
	ms[1].Config = append(append([]byte{}, ms[1].Config...), staticHost...)

	p, err := adopt.Build(ms, adopt.Options{Bundle: c.bundle, CNIUnmanaged: true})
	if err != nil {
		t.Fatal(err)
	}

	objs, err := p.Objects("ns")
	if err != nil {
		t.Fatal(err)
	}

	cl := objs.Cluster
	if cl.Namespace != "ns" || cl.Annotations[ichorv1alpha1.AdoptedAnnotation] == "" || cl.Spec.CNI.Preset != ichorv1alpha1.CNIPresetUnmanaged {
		t.Errorf("cluster: %+v %+v", cl.ObjectMeta, cl.Spec.CNI)
	}

	if len(objs.Machines) != 2 || len(objs.Skipped) != 0 {
		t.Fatalf("machines %d, skipped %v", len(objs.Machines), objs.Skipped)
	}

	for i, m := range objs.Machines {
		if m.Annotations[ichorv1alpha1.HoldApplyAnnotation] != adopt.HoldValue || m.Spec.Identity.UUID != ms[i].UUID ||
			m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved || m.Spec.Address != ms[i].Address || m.Namespace != "ns" {
			t.Errorf("machine %d: %+v %+v", i, m.ObjectMeta, m.Spec)
		}
	}

	if len(objs.Patches) != 1 {
		t.Fatalf("patches: %d, want 1 (the worker's StaticHostConfig)", len(objs.Patches))
	}

	pt := objs.Patches[0]
	if pt.Spec.Layer != ichorv1alpha1.LayerMachine || pt.Spec.Target.MachineName != objs.Machines[1].Name || len(pt.Spec.Documents) != 1 ||
		pt.Spec.Documents[0].StaticHostConfig == nil {
		t.Fatalf("patch: %+v", pt.Spec)
	}

	check := func(patches []ichorv1alpha1.TalosConfigPatch) []adopt.Drift {
		t.Helper()

		res, err := render.Render(render.Input{Cluster: cl, Machine: objs.Machines[1], Bundle: c.bundle, Patches: patches})
		if err != nil {
			t.Fatal(err)
		}

		d, err := adopt.CheckLive(res, ms[1].Config)
		if err != nil {
			t.Fatal(err)
		}

		return d
	}

	if d := adopt.Unsettled(check([]ichorv1alpha1.TalosConfigPatch{*pt})); len(d) != 0 {
		t.Errorf("with the patch, the live check finds unsettled drift: %+v", d)
	}

	d := adopt.Unsettled(check(nil))
	if len(d) == 0 || !strings.HasPrefix(d[0].Path, "StaticHostConfig/10.5.0.9:") || d[0].Class != adopt.ClassRepresentable {
		t.Errorf("without the patch, the live check does not find the document: %+v", d)
	}
}

// TestObjectsBlocked: a blocked control plane refuses the write (a cluster
// is adopted whole); a blocked worker is left out and named.
func TestObjectsBlocked(t *testing.T) {
	c := gen(t, cniFlannel)

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: gen(t, cniFlannel).bundle, CNIUnmanaged: true})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := p.Objects("ns"); err == nil || !strings.Contains(err.Error(), "control plane(s) [10.5.0.2] are blocked") {
		t.Errorf("another bundle (every machine blocked): %v", err)
	}

	// The worker alone is blocked: a v1alpha1 value no patch may carry.
	ms := c.machines()
	ms[1].Config = []byte(strings.Replace(string(ms[1].Config), "machine:\n", "machine:\n    sysctls:\n        net.core.somaxconn: \"65535\"\n", 1))

	if p, err = adopt.Build(ms, adopt.Options{Bundle: c.bundle, CNIUnmanaged: true}); err != nil {
		t.Fatal(err)
	}

	objs, err := p.Objects("ns")
	if err != nil {
		t.Fatal(err)
	}

	if len(objs.Machines) != 1 || objs.Machines[0].Spec.Address != "10.5.0.2" || len(objs.Skipped) != 1 || objs.Skipped[0] != "10.5.0.3" {
		t.Errorf("machines %d, skipped %v", len(objs.Machines), objs.Skipped)
	}

	refused, err := adopt.Build(ms, adopt.Options{Bundle: c.bundle}) // flannel without --cni-unmanaged
	if err != nil {
		t.Fatal(err)
	}

	if _, err := refused.Objects("ns"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a refused plan: %v", err)
	}
}

// TestPlanAddition: a configured worker of an adopted cluster that no
// TalosMachine stands for is planned held, its own document as its patch; a
// machine configured for another cluster is refused by name.
func TestPlanAddition(t *testing.T) {
	c := gen(t, cniFlannel)

	p, err := adopt.Build(c.machines(), adopt.Options{Bundle: c.bundle, CNIUnmanaged: true})
	if err != nil {
		t.Fatal(err)
	}

	objs, err := p.Objects("ns")
	if err != nil {
		t.Fatal(err)
	}

	cl := objs.Cluster
	load := func(tm *ichorv1alpha1.TalosMachine) (render.Input, error) {
		if tm.Namespace != "ns" || tm.Spec.ClusterName != cl.Name {
			t.Errorf("load of %s/%s of cluster %s", tm.Namespace, tm.Name, tm.Spec.ClusterName)
		}

		return render.Input{Cluster: cl}, nil
	}

	late := adopt.Machine{Address: "10.5.0.4", Hostname: "w-2", UUID: "u-3", TalosVersion: "v1.14.1", Config: append(append([]byte{}, c.w...), staticHost...)}

	a, err := adopt.PlanAddition(cl, c.bundle, late, load)
	if err != nil {
		t.Fatal(err)
	}

	if a.Blocked || a.Objects == nil || len(a.Objects.Machines) != 1 || len(a.Objects.Patches) != 1 {
		t.Fatalf("addition: blocked %t, drift %+v", a.Blocked, a.Drift)
	}

	m := a.Objects.Machines[0]
	if m.Name != "w-2" || m.Spec.Identity.UUID != "u-3" || m.Spec.Role != ichorv1alpha1.RoleWorker ||
		m.Annotations[ichorv1alpha1.HoldApplyAnnotation] != adopt.HoldValue || a.Objects.Patches[0].Spec.Target.MachineName != "w-2" {
		t.Errorf("machine %+v %+v, patch %+v", m.ObjectMeta, m.Spec, a.Objects.Patches[0].Spec)
	}

	other := gen(t, cniFlannel)
	late.Config = other.w

	if _, err := adopt.PlanAddition(cl, c.bundle, late, load); err == nil || !strings.Contains(err.Error(), "configured for another cluster than theirs") {
		t.Errorf("a machine of another cluster: %v", err)
	}
}
