package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// setInstallation makes the IchorInstallation one that manager installs
// (spec.deployment.manager is immutable, so it is made anew) and that
// records installed; the test's end leaves the suite's usual one.
func setInstallation(t *testing.T, manager, installed string) {
	t.Helper()
	ctx := context.Background()
	drop := func() {
		ii := &ichorv1alpha1.IchorInstallation{ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName}}
		testenv.Must(t, client.IgnoreNotFound(admin.Delete(ctx, ii)))
		testenv.Eventually(t, 30*time.Second, "the IchorInstallation gone", func() error {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(ii), ii); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there (%w)", err)
			}
			return nil
		})
	}
	drop()
	t.Cleanup(func() {
		drop()
		resetInstallation(t)
	})
	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: installed},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: manager},
		},
	}
	testenv.Must(t, admin.Create(ctx, ii))
	ii.Status.InstalledVersion = installed
	testenv.Must(t, admin.Status().Update(ctx, ii))
}

// ichorOperations are the test cluster's operations of type ichor.
func ichorOperations(t testing.TB) []ichorv1alpha1.TalosOperation {
	t.Helper()
	var out []ichorv1alpha1.TalosOperation
	for _, op := range clusterOperations(t) {
		if op.Spec.Type == ichorv1alpha1.OperationIchor {
			out = append(out, op)
		}
	}
	return out
}

// The Versions card's upgrade of Ichor itself: the preview says what the
// IchorInstallation records and what refuses a version for the signed-in
// user (guard.CheckIchorUpgrade, then `create` on talosoperations); the
// start creates nothing without the typed cluster name, for an Ichor Helm
// manages, a downgrade, a skipped minor, a malformed digest or a user who
// may not create operations, and
// otherwise creates exactly the ichor operation `ichor upgrade ichor`
// creates, as the signed-in user.
func TestIchorUpgradeAPI(t *testing.T) {
	ctx := context.Background()
	if n := len(ichorOperations(t)); n != 0 {
		t.Fatalf("%d ichor operation(s) were left by other tests", n)
	}
	asViewer, asOperator, asAdmin := operations(t, viewer(t)), operations(t, operator(t)), operations(t, adminTok(t))
	refusedStart := func(client ichorv1.OperationServiceClient, req *ichorv1.StartIchorUpgradeRequest, code codes.Code, says ...string) {
		t.Helper()
		_, err := client.StartIchorUpgrade(ctx, req)
		refusedNothingCreated(t, "start "+req.GetVersion(), err, ichorOperations(t), code, says...)
	}

	// Helm manages this Ichor: `helm upgrade` does, the console refuses.
	setInstallation(t, ichorv1alpha1.ManagerHelm, "v0.4.0")
	p, err := asAdmin.PreviewIchorUpgrade(ctx, &ichorv1.PreviewIchorUpgradeRequest{Version: "0.5.0"})
	if err != nil || !p.GetInstallation() || p.GetInstalled() != "v0.4.0" || p.GetManager() != ichorv1alpha1.ManagerHelm ||
		p.GetVersion() != "v0.5.0" || p.GetAllowed() || len(p.GetRefusals()) != 1 ||
		!strings.Contains(p.GetRefusals()[0].GetRule(), "installed with Helm") || !strings.Contains(p.GetRefusals()[0].GetWayOut(), "`helm upgrade`") {
		t.Fatalf("the preview of a Helm-managed Ichor: %v %v", p, err)
	}
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: "v0.5.0", ConfirmClusterName: testCluster}, codes.FailedPrecondition,
		"upgrading Ichor to v0.5.0 is refused; nothing was changed", "installed with Helm", "`helm upgrade`")
	_, err = asAdmin.StartIchorUpgrade(ctx, &ichorv1.StartIchorUpgradeRequest{Version: "v0.5.0", ConfirmClusterName: testCluster})
	if rs := refusalDetails(err); len(rs) != 1 || !strings.Contains(rs[0].GetWayOut(), "`helm upgrade`") {
		t.Fatalf("the refusal's details: %v", rs)
	}

	// The installer manages it, at v0.4.0.
	setInstallation(t, ichorv1alpha1.ManagerIchor, "v0.4.0")
	p, err = asOperator.PreviewIchorUpgrade(ctx, &ichorv1.PreviewIchorUpgradeRequest{})
	if err != nil || !p.GetInstallation() || p.GetInstalled() != "v0.4.0" || p.GetManager() != ichorv1alpha1.ManagerIchor ||
		p.GetVersion() != "" || p.GetAllowed() || len(p.GetRefusals()) != 0 || p.GetCluster() != testCluster {
		t.Fatalf("the preview without a version: %v %v", p, err)
	}
	// The overview's summary says the same, to a viewer too.
	testenv.Eventually(t, 30*time.Second, "the installed Ichor in GetCluster", func() error {
		code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/cluster", viewer(t), "")
		cl, _ := body["cluster"].(map[string]any)
		if code != http.StatusOK || cl["ichorInstalledVersion"] != "v0.4.0" || cl["ichorManager"] != ichorv1alpha1.ManagerIchor {
			return fmt.Errorf("%d %v", code, body)
		}
		return nil
	})
	p, err = asOperator.PreviewIchorUpgrade(ctx, &ichorv1.PreviewIchorUpgradeRequest{Version: "v0.5.0"})
	if err != nil || !p.GetAllowed() || len(p.GetRefusals()) != 0 {
		t.Fatalf("an operator's preview of v0.5.0: %v %v", p, err)
	}
	// Over REST too, as the console calls it; a viewer may read but not start.
	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/operations:previewIchorUpgrade?version=0.5.0", viewer(t), "")
	if code != http.StatusOK || body["version"] != "v0.5.0" || body["allowed"] == true ||
		!strings.Contains(toJSON(body["refusals"]), "`create` on `talosoperations`") {
		t.Fatalf("a viewer's preview over REST: %d %v", code, body)
	}
	p, err = asAdmin.PreviewIchorUpgrade(ctx, &ichorv1.PreviewIchorUpgradeRequest{Version: "v0.3.9"})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "older than the installed Ichor v0.4.0") {
		t.Fatalf("the preview of a downgrade: %v %v", p, err)
	}

	// Refused: nothing is created, the message names the rule and the way out.
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: "v0.5.0"}, codes.InvalidArgument,
		"confirm_cluster_name is required", "type the cluster's name, \""+testCluster+"\"", "nothing was created")
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: "v0.5.0", ConfirmClusterName: "other"}, codes.InvalidArgument,
		"the confirmation \"other\" is not the cluster's name", "nothing was created")
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: " ", ConfirmClusterName: testCluster}, codes.InvalidArgument, "version is required", "nothing was created")
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: "v0.3.9", ConfirmClusterName: testCluster}, codes.FailedPrecondition,
		"spec.ichor.version", "v0.3.9 is older than the installed Ichor v0.4.0", "never downgrades", "choose v0.4.0 or a newer release")
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: "v0.6.0", ConfirmClusterName: testCluster}, codes.FailedPrecondition,
		"skips a minor release", "upgrade to the newest v0.5.x first")
	refusedStart(asAdmin, &ichorv1.StartIchorUpgradeRequest{Version: "v0.5.0", InstallerDigest: "sha256:abc", ConfirmClusterName: testCluster}, codes.InvalidArgument,
		"spec.ichor.installerDigest", "64 lowercase hex digits", "nothing was changed")
	refusedStart(asViewer, &ichorv1.StartIchorUpgradeRequest{Version: "v0.5.0", ConfirmClusterName: testCluster}, codes.PermissionDenied, "ichor:vera", "create")

	// ichor-ui's own identity may not create TalosOperations: an operation
	// that exists was created as the signed-in user.
	backend, err := client.New(backendCfg, client.Options{Scheme: suite.Scheme})
	testenv.Must(t, err)
	probe := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, GenerateName: "ichor-probe-"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: testCluster, Type: ichorv1alpha1.OperationIchor,
			Ichor: &ichorv1alpha1.IchorUpgrade{Version: "v0.5.0"}},
	}
	if err := backend.Create(ctx, probe); !apierrors.IsForbidden(err) {
		t.Fatalf("ichor-ui's own identity created a TalosOperation (%v): the test could not tell who created one", err)
	}

	// The allowed start, as an operator: exactly the operation the CLI creates.
	resp, err := asOperator.StartIchorUpgrade(ctx, &ichorv1.StartIchorUpgradeRequest{Version: "0.5.0", ConfirmClusterName: testCluster})
	if err != nil {
		t.Fatalf("an operator's start: %v", err)
	}
	name := resp.GetOperation().GetName()
	deleteOperationWhenDone(t, name)
	if !strings.HasPrefix(name, "ichor-v0-5-0-") || resp.GetOperation().GetType() != ichorv1alpha1.OperationIchor {
		t.Fatalf("the operation returned: %v", resp.GetOperation())
	}
	ops := ichorOperations(t)
	if len(ops) != 1 || ops[0].Name != name {
		t.Fatalf("ichor operations after one start: %v", ops)
	}
	if o := ops[0]; o.Spec.ClusterName != testCluster || o.Spec.Ichor == nil || *o.Spec.Ichor != (ichorv1alpha1.IchorUpgrade{Version: "v0.5.0"}) {
		t.Fatalf("the ichor operation: %+v %+v", o.Spec, o.Spec.Ichor)
	}
	testenv.Must(t, admin.Delete(ctx, &ops[0]))

	// The signature check skipped and the digest pinned, over REST as the
	// console sends it: recorded as spec.ichor.installerSignature: skip.
	digest := "sha256:" + strings.Repeat("0a", 32)
	code, body = rest(t, httpClient(), http.MethodPost, "/api/v1/operations:startIchorUpgrade", adminTok(t),
		`{"version":"v0.5.1","installerDigest":"`+digest+`","skipSignatureCheck":true,"confirmClusterName":"`+testCluster+`"}`)
	op, _ := body["operation"].(map[string]any)
	if code != http.StatusOK || op == nil {
		t.Fatalf("the start with the signature check skipped: %d %v", code, body)
	}
	skipped, _ := op["name"].(string)
	deleteOperationWhenDone(t, skipped)
	ops = ichorOperations(t)
	if len(ops) != 1 || ops[0].Name != skipped || ops[0].Spec.Ichor == nil ||
		*ops[0].Spec.Ichor != (ichorv1alpha1.IchorUpgrade{Version: "v0.5.1", InstallerDigest: digest, InstallerSignature: "skip"}) {
		t.Fatalf("the ichor operations after the skipped check: %+v", ops)
	}
}
