package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func patchClient(t testing.TB, tok string) ichorv1.PatchServiceClient {
	return ichorv1.NewPatchServiceClient(grpcConn(t, tok))
}

// impactOf returns the preview's impact on one machine, or nil.
func impactOf(resp *ichorv1.PreviewPatchResponse, machine string) *ichorv1.MachineImpact {
	for _, m := range resp.GetMachines() {
		if m.GetMachine() == machine {
			return m
		}
	}
	return nil
}

func paths(m *ichorv1.MachineImpact) string {
	out := make([]string, 0, len(m.GetChanges()))
	for _, c := range m.GetChanges() {
		out = append(out, c.GetOp()+" "+c.GetPath())
	}
	return strings.Join(out, ", ")
}

func storedPatch(t testing.TB, name string) (*ichorv1alpha1.TalosConfigPatch, error) {
	t.Helper()
	p := &ichorv1alpha1.TalosConfigPatch{}
	err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, p)
	return p, err
}

// listedPatch waits until ListPatches (served from the cache) shows the
// patch at the resourceVersion.
func listedPatch(t testing.TB, tok, name, rv string) (*ichorv1.ListPatchesResponse, *ichorv1.ConfigPatch) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := patchClient(t, tok).ListPatches(context.Background(), &ichorv1.ListPatchesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range resp.GetPatches() {
			if p.GetName() == name && p.GetResourceVersion() == rv {
				return resp, p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ListPatches did not show %s at %s: %v", name, rv, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPatchPreview: PreviewPatch renders the machines a proposed patch
// targets before and after and names each one's changed paths and apply
// mode (a kube-apiserver restart on a control plane waits for a rollout);
// machinery's refusal names the field; a viewer may preview, and nothing is
// written.
func TestPatchPreview(t *testing.T) {
	ctx := context.Background()
	for name, role := range map[string]string{"pp-cp1": ichorv1alpha1.RoleControlPlane, "pp-w1": ichorv1alpha1.RoleWorker} {
		createMachine(t, name, ichorv1alpha1.ApprovalApproved, role)
		removeWhenDone(t, name)
	}
	createMachine(t, "pp-pending", ichorv1alpha1.ApprovalPending, "")
	removeWhenDone(t, "pp-pending")
	pc := patchClient(t, viewer(t))

	resp, err := pc.PreviewPatch(ctx, &ichorv1.PreviewPatchRequest{Patch: &ichorv1.ConfigPatch{
		Name: "pp-sysctl", Layer: ichorv1alpha1.LayerCluster,
		DocumentsJson: `[{"sysctlConfig":{"params":{"net.core.somaxconn":"1024"}}}]`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetValid() || !resp.GetAllowed() || len(resp.GetPrivileged()) != 0 {
		t.Fatalf("a sysctl is valid and not privileged: %v", resp)
	}
	for _, name := range []string{"pp-cp1", "pp-w1"} {
		m := impactOf(resp, name)
		if m == nil || m.GetMode() != "no-reboot" || m.GetWaitsForRollout() || paths(m) != `added SysctlConfig:params["net.core.somaxconn"]` {
			t.Errorf("%s: want no-reboot with the sysctl's path, got %v", name, m)
		}
	}
	if impactOf(resp, "pp-pending") != nil {
		t.Errorf("a pending machine has no configuration and is not previewed: %v", resp)
	}

	resp, err = pc.PreviewPatch(ctx, &ichorv1.PreviewPatchRequest{Patch: &ichorv1.ConfigPatch{
		Name: "pp-api", Layer: ichorv1alpha1.LayerRole, TargetRole: ichorv1alpha1.RoleControlPlane,
		DocumentsJson: `[{"kubeAPIServerConfig":{"env":{"GOGC":"50"}}}]`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if m := impactOf(resp, "pp-cp1"); m == nil || m.GetMode() != "kube-apiserver-restart" || !m.GetWaitsForRollout() {
		t.Errorf("a kube-apiserver setting waits for a rollout on the control plane: %v", m)
	}
	if m := impactOf(resp, "pp-w1"); m != nil {
		t.Errorf("the role layer of controlplane does not target the worker: %v", m)
	}

	vlan := &ichorv1.ConfigPatch{
		Name: "pp-vlan", Layer: ichorv1alpha1.LayerMachine, TargetMachine: "pp-w1",
		DocumentsJson: `[{"vlanConfig":{"name":"eth0.10","vlanID":10}}]`,
	}
	resp, err = pc.PreviewPatch(ctx, &ichorv1.PreviewPatchRequest{Patch: vlan})
	if err != nil {
		t.Fatal(err)
	}
	m := impactOf(resp, "pp-w1")
	if resp.GetValid() || m == nil || !strings.Contains(strings.Join(m.GetErrors(), ";"), "parent") {
		t.Fatalf("a VLAN without its parent link is invalid, naming the field: %v", resp)
	}
	// Saving it is refused with the same message; nothing is written.
	_, err = patchClient(t, operator(t)).CreatePatch(ctx, &ichorv1.CreatePatchRequest{Patch: vlan})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "parent must be specified") {
		t.Fatalf("creating the invalid VLAN: want InvalidArgument naming parent, got %v", err)
	}
	if _, err := storedPatch(t, "pp-vlan"); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused patch was written: %v", err)
	}
	// The allowed neighbour: with its parent it is valid.
	vlan.DocumentsJson = `[{"vlanConfig":{"name":"eth0.10","vlanID":10,"parent":"eth0"}}]`
	resp, err = pc.PreviewPatch(ctx, &ichorv1.PreviewPatchRequest{Patch: vlan})
	if err != nil || !resp.GetValid() || impactOf(resp, "pp-w1").GetMode() != "no-reboot" {
		t.Fatalf("the VLAN with its parent: %v %v", resp, err)
	}

	// A field outside the typed schema (a secret field is one) is refused by name.
	_, err = pc.PreviewPatch(ctx, &ichorv1.PreviewPatchRequest{Patch: &ichorv1.ConfigPatch{
		Name: "pp-secret", Layer: ichorv1alpha1.LayerCluster,
		DocumentsJson: `[{"registryTLSConfig":{"name":"r","clientIdentity":{"cert":"x","key":"y"}}}]`,
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"key"`) {
		t.Fatalf("a secret field must be refused by name: %v", err)
	}
}

// TestPatchWrites: an operator creates, edits and deletes a patch through the
// console's API and it round-trips losslessly; a viewer's forged write is
// refused by the API server; a privileged document is refused for an
// operator with the verb named, and allowed for an administrator; the
// console is told who may write what.
func TestPatchWrites(t *testing.T) {
	ctx := context.Background()
	op := patchClient(t, operator(t))
	createMachine(t, "pw-w1", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	removeWhenDone(t, "pw-w1")

	list, err := patchClient(t, viewer(t)).ListPatches(ctx, &ichorv1.ListPatchesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list.GetCanWrite() || list.GetCanWritePrivileged() {
		t.Errorf("a viewer may write nothing: %v", list)
	}

	docs := `[{"sysctlConfig":{"params":{"vm.swappiness":"10"}}},{"timeSyncConfig":{"enabled":false,"bootTimeout":"1m0s"}}]`
	sel := `{"matchLabels":{"zone":"a"},"matchExpressions":[{"key":"tier","operator":"In","values":["db"]}]}`
	want := &ichorv1.ConfigPatch{Name: "pw-tuning", Layer: ichorv1alpha1.LayerSelector, Priority: 5, TargetSelectorJson: sel, DocumentsJson: docs}

	// A viewer's forged write: the API server refuses it as the viewer.
	_, err = patchClient(t, viewer(t)).CreatePatch(ctx, &ichorv1.CreatePatchRequest{Patch: want})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a viewer's create must be refused: %v", err)
	}
	if _, err := storedPatch(t, "pw-tuning"); !apierrors.IsNotFound(err) {
		t.Fatalf("the viewer's patch was written: %v", err)
	}

	created, err := op.CreatePatch(ctx, &ichorv1.CreatePatchRequest{Patch: want})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := storedPatch(t, "pw-tuning")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Spec.ClusterName != testCluster || stored.Spec.Layer != ichorv1alpha1.LayerSelector || stored.Spec.Priority != 5 ||
		stored.Spec.Target.Selector.MatchLabels["zone"] != "a" || stored.Spec.Documents[1].TimeSyncConfig == nil {
		t.Fatalf("the stored patch: %+v", stored.Spec)
	}
	list, got := listedPatch(t, operator(t), "pw-tuning", created.GetPatch().GetResourceVersion())
	if !list.GetCanWrite() || list.GetCanWritePrivileged() {
		t.Errorf("an operator may write patches but not privileged ones: %v", list)
	}
	// Lossless: what the console reads back is what it sent.
	jsonEqual(t, "documents", got.GetDocumentsJson(), docs)
	jsonEqual(t, "selector", got.GetTargetSelectorJson(), sel)

	// Edit: the preview of the edit names the changed path, the update lands.
	edit := &ichorv1.ConfigPatch{Name: "pw-tuning", Layer: ichorv1alpha1.LayerCluster, Priority: 5,
		DocumentsJson: `[{"sysctlConfig":{"params":{"vm.swappiness":"20"}}}]`, ResourceVersion: got.GetResourceVersion()}
	updated, err := op.UpdatePatch(ctx, &ichorv1.UpdatePatchRequest{Name: "pw-tuning", Patch: edit})
	if err != nil {
		t.Fatal(err)
	}
	// The list counts the machines the patch targets now: on the cluster
	// layer, every machine of the cluster.
	all := &ichorv1alpha1.TalosMachineList{}
	if err := admin.List(ctx, all, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	_, got = listedPatch(t, operator(t), "pw-tuning", updated.GetPatch().GetResourceVersion())
	n := 0
	for _, m := range all.Items {
		if m.Spec.ClusterName == testCluster {
			n++
		}
	}
	if int(got.GetMatchedMachines()) != n || n == 0 {
		t.Errorf("the cluster-layer patch targets the %d machines of the cluster: %v", n, got)
	}
	// A write from the old resourceVersion is refused: the patch changed since.
	if _, err := op.UpdatePatch(ctx, &ichorv1.UpdatePatchRequest{Name: "pw-tuning", Patch: edit}); status.Code(err) != codes.Aborted {
		t.Fatalf("a stale update must be ABORTED: %v", err)
	}

	// Privileged: an operator is refused with the verb named; nothing is written.
	priv := &ichorv1.ConfigPatch{Name: "pw-roots", Layer: ichorv1alpha1.LayerCluster,
		DocumentsJson: `[{"trustedRootsConfig":{"name":"corp","certificates":"-----BEGIN CERTIFICATE-----"}}]`}
	prev, err := op.PreviewPatch(ctx, &ichorv1.PreviewPatchRequest{Patch: priv})
	if err != nil {
		t.Fatal(err)
	}
	if prev.GetAllowed() || len(prev.GetPrivileged()) != 1 || !strings.Contains(prev.GetPrivileged()[0].GetPermission(), "talosconfigpatches/privileged") {
		t.Fatalf("the preview must say the operator lacks the privileged verb: %v", prev)
	}
	_, err = op.CreatePatch(ctx, &ichorv1.CreatePatchRequest{Patch: priv})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "`update` on `talosconfigpatches/privileged`") {
		t.Fatalf("an operator's privileged patch must be refused naming the verb: %v", err)
	}
	if _, err := storedPatch(t, "pw-roots"); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused privileged patch was written: %v", err)
	}
	// Its allowed neighbour: an administrator writes it.
	ad := patchClient(t, adminTok(t))
	if _, err := ad.CreatePatch(ctx, &ichorv1.CreatePatchRequest{Patch: priv}); err != nil {
		t.Fatalf("an administrator may write a privileged patch: %v", err)
	}
	// And an operator may not delete it either.
	if _, err := op.DeletePatch(ctx, &ichorv1.DeletePatchRequest{Name: "pw-roots"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("an operator's delete of a privileged patch must be refused: %v", err)
	}
	if _, err := ad.DeletePatch(ctx, &ichorv1.DeletePatchRequest{Name: "pw-roots"}); err != nil {
		t.Fatal(err)
	}

	// Delete: a viewer is refused, the operator deletes.
	if _, err := patchClient(t, viewer(t)).DeletePatch(ctx, &ichorv1.DeletePatchRequest{Name: "pw-tuning"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a viewer's delete must be refused: %v", err)
	}
	if _, err := op.DeletePatch(ctx, &ichorv1.DeletePatchRequest{Name: "pw-tuning", ResourceVersion: updated.GetPatch().GetResourceVersion()}); err != nil {
		t.Fatal(err)
	}
	if _, err := storedPatch(t, "pw-tuning"); !apierrors.IsNotFound(err) {
		t.Fatalf("the patch was not deleted: %v", err)
	}

	// The REST mapping the console calls.
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/patches", viewer(t), "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/patches: %d %v", code, body)
	}
}

func jsonEqual(t testing.TB, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s does not round-trip:\n got %s\nwant %s", what, got, want)
	}
}
