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
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// setCilium records the Cilium the controller read from the served cluster
// (status.cni.ciliumVersion) and its CNIHandover condition.
func setCilium(t *testing.T, running string, handover metav1.ConditionStatus) {
	t.Helper()
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Status.CNI.CiliumVersion = running
		apimeta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.CNIHandoverCondition, Status: handover,
			Reason: "Test", Message: "set by the test (" + string(handover) + ")"})
		return admin.Status().Update(context.Background(), c)
	}))
}

// cniOperations are the test cluster's operations of type cni.
func cniOperations(t testing.TB) []ichorv1alpha1.TalosOperation {
	t.Helper()
	var out []ichorv1alpha1.TalosOperation
	for _, op := range clusterOperations(t) {
		if op.Spec.Type == ichorv1alpha1.OperationCNI {
			out = append(out, op)
		}
	}
	return out
}

// refusedNothingCreated checks a refused start (what): no operation was left
// (left are the operations of its type), the status code, and that the error
// says each of says.
func refusedNothingCreated(t testing.TB, what string, err error, left []ichorv1alpha1.TalosOperation, code codes.Code, says ...string) {
	t.Helper()
	if len(left) != 0 {
		t.Fatalf("%s (%v) created %s", what, err, left[0].Name)
	}
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %v, want it to say %q", what, err, s)
		}
	}
}

// The Cilium page's upgrade API: the preview says what runs, which charts
// this Ichor embeds and which one it offers, and what refuses it for the
// signed-in user; the start runs the admission webhook's checks on fresh
// reads and creates the cni operation as the user, or creates nothing and
// names the rule and the way out.
func TestCiliumUpgradeAPI(t *testing.T) {
	ctx := context.Background()
	before := servedCluster(t)
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Status.CNI.CiliumVersion, c.Status.Conditions = before.Status.CNI.CiliumVersion, before.Status.Conditions
			return admin.Status().Update(context.Background(), c)
		})
	})
	if n := len(cniOperations(t)); n != 0 {
		t.Fatalf("%d cni operation(s) were left by other tests", n)
	}
	asViewer, asOperator, asAdmin := operations(t, viewer(t)), operations(t, operator(t)), operations(t, adminTok(t))
	setCilium(t, "1.19.3", metav1.ConditionTrue)

	// The card: v1.19.3 runs, v1.20.2 is offered (one minor up), untested on
	// the cluster's Kubernetes 1.37 (Cilium 1.20 lists 1.33 to 1.36).
	p, err := asOperator.PreviewCiliumUpgrade(ctx, &ichorv1.PreviewCiliumUpgradeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if p.GetCluster() != testCluster || p.GetRunning() != "v1.19.3" || p.GetTarget() != "v1.20.2" ||
		!slices.Equal(p.GetEmbedded(), release.CiliumVersions()) || !p.GetAllowed() || len(p.GetRefusals()) != 0 ||
		p.GetHandover().GetStatus() != "True" || len(p.GetUnfinished()) != 0 {
		t.Fatalf("an operator's preview: %v", p)
	}
	if len(p.GetWarnings()) != 1 || !strings.Contains(p.GetWarnings()[0], "Cilium v1.20.2 is not tested on Kubernetes v1.37.2") {
		t.Fatalf("warnings %q", p.GetWarnings())
	}
	// Over REST too, as the console calls it; a viewer may read but not start.
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/operations:previewCiliumUpgrade?version=1.20.2", viewer(t), "")
	if code != http.StatusOK || body["target"] != "v1.20.2" || body["running"] != "v1.19.3" || body["allowed"] == true ||
		!strings.Contains(toJSON(body["refusals"]), "`create` on `talosoperations`") {
		t.Fatalf("a viewer's preview over REST: %d %v", code, body)
	}

	// Refused: nothing is created, the message names the rule and the way out.
	refusedStart := func(client ichorv1.OperationServiceClient, version string, code codes.Code, says ...string) {
		t.Helper()
		_, err := client.StartCiliumUpgrade(ctx, &ichorv1.StartCiliumUpgradeRequest{Version: version})
		refusedNothingCreated(t, "start "+version, err, cniOperations(t), code, says...)
	}
	refusedStart(asAdmin, " ", codes.InvalidArgument, "version is required", "v1.19.3, v1.20.2", "nothing was created")
	refusedStart(asViewer, "v1.20.2", codes.PermissionDenied, "create")
	refusedStart(asAdmin, "v1.21.0", codes.FailedPrecondition, "Cilium v1.21.0 is not a chart this Ichor embeds", "upgrade Ichor to one that carries the chart")
	refusedStart(asAdmin, "v1.19.3", codes.FailedPrecondition, "cilium already runs v1.19.3", "`ichor cni upgrade v1.20.2`")

	// Not handed over: the release is not Ichor's yet.
	setCilium(t, "1.19.3", metav1.ConditionFalse)
	refusedStart(asAdmin, "v1.20.2", codes.FailedPrecondition, "is not Ichor's Helm release yet (CNIHandover: set by the test (False))", "CNIHandover")
	p, err = asAdmin.PreviewCiliumUpgrade(ctx, &ichorv1.PreviewCiliumUpgradeRequest{})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "is not Ichor's Helm release yet") {
		t.Fatalf("the preview before the hand-over: %v %v", p, err)
	}
	setCilium(t, "1.19.3", metav1.ConditionTrue)

	// Another cni operation has not finished.
	pending := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cilium-pending"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: testCluster, Type: ichorv1alpha1.OperationCNI,
			CNI: &ichorv1alpha1.CNIUpgrade{Version: "v1.20.2"}},
	}
	testenv.Must(t, admin.Create(ctx, pending))
	p, err = asAdmin.PreviewCiliumUpgrade(ctx, &ichorv1.PreviewCiliumUpgradeRequest{})
	if err != nil || p.GetAllowed() || !slices.Equal(p.GetUnfinished(), []string{"cilium-pending"}) {
		t.Fatalf("the preview while cilium-pending runs: %v %v", p, err)
	}
	_, err = asAdmin.StartCiliumUpgrade(ctx, &ichorv1.StartCiliumUpgradeRequest{Version: "v1.20.2"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "operation cilium-pending changes cluster "+testCluster+"'s Cilium and has not finished") ||
		!strings.Contains(err.Error(), "`ichor operation get cilium-pending --watch`") || len(refusalDetails(err)) != 1 {
		t.Fatalf("a start while cilium-pending runs: %v", err)
	}
	testenv.Must(t, admin.Delete(ctx, pending))
	if ops := cniOperations(t); len(ops) != 0 {
		t.Fatalf("cni operations %v after the refusals", ops)
	}

	// A downgrade; and nothing newer to offer.
	setCilium(t, "v1.20.2", metav1.ConditionTrue)
	refusedStart(asAdmin, "1.19.3", codes.FailedPrecondition, "cilium v1.19.3 is older than the running v1.20.2; Ichor never moves Cilium down",
		"this Ichor has no newer chart for Cilium v1.20.2")
	p, err = asOperator.PreviewCiliumUpgrade(ctx, &ichorv1.PreviewCiliumUpgradeRequest{})
	if err != nil || p.GetRunning() != "v1.20.2" || p.GetTarget() != "" || p.GetAllowed() || len(p.GetRefusals()) != 0 {
		t.Fatalf("the preview with the newest chart running: %v %v", p, err)
	}

	// A Kubernetes the target does not support (Cilium 1.20 starts at 1.33)
	// is overridable: an operator is refused, an administrator holds override.
	setCilium(t, "v1.19.3", metav1.ConditionTrue)
	setKubernetes(t, "1.32.9", "", nil)
	t.Cleanup(func() { setKubernetes(t, "1.37.2", "", nil) })
	p, err = asOperator.PreviewCiliumUpgrade(ctx, &ichorv1.PreviewCiliumUpgradeRequest{})
	if err != nil || p.GetAllowed() || len(p.GetRefusals()) != 1 || !p.GetRefusals()[0].GetOverridable() ||
		!strings.Contains(p.GetRefusals()[0].GetRule(), "supports kubernetes 1.33 to 1.36, not 1.32.9") {
		t.Fatalf("an operator's preview on Kubernetes 1.32: %v %v", p, err)
	}
	refusedStart(asOperator, "v1.20.2", codes.FailedPrecondition, "supports kubernetes 1.33 to 1.36", "`override` verb")
	p, err = asAdmin.PreviewCiliumUpgrade(ctx, &ichorv1.PreviewCiliumUpgradeRequest{})
	if err != nil || !p.GetAllowed() || len(p.GetRefusals()) != 0 {
		t.Fatalf("an administrator's preview on Kubernetes 1.32: %v %v", p, err)
	}
	resp, err := asAdmin.StartCiliumUpgrade(ctx, &ichorv1.StartCiliumUpgradeRequest{Version: "v1.20.2"})
	if err != nil {
		t.Fatalf("an administrator's override: %v", err)
	}
	testenv.Must(t, admin.Delete(ctx, getOperation(t, resp.GetOperation().GetName())))
	setKubernetes(t, "1.37.2", "", nil)

	// The allowed start, as an operator: ichor-ui itself may not create
	// TalosOperations, so the operation exists only because it was created
	// as the signed-in user.
	resp, err = asOperator.StartCiliumUpgrade(ctx, &ichorv1.StartCiliumUpgradeRequest{Version: "1.20.2"})
	if err != nil {
		t.Fatalf("an operator's start: %v", err)
	}
	name := resp.GetOperation().GetName()
	deleteOperationWhenDone(t, name)
	if !strings.HasPrefix(name, testCluster+"-cni-") || resp.GetOperation().GetType() != ichorv1alpha1.OperationCNI {
		t.Fatalf("the operation returned: %v", resp.GetOperation())
	}
	if o := getOperation(t, name); o.Spec.Type != ichorv1alpha1.OperationCNI || o.Spec.ClusterName != testCluster ||
		o.Spec.CNI == nil || o.Spec.CNI.Version != "v1.20.2" {
		t.Fatalf("the cni operation: %+v", o.Spec)
	}
	if ops := cniOperations(t); len(ops) != 1 {
		t.Fatalf("%d cni operations after one start", len(ops))
	}
	// It now blocks a second one.
	_, err = asOperator.StartCiliumUpgrade(ctx, &ichorv1.StartCiliumUpgradeRequest{Version: "v1.20.2"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "operation "+name+" changes cluster") {
		t.Fatalf("a second start: %v", err)
	}
}
