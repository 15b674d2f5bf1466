package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// rotationRequests are the namespace's rotation-credentials requests.
func rotationRequests(t testing.TB) []ichorv1alpha1.TalosCredentialRequest {
	t.Helper()

	list := &ichorv1alpha1.TalosCredentialRequestList{}
	if err := admin.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}

	var out []ichorv1alpha1.TalosCredentialRequest

	for _, r := range list.Items {
		if r.Spec.Purpose == ichorv1alpha1.PurposeRotationCredentials {
			out = append(out, r)
		}
	}

	return out
}

// The CA-rotation dialog's and hand-over card's API: the preview says what a
// rotation does and what refuses it for the signed-in user (the rotate-ca
// verb); the start needs the cluster's name typed and creates the operation
// as the user; the download is refused for what is not a ca-rotation of the
// cluster, and for an administrator makes a rotation-credentials request
// (signed here by the suite's stand-in for the controller) and returns a
// talosconfig that reads the node and a kubeconfig with the Kubernetes
// certificate, the key in the files only.
func TestCARotationAPI(t *testing.T) {
	ctx := context.Background()
	asOperator, asAdmin := operations(t, operator(t)), operations(t, adminTok(t))
	opsBefore := len(clusterOperations(t))

	p, err := asAdmin.PreviewCARotation(ctx, &ichorv1.PreviewCARotationRequest{})
	if err != nil || !p.GetAllowed() || p.GetCluster() != testCluster || !strings.Contains(strings.Join(p.GetSteps(), "\n"), "credentials of the new CAs") {
		t.Fatalf("an administrator's preview: %v %v", p, err)
	}

	p, err = asOperator.PreviewCARotation(ctx, &ichorv1.PreviewCARotationRequest{})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "`rotate-ca` on `talosoperations`") {
		t.Fatalf("an operator's preview: %v %v", p, err)
	}

	p, err = asAdmin.PreviewCARotation(ctx, &ichorv1.PreviewCARotationRequest{TalosOnly: true, KubernetesOnly: true})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "nothing to rotate") {
		t.Fatalf("a preview of no CA: %v %v", p, err)
	}

	for _, tc := range []struct {
		req  *ichorv1.StartCARotationRequest
		tok  string
		code codes.Code
		says string
	}{
		{&ichorv1.StartCARotationRequest{}, adminTok(t), codes.InvalidArgument, "confirm_cluster_name is required"},
		{&ichorv1.StartCARotationRequest{ConfirmClusterName: "prd"}, adminTok(t), codes.InvalidArgument, `type "prod" to confirm`},
		{&ichorv1.StartCARotationRequest{ConfirmClusterName: testCluster, TalosOnly: true, KubernetesOnly: true}, adminTok(t), codes.InvalidArgument, "exclude each other"},
		{&ichorv1.StartCARotationRequest{ConfirmClusterName: testCluster}, operator(t), codes.PermissionDenied, "`rotate-ca` on `talosoperations`"},
		{&ichorv1.StartCARotationRequest{ConfirmClusterName: testCluster}, viewer(t), codes.PermissionDenied, "create"},
	} {
		_, err := operations(t, tc.tok).StartCARotation(ctx, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want %s saying %q", tc.req, err, tc.code, tc.says)
		}
	}

	if n := len(clusterOperations(t)); n != opsBefore {
		t.Fatalf("refused starts created %d operation(s)", n-opsBefore)
	}

	resp, err := asAdmin.StartCARotation(ctx, &ichorv1.StartCARotationRequest{ConfirmClusterName: testCluster, TalosOnly: true})
	if err != nil {
		t.Fatalf("an administrator's CA rotation: %v", err)
	}

	name := resp.GetOperation().GetName()
	deleteOperationWhenDone(t, name)

	o := getOperation(t, name)
	if o.Spec.Type != ichorv1alpha1.OperationCARotation || o.Spec.ClusterName != testCluster || o.Spec.CARotation == nil ||
		o.Spec.CARotation.Kubernetes == nil || *o.Spec.CARotation.Kubernetes {
		t.Fatalf("the ca-rotation operation: %+v", o.Spec)
	}

	t.Cleanup(func() {
		list := &ichorv1alpha1.TalosCredentialRequestList{}
		_ = admin.List(context.Background(), list, client.InNamespace(testNS))

		for i := range list.Items {
			if list.Items[i].Spec.Purpose == ichorv1alpha1.PurposeRotationCredentials {
				_ = admin.Delete(context.Background(), &list.Items[i])
			}
		}
	})

	_, err = asAdmin.DownloadRotationCredentials(ctx, &ichorv1.DownloadRotationCredentialsRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "operation is required") {
		t.Errorf("a download naming no operation: %v", err)
	}

	// No role holds the credentials by default, ichor-admin neither.
	_, err = asAdmin.DownloadRotationCredentials(ctx, &ichorv1.DownloadRotationCredentialsRequest{Operation: name})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "kubectl create rolebinding ca-rotation-credentials -n "+testNS) {
		t.Fatalf("an unbound administrator's download: %v", err)
	}

	if reqs := rotationRequests(t); len(reqs) != 0 {
		t.Fatalf("a refused download made %d request(s)", len(reqs))
	}

	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "ca-rotation-credentials"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: guard.RotationCredentialsRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "ichor:ada"}},
	}
	if err := admin.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = admin.Delete(context.Background(), binding) })

	var creds *ichorv1.DownloadRotationCredentialsResponse

	// The backend's authorization decisions are cached for a moment.
	testenv.Eventually(t, time.Minute, "the bound administrator's download", func() error {
		var err error
		creds, err = asAdmin.DownloadRotationCredentials(ctx, &ichorv1.DownloadRotationCredentialsRequest{Operation: name})

		return err
	})

	tc, err := clientconfig.FromBytes(creds.GetTalosconfig())
	if err != nil {
		t.Fatalf("the download's talosconfig: %v", err)
	}

	kc, err := clientcmd.Load(creds.GetKubeconfig())
	if err != nil || kc.CurrentContext == "" || len(kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].ClientCertificateData) == 0 {
		t.Fatalf("the download's kubeconfig: %v", err)
	}

	if creds.GetRequest() == "" || creds.GetExpiresAt() == nil {
		t.Fatalf("the download names no request or expiry: %v", creds)
	}

	tcr := &ichorv1alpha1.TalosCredentialRequest{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: creds.GetRequest()}, tcr); err != nil ||
		tcr.Spec.Purpose != ichorv1alpha1.PurposeRotationCredentials || tcr.Spec.OperationName != name {
		t.Fatalf("the request behind the download: %+v, %v", tcr.Spec, err)
	}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	c, err := talosclient.New(cctx, talosclient.WithConfig(tc))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck

	if _, err := c.Version(talosclient.WithNode(cctx, nodeAddr)); err != nil {
		t.Fatalf("Version with the rotation's talosconfig: %v", err)
	}

	if key := tc.Contexts[tc.Context].Key; strings.Contains(logBuf.String(), key) {
		t.Fatal("the access log holds the talosconfig's key")
	}
}

// The key-rotation dialog's API: the preview says what a rotation does and
// what refuses it for the signed-in user (the rotate-keys verb); the start
// needs the cluster's name typed and creates the operation as the user.
func TestKeyRotationAPI(t *testing.T) {
	ctx := context.Background()
	asOperator, asAdmin := operations(t, operator(t)), operations(t, adminTok(t))
	opsBefore := len(clusterOperations(t))

	p, err := asAdmin.PreviewKeyRotation(ctx, &ichorv1.PreviewKeyRotationRequest{})
	if err != nil || !p.GetAllowed() || p.GetCluster() != testCluster || !strings.Contains(strings.Join(p.GetSteps(), "\n"), "write every Secret again") {
		t.Fatalf("an administrator's preview: %v %v", p, err)
	}

	p, err = asOperator.PreviewKeyRotation(ctx, &ichorv1.PreviewKeyRotationRequest{})
	if err != nil || p.GetAllowed() || !strings.Contains(refusalText(p.GetRefusals()), "`rotate-keys` on `talosoperations`") {
		t.Fatalf("an operator's preview: %v %v", p, err)
	}

	for _, tc := range []struct {
		req  *ichorv1.StartKeyRotationRequest
		tok  string
		code codes.Code
		says string
	}{
		{&ichorv1.StartKeyRotationRequest{}, adminTok(t), codes.InvalidArgument, "confirm_cluster_name is required"},
		{&ichorv1.StartKeyRotationRequest{ConfirmClusterName: "prd"}, adminTok(t), codes.InvalidArgument, `type "prod" to confirm`},
		{&ichorv1.StartKeyRotationRequest{ConfirmClusterName: testCluster, ServiceAccountOnly: true, SecretboxOnly: true}, adminTok(t), codes.InvalidArgument, "exclude each other"},
		{&ichorv1.StartKeyRotationRequest{ConfirmClusterName: testCluster}, operator(t), codes.PermissionDenied, "`rotate-keys` on `talosoperations`"},
		{&ichorv1.StartKeyRotationRequest{ConfirmClusterName: testCluster}, viewer(t), codes.PermissionDenied, "create"},
	} {
		_, err := operations(t, tc.tok).StartKeyRotation(ctx, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want %s saying %q", tc.req, err, tc.code, tc.says)
		}
	}

	if n := len(clusterOperations(t)); n != opsBefore {
		t.Fatalf("refused starts created %d operation(s)", n-opsBefore)
	}

	resp, err := asAdmin.StartKeyRotation(ctx, &ichorv1.StartKeyRotationRequest{ConfirmClusterName: testCluster, ServiceAccountOnly: true})
	if err != nil {
		t.Fatalf("an administrator's key rotation: %v", err)
	}

	name := resp.GetOperation().GetName()
	deleteOperationWhenDone(t, name)

	o := getOperation(t, name)
	if o.Spec.Type != ichorv1alpha1.OperationKeyRotation || o.Spec.ClusterName != testCluster || o.Spec.KeyRotation == nil ||
		!o.Spec.KeyRotation.ServiceAccount || o.Spec.KeyRotation.Secretbox {
		t.Fatalf("the key-rotation operation: %+v", o.Spec)
	}
}
