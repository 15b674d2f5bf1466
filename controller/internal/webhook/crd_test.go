package webhook

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The CEL rules of the CRDs: what one object can check by itself, enforced by
// the API server before any webhook runs.
func TestCRDRulesOnMachines(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "other")))

	// An approval needs a role.
	refused(t, root.Create(ctx, newMachine(ns, "norole", "c", "", ichorv1alpha1.ApprovalApproved)), "Invalid",
		"spec.role is required to approve a machine")
	testenv.Must(t, root.Create(ctx, newMachine(ns, "m", "c", "", ichorv1alpha1.ApprovalPending)))

	// clusterName and identity are immutable.
	err := update(t, operator, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) { m.Spec.ClusterName = "other" })
	refused(t, err, "Invalid", "spec.clusterName is immutable")
	err = update(t, operator, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) { m.Spec.Identity.Serial = "forged" })
	refused(t, err, "Invalid", "spec.identity is immutable")

	// The role may change while pending, and is fixed once approved.
	testenv.Must(t, update(t, operator, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) { m.Spec.Role = ichorv1alpha1.RoleWorker }))
	testenv.Must(t, update(t, operator, newMachine(ns, "m", "", "", ""), approveBy("otto")))
	err = update(t, operator, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) { m.Spec.Role = ichorv1alpha1.RoleControlPlane })
	refused(t, err, "Invalid", "spec.role is fixed once approved")
}

func TestCRDRulesOnOperations(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))

	// Each type carries its own parameters and no other's.
	refused(t, operator.Create(ctx, newOperation(ns, "k", ichorv1alpha1.OperationKubernetes)), "Invalid",
		"spec.kubernetes is required for, and only for, type kubernetes")
	refused(t, operator.Create(ctx, newOperation(ns, "cfg", ichorv1alpha1.OperationConfig, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Talos = &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"}
	})), "Invalid", "spec.talos is required for, and only for, type talos")
	refused(t, operator.Create(ctx, newOperation(ns, "wipe", ichorv1alpha1.OperationNode, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "m", Action: ichorv1alpha1.NodeActionReboot, WipeMode: "all"}
	})), "Invalid", "spec.node.wipeMode is only for the reset action")

	op := newOperation(ns, "up", ichorv1alpha1.OperationConfig)
	testenv.Must(t, operator.Create(ctx, op))
	// The type is immutable; pausing is allowed.
	err := update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Type = ichorv1alpha1.OperationTalos
		o.Spec.Kubernetes = nil
		o.Spec.Talos = &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"}
	})
	refused(t, err, "Invalid", "spec.type and spec.clusterName are immutable")
	testenv.Must(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) { o.Spec.Paused = true }))
}

func TestCRDRulesOnClusters(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	refused(t, admin.Create(ctx, newCluster(ns, "bad-cidr", func(c *ichorv1alpha1.TalosCluster) { c.Spec.Network.PodSubnets = []string{"10.244.0.0"} })),
		"Invalid", "must be a CIDR")
	refused(t, admin.Create(ctx, newCluster(ns, "bad-version", func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "1.14" })),
		"Invalid", "spec.talosVersion")
	refused(t, admin.Create(ctx, newCluster(ns, "calico", func(c *ichorv1alpha1.TalosCluster) { c.Spec.CNI.Preset = "calico" })),
		"Invalid", "spec.cni.preset", "supported values")
	refused(t, admin.Create(ctx, newCluster(ns, "no-sched", func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = nil })),
		"Invalid", "spec.controlPlane.schedulable")
	refused(t, admin.Create(ctx, newCluster(ns, "um", func(c *ichorv1alpha1.TalosCluster) {
		c.Annotations = map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}
		c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged, Tunnel: "vxlan"}
	})), "Invalid", "spec.cni.tunnel is refused with the unmanaged preset")
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "good")))
}

// TalosConfigPatch documents hold typed fields only: a raw-YAML field, or a
// secret field of a typed document, is pruned, and refused under strict field
// validation (what Ichor's clients ask for).
func TestConfigPatchDocumentsHoldNoRawYAML(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	patch := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": ichorv1alpha1.GroupVersion.String(),
			"kind":       "TalosConfigPatch",
			"metadata":   map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{
				"clusterName": "c",
				"layer":       ichorv1alpha1.LayerCluster,
				"documents": []any{map[string]any{
					"hostnameConfig": map[string]any{"hostname": "node-1"},
					"raw":            "machine:\n  sysctls:\n    net.ipv4.ip_forward: \"1\"\n",
				}},
			},
		}}
		return u
	}
	err := operator.Create(ctx, patch("strict"), client.FieldValidation("Strict"))
	refused(t, err, "", `unknown field "spec.documents[0].raw"`)

	created := patch("lenient")
	testenv.Must(t, operator.Create(ctx, created, client.FieldValidation("Ignore")))
	got := &ichorv1alpha1.TalosConfigPatch{}
	testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(created), got))
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(ichorv1alpha1.GroupVersion.WithKind("TalosConfigPatch"))
	testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(created), stored))
	docs, _, _ := unstructured.NestedSlice(stored.Object, "spec", "documents")
	if len(docs) != 1 || docs[0].(map[string]any)["raw"] != nil ||
		got.Spec.Documents[0].HostnameConfig == nil || got.Spec.Documents[0].HostnameConfig.Hostname != "node-1" {
		t.Fatalf("the raw field must be pruned from storage and the typed document kept, got %v", docs)
	}

	// Each entry carries exactly one document.
	two := patch("two-kinds")
	_ = unstructured.SetNestedSlice(two.Object, []any{map[string]any{
		"hostnameConfig": map[string]any{"hostname": "node-1"},
		"sysctlConfig":   map[string]any{"params": map[string]any{"net.ipv4.ip_forward": "1"}},
	}}, "spec", "documents")
	refused(t, operator.Create(ctx, two), "Invalid", "spec.documents[0]")

	// The layer's target is required by a CEL rule.
	bad := patch("no-target")
	_ = unstructured.SetNestedField(bad.Object, ichorv1alpha1.LayerRole, "spec", "layer")
	refused(t, operator.Create(ctx, bad), "Invalid", "spec.target.role is required for the role layer")
}
