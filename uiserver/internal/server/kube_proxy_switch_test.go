package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// kubeProxyOperations are the test cluster's operations of type kube-proxy.
func kubeProxyOperations(t testing.TB) []ichorv1alpha1.TalosOperation {
	t.Helper()
	var out []ichorv1alpha1.TalosOperation
	for _, op := range clusterOperations(t) {
		if op.Spec.Type == ichorv1alpha1.OperationKubeProxy {
			out = append(out, op)
		}
	}
	return out
}

// stepNames are the names of a preview's steps, in order.
func stepNames(steps []*ichorv1.KubeProxyStep) []string {
	out := make([]string, 0, len(steps))
	for _, s := range steps {
		out = append(out, s.GetStep())
	}
	return out
}

// The Cilium page's kube-proxy API: the preview says the mode, the
// KubeProxyConsistent condition, an unfinished switch with its step, the
// steps of the switch in the controller's order and what refuses it for the
// signed-in user; the start runs the admission webhook's checks on fresh
// reads and creates the kube-proxy operation as the user, or creates
// nothing and names the rule and the way out.
func TestKubeProxySwitchAPI(t *testing.T) {
	ctx := context.Background()
	before := servedCluster(t)
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			if c.Spec.CNI.KubeProxy == before.Spec.CNI.KubeProxy {
				return nil
			}
			// Calling the pending switch off, as admission allows.
			c.Spec.CNI.KubeProxy = before.Spec.CNI.KubeProxy
			c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] = before.Spec.CNI.KubeProxy
			return admin.Update(context.Background(), c)
		})
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Status.CNI.CiliumVersion, c.Status.Conditions, c.Status.CNI.KubeProxy = before.Status.CNI.CiliumVersion, before.Status.Conditions, before.Status.CNI.KubeProxy
			return admin.Status().Update(context.Background(), c)
		})
	})
	if n := len(kubeProxyOperations(t)) + len(cniOperations(t)); n != 0 {
		t.Fatalf("%d cni or kube-proxy operation(s) were left by other tests", n)
	}
	if m := before.Spec.CNI.KubeProxy; m != ichorv1alpha1.KubeProxyEnabled {
		t.Fatalf("the served cluster has kube-proxy %q, the test expects enabled", m)
	}
	asViewer, asOperator, asAdmin := operations(t, viewer(t)), operations(t, operator(t)), operations(t, adminTok(t))
	setCilium(t, "1.20.2", metav1.ConditionTrue)
	// The mode Talos's side runs, as cnistatus records it.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Status.CNI.KubeProxy = ichorv1alpha1.KubeProxyEnabled
		return admin.Status().Update(ctx, c)
	}))

	// The card: enabled, replaced offered, with the steps in order.
	p, err := asOperator.PreviewKubeProxySwitch(ctx, &ichorv1.PreviewKubeProxySwitchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantSteps := []string{guard.KubeProxyStepCheck, guard.KubeProxyStepCilium, guard.KubeProxyStepVerify, guard.KubeProxyStepTalos, guard.KubeProxyStepCleanup}
	if p.GetCluster() != testCluster || p.GetMode() != "enabled" || p.GetTarget() != "replaced" || !p.GetAllowed() || len(p.GetRefusals()) != 0 ||
		!slices.Equal(stepNames(p.GetSteps()), wantSteps) || p.GetConsistent() != nil || len(p.GetUnfinished()) != 0 {
		t.Fatalf("an operator's preview: %v", p)
	}
	// The same words as the CLI's confirmation (guard.KubeProxySwitchPlan).
	if want := guard.KubeProxySwitchPlan(testCluster, "replaced"); p.GetSteps()[4].GetAction() != want[4].Action ||
		!strings.Contains(p.GetSteps()[4].GetAction(), "DaemonSet, ServiceAccount, ClusterRoleBinding and ConfigMap") {
		t.Fatalf("the cleanup step: %v", p.GetSteps()[4])
	}
	// The consistency condition, once the controller reported it.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.KubeProxyConsistentCondition, Status: metav1.ConditionTrue,
			Reason: ichorv1alpha1.KubeProxyConsistentReason, Message: "Cilium and Talos agree: kube-proxy enabled"})
		return admin.Status().Update(ctx, c)
	}))
	// Over REST too, as the console calls it; a viewer may read but not start.
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/operations:previewKubeProxySwitch?mode=enabled", viewer(t), "")
	if code != http.StatusOK || body["mode"] != "enabled" || body["target"] != "enabled" || body["allowed"] == true ||
		!strings.Contains(toJSON(body["refusals"]), "already has kube-proxy enabled") || !strings.Contains(toJSON(body["refusals"]), "update") ||
		!strings.Contains(toJSON(body["consistent"]), "Cilium and Talos agree") {
		t.Fatalf("a viewer's preview of the mode the cluster has, over REST: %d %v", code, body)
	}

	// Refused: nothing is written, the message names the rule and the way out.
	refusedStart := func(client ichorv1.OperationServiceClient, mode string, code codes.Code, says ...string) {
		t.Helper()
		_, err := client.StartKubeProxySwitch(ctx, &ichorv1.StartKubeProxySwitchRequest{Mode: mode})
		if m := servedCluster(t).Spec.CNI.KubeProxy; m != ichorv1alpha1.KubeProxyEnabled {
			t.Fatalf("a refused start (%v) wrote spec.cni.kubeProxy %q", err, m)
		}
		refusedNothingCreated(t, "start "+mode, err, kubeProxyOperations(t), code, says...)
	}
	refusedStart(asAdmin, " ", codes.InvalidArgument, "mode is required", "enabled (Talos runs kube-proxy) or replaced (Cilium replaces it)", "nothing was changed")
	refusedStart(asAdmin, "strict", codes.InvalidArgument, `kube-proxy mode "strict" is not one Ichor knows`, "name enabled (Talos runs kube-proxy) or replaced")
	refusedStart(asViewer, "replaced", codes.PermissionDenied, "update")
	refusedStart(asAdmin, "enabled", codes.FailedPrecondition, "already has kube-proxy enabled", "name the other mode")

	// Not handed over: the release is not Ichor's yet.
	setCilium(t, "1.20.2", metav1.ConditionFalse)
	refusedStart(asAdmin, "replaced", codes.FailedPrecondition, "is not Ichor's Helm release yet (CNIHandover: set by the test (False))")
	p, err = asAdmin.PreviewKubeProxySwitch(ctx, &ichorv1.PreviewKubeProxySwitchRequest{})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "is not Ichor's Helm release yet") || len(p.GetSteps()) != 5 {
		t.Fatalf("the preview before the hand-over: %v %v", p, err)
	}
	setCilium(t, "1.20.2", metav1.ConditionTrue)

	// A Cilium upgrade has not finished.
	pending := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cilium-pending"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: testCluster, Type: ichorv1alpha1.OperationCNI,
			CNI: &ichorv1alpha1.CNIUpgrade{Version: "v1.20.2"}},
	}
	testenv.Must(t, admin.Create(ctx, pending))
	_, err = asAdmin.StartKubeProxySwitch(ctx, &ichorv1.StartKubeProxySwitchRequest{Mode: "replaced"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "operation cilium-pending changes cluster "+testCluster+"'s Cilium and has not finished") ||
		len(refusalDetails(err)) != 1 {
		t.Fatalf("a start while cilium-pending runs: %v", err)
	}
	testenv.Must(t, admin.Delete(ctx, pending))
	if ops := kubeProxyOperations(t); len(ops) != 0 {
		t.Fatalf("kube-proxy operations %v after the refusals", ops)
	}

	// The allowed start, as an operator: spec.cni.kubeProxy written as the
	// signed-in user with the annotation naming the mode (admission refuses
	// it otherwise); no operation: the controller starts it.
	resp, err := asOperator.StartKubeProxySwitch(ctx, &ichorv1.StartKubeProxySwitchRequest{Mode: "replaced"})
	if err != nil {
		t.Fatalf("an operator's start: %v", err)
	}
	if resp.GetFrom() != "enabled" || resp.GetTo() != "replaced" {
		t.Fatalf("the start's answer: %v", resp)
	}
	if c := servedCluster(t); c.Spec.CNI.KubeProxy != ichorv1alpha1.KubeProxyReplaced || c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] != "replaced" {
		t.Fatalf("after the start: spec.cni.kubeProxy %q, annotations %v", c.Spec.CNI.KubeProxy, c.Annotations)
	}
	if ops := kubeProxyOperations(t); len(ops) != 0 {
		t.Fatalf("the start created %d kube-proxy operations; the controller starts it", len(ops))
	}

	// The operation the controller starts: the card names it with its step,
	// and the same mode again is refused.
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testCluster + "-kube-proxy-test"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: testCluster, Type: ichorv1alpha1.OperationKubeProxy,
			KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: "replaced"}},
	}
	testenv.Must(t, admin.Create(ctx, op))
	name := op.Name
	deleteOperationWhenDone(t, name)
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o := getOperation(t, name)
		o.Status.Phase, o.Status.Step = ichorv1alpha1.OperationRunning, guard.KubeProxyStepVerify
		return admin.Status().Update(ctx, o)
	}))
	p, err = asViewer.PreviewKubeProxySwitch(ctx, &ichorv1.PreviewKubeProxySwitchRequest{})
	if err != nil || len(p.GetUnfinished()) != 1 || p.GetUnfinished()[0].GetName() != name || p.GetUnfinished()[0].GetMode() != "replaced" ||
		p.GetUnfinished()[0].GetStep() != guard.KubeProxyStepVerify || p.GetAllowed() {
		t.Fatalf("the preview while %s runs: %v %v", name, p, err)
	}
	_, err = asOperator.StartKubeProxySwitch(ctx, &ichorv1.StartKubeProxySwitchRequest{Mode: "replaced"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already has kube-proxy replaced") {
		t.Fatalf("a second start: %v", err)
	}
}
