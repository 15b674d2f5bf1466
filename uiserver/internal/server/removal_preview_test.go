package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// provisionedMachine creates an approved machine of the test cluster whose
// configuration the controller has sent, so that its removal runs the whole
// sequence; it is deleted when the test ends.
func provisionedMachine(t *testing.T, name, role string) *ichorv1alpha1.TalosMachine {
	t.Helper()
	ctx := context.Background()
	m := createMachine(t, name, ichorv1alpha1.ApprovalApproved, role)
	t.Cleanup(func() {
		cur, err := getMachine(t, name)
		if err != nil {
			return
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = "true"
		_ = admin.Update(ctx, cur)
		_ = admin.Delete(ctx, cur)
	})
	now := metav1.Now()
	m.Status.Stage = ichorv1alpha1.StageRunning
	m.Status.Installed = true
	m.Status.NodeName = name
	m.Status.ConfigSentAt = &now
	m.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: now}}
	if err := admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitCached(t, name, m.ResourceVersion)
	return m
}

// approvedOf counts the test cluster's approved machines of role.
func approvedOf(t *testing.T, role string) int {
	t.Helper()
	list := &ichorv1alpha1.TalosMachineList{}
	if err := admin.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range list.Items {
		if m.Spec.ClusterName == testCluster && m.Spec.Role == role && m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// unchanged fails when the machine changed since before (a preview writes nothing).
func unchanged(t *testing.T, before *ichorv1alpha1.TalosMachine) {
	t.Helper()
	cur, err := getMachine(t, before.Name)
	if err != nil {
		t.Fatal(err)
	}
	if cur.ResourceVersion != before.ResourceVersion || cur.DeletionTimestamp != nil || cur.Spec.ForceRemove ||
		cur.Annotations[ichorv1alpha1.AllowDeleteAnnotation] != "" || cur.Annotations[ichorv1alpha1.RemoveRebootAnnotation] != "" {
		t.Fatalf("a preview changed machine %s: resourceVersion %s → %s, annotations %v, forceRemove %v",
			before.Name, before.ResourceVersion, cur.ResourceVersion, cur.Annotations, cur.Spec.ForceRemove)
	}
}

func TestPreviewRemovalOfAWorker(t *testing.T) {
	m := provisionedMachine(t, "pv-w1", ichorv1alpha1.RoleWorker)
	workers := approvedOf(t, ichorv1alpha1.RoleWorker)
	if workers < 2 {
		// The test cluster's control planes are unschedulable: with one
		// worker the last-worker guard would refuse.
		provisionedMachine(t, "pv-w2", ichorv1alpha1.RoleWorker)
		workers++
	}
	count := fmt.Sprintf("workers: %d → %d", workers, workers-1)

	// gRPC, as a viewer: a preview needs only `get` on the machine.
	resp, err := machines(t, viewer(t)).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{Name: "pv-w1"})
	if err != nil {
		t.Fatalf("viewer preview: %v", err)
	}
	if !resp.GetAllowed() || len(resp.GetRefusals()) != 0 {
		t.Fatalf("a worker among %d: allowed %v, refusals %v", workers, resp.GetAllowed(), resp.GetRefusals())
	}
	for _, want := range []string{count, "the node is drained (evictions respect PodDisruptionBudgets)",
		"Talos resets STATE and EPHEMERAL and powers off; the machine comes back as a pending machine when it is powered on",
		"Node pv-w1 is deleted from Kubernetes"} {
		if !slices.Contains(resp.GetEffects(), want) {
			t.Errorf("effects lack %q: %q", want, resp.GetEffects())
		}
	}
	phases := make([]string, 0, len(resp.GetSteps()))
	for _, s := range resp.GetSteps() {
		p, _, _ := strings.Cut(s, ":")
		phases = append(phases, p)
	}
	if want := []string{"Evacuating", "Draining", "Resetting", "DeletingNode", "Done"}; !slices.Equal(phases, want) {
		t.Errorf("steps of a worker: %q, want the phases %q", resp.GetSteps(), want)
	}

	// REST, with the options: reboot and force are re-previewed.
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/machines/pv-w1/removal-preview?reboot=true", operator(t), "")
	if code != http.StatusOK || body["allowed"] != true || !strings.Contains(toJSON(body["effects"]), "reboots into maintenance mode") ||
		!strings.Contains(toJSON(body["effects"]), count) {
		t.Fatalf("REST preview with reboot: %d %v", code, body)
	}
	code, body = rest(t, httpClient(), http.MethodGet, "/api/v1/machines/pv-w1/removal-preview?reboot=true&force=true", operator(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body["effects"]), "no drain, no reset: the disks keep their data") ||
		!strings.Contains(toJSON(body["steps"]), "Draining: skipped (force)") || !strings.Contains(toJSON(body["effects"]), "reboot has no effect with force") {
		t.Fatalf("REST preview with force: %d %v", code, body)
	}

	unchanged(t, m)
}

func TestPreviewRemovalOfTheLastControlPlane(t *testing.T) {
	if n := approvedOf(t, ichorv1alpha1.RoleControlPlane); n != 1 {
		t.Fatalf("the test needs %s to be the only approved control plane; there are %d", nodeName, n)
	}
	before, err := getMachine(t, nodeName)
	if err != nil {
		t.Fatal(err)
	}

	resp, err := machines(t, viewer(t)).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{Name: nodeName})
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	if resp.GetAllowed() || len(resp.GetRefusals()) != 1 || !strings.Contains(resp.GetRefusals()[0].GetRule(), "last control plane") ||
		resp.GetRefusals()[0].GetWayOut() == "" || resp.GetRefusals()[0].GetField() != "spec.role" {
		t.Fatalf("the last control plane: allowed %v, refusals %v", resp.GetAllowed(), resp.GetRefusals())
	}
	if !slices.Contains(resp.GetEffects(), "control planes: 1 → 0 (the cluster declares 1)") {
		t.Errorf("effects lack the control-plane count: %q", resp.GetEffects())
	}

	// The same refusal over REST; allowed is false (omitted from the JSON).
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/machines/"+nodeName+"/removal-preview", adminTok(t), "")
	if code != http.StatusOK || body["allowed"] == true || !strings.Contains(toJSON(body["refusals"]), "last control plane") ||
		!strings.Contains(toJSON(body["refusals"]), "wayOut") {
		t.Fatalf("REST preview of the last control plane: %d %v", code, body)
	}

	// RemoveMachine refuses with the same rule.
	_, err = machines(t, adminTok(t)).RemoveMachine(context.Background(), &ichorv1.RemoveMachineRequest{Name: nodeName})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), resp.GetRefusals()[0].GetRule()) {
		t.Fatalf("remove after a refused preview: %v, want the preview's rule", err)
	}

	unchanged(t, before)
}

// A second control plane: the numbers of etcd's quorum after the removal.
func TestPreviewRemovalOfAControlPlaneSaysTheQuorum(t *testing.T) {
	m := provisionedMachine(t, "pv-cp2", ichorv1alpha1.RoleControlPlane)
	cps := approvedOf(t, ichorv1alpha1.RoleControlPlane)
	if cps != 2 {
		t.Fatalf("the test needs two approved control planes; there are %d", cps)
	}
	resp, err := machines(t, operator(t)).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{Name: "pv-cp2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"control planes: 2 → 1 (the cluster declares 1)",
		"etcd: 2 members → 1, quorum 1, tolerates no failure until a control plane is added",
	}
	if !resp.GetAllowed() || len(resp.GetEffects()) < 2 || !slices.Equal(resp.GetEffects()[:2], want) {
		t.Fatalf("a control plane of two: allowed %v, refusals %v, effects %q, want first %q", resp.GetAllowed(), resp.GetRefusals(), resp.GetEffects(), want)
	}
	if !slices.ContainsFunc(resp.GetSteps(), func(s string) bool { return strings.HasPrefix(s, "LeavingEtcd:") }) {
		t.Errorf("a control plane's steps lack LeavingEtcd: %q", resp.GetSteps())
	}
	unchanged(t, m)
}

func TestPreviewRemovalNeedsGetAndAName(t *testing.T) {
	createMachine(t, "pv-pending", ichorv1alpha1.ApprovalPending, "")
	// A user with no role may not read the machine: the API server refuses.
	_, err := machines(t, token(t, "ichor:nobody")).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{Name: "pv-pending"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user without get: %v, want PermissionDenied", err)
	}
	_, err = machines(t, viewer(t)).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "name is required") {
		t.Fatalf("no name: %v", err)
	}
	_, err = machines(t, viewer(t)).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{Name: "pv-nothing"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown machine: %v, want NotFound", err)
	}
	// A pending machine: nothing is sent to the node, the cluster does not change.
	resp, err := machines(t, viewer(t)).PreviewRemoval(context.Background(), &ichorv1.PreviewRemovalRequest{Name: "pv-pending"})
	if err != nil || !resp.GetAllowed() || len(resp.GetSteps()) != 1 || !strings.Contains(resp.GetSteps()[0], "nothing is sent to the node") {
		t.Fatalf("a pending machine: %v %v", err, resp)
	}
}
