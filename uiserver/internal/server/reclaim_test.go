package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

const reclaimLabel = "ichor.maesh.dev/machinereclaim"

func reclaims(t testing.TB, tok string) ichorv1.ReclaimServiceClient {
	return ichorv1.NewReclaimServiceClient(grpcConn(t, tok))
}

// foreignTalosconfig is a talosconfig of another cluster: a CA and an
// os:admin client certificate with its key. secrets are strings that must
// never leave the request: the key (base64, as in the file, and a line of its
// PEM) and the whole file.
type foreignTalosconfig struct {
	yaml    string
	secrets []string
}

func newForeignTalosconfig(t testing.TB) foreignTalosconfig {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "foreign-admin", Organization: []string{"os:admin"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crtPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	keyB64 := base64.StdEncoding.EncodeToString(keyPEM)
	keyLine := strings.Split(string(keyPEM), "\n")[1]
	b64 := base64.StdEncoding.EncodeToString
	y := fmt.Sprintf("context: foreign\ncontexts:\n  foreign:\n    endpoints:\n      - 10.99.0.1\n    ca: %s\n    crt: %s\n    key: %s\n",
		b64(crtPEM), b64(crtPEM), keyB64)
	return foreignTalosconfig{yaml: y, secrets: []string{keyB64, keyB64[20:60], keyLine}}
}

// assertNoSecret fails when text holds any of tc's secrets.
func (tc foreignTalosconfig) assertNoSecret(t testing.TB, where, text string) {
	t.Helper()
	for _, s := range tc.secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds the foreign talosconfig's key material", where)
			return
		}
	}
}

// reclaimObjects returns the MachineReclaims and the credential Secrets (by
// the label StartReclaim puts on them) of the test namespace.
func reclaimObjects(t testing.TB) ([]ichorv1alpha1.MachineReclaim, []corev1.Secret) {
	t.Helper()
	ctx := context.Background()
	mrs := &ichorv1alpha1.MachineReclaimList{}
	if err := admin.List(ctx, mrs, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	secrets := &corev1.SecretList{}
	if err := admin.List(ctx, secrets, client.InNamespace(testNS), client.HasLabels{reclaimLabel}); err != nil {
		t.Fatal(err)
	}
	return mrs.Items, secrets.Items
}

func assertNothingNew(t testing.TB, what string, mrsBefore, secretsBefore int) {
	t.Helper()
	mrs, secrets := reclaimObjects(t)
	if len(mrs) != mrsBefore || len(secrets) != secretsBefore {
		t.Errorf("%s: %d MachineReclaims and %d credential Secrets, want %d and %d: a refused request left something behind",
			what, len(mrs), len(secrets), mrsBefore, secretsBefore)
	}
}

func TestReclaimStartConfirmCancel(t *testing.T) {
	ctx := context.Background()
	tc := newForeignTalosconfig(t)
	responses := make([]string, 0, 8)

	// Start over REST, so that the request body crosses the access log's handler.
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/reclaims", adminTok(t),
		toJSON(map[string]any{"address": "10.99.0.5", "talosconfig": tc.yaml, "ttl": "20m", "forceUngraceful": true}))
	responses = append(responses, toJSON(body))
	if code != http.StatusOK {
		t.Fatalf("admin start: %d %v", code, body)
	}
	rc, _ := body["reclaim"].(map[string]any)
	name, _ := rc["name"].(string)
	if name == "" || rc["address"] != "10.99.0.5" || rc["ttl"] != "20m0s" || rc["forceUngraceful"] != true || rc["expiresAt"] == nil {
		t.Fatalf("start response: %v", body)
	}

	// The MachineReclaim names the Secret, which holds the talosconfig.
	mr := &ichorv1alpha1.MachineReclaim{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, mr); err != nil {
		t.Fatalf("the MachineReclaim was not created: %v", err)
	}
	if mr.Spec.Address != "10.99.0.5" || mr.Spec.TTL == nil || mr.Spec.TTL.Duration != 20*time.Minute || !mr.Spec.ForceUngraceful ||
		mr.Spec.Force || mr.Spec.ConfirmUUID != "" || mr.Spec.CredentialsRef.Name == "" {
		t.Errorf("MachineReclaim spec: %+v", mr.Spec)
	}
	sec := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: mr.Spec.CredentialsRef.Name}, sec); err != nil {
		t.Fatalf("the credential Secret was not created: %v", err)
	}
	if sec.Type != ichorv1alpha1.ForeignTalosconfigSecretType || string(sec.Data["talosconfig"]) != tc.yaml || sec.Labels[reclaimLabel] != name {
		t.Errorf("credential Secret: type %q, labels %v, talosconfig stored: %t", sec.Type, sec.Labels, string(sec.Data["talosconfig"]) == tc.yaml)
	}

	// Before the controller has inspected the machine there is nothing to confirm.
	_, err := reclaims(t, adminTok(t)).ConfirmReclaim(ctx, &ichorv1.ConfirmReclaimRequest{Name: name, Uuid: "whatever"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "wait until the controller has inspected") {
		t.Errorf("confirm before the inspection: %v, want FailedPrecondition saying to wait", err)
	}

	// The controller does not run here: the inspection is set by hand.
	const uuid = "4c4c4544-0042-3510-8052-b7c04f4b3732"
	mr.Status = ichorv1alpha1.MachineReclaimStatus{
		Phase: ichorv1alpha1.ReclaimAwaitingConfirmation,
		Inspection: ichorv1alpha1.ReclaimInspection{
			UUID: uuid, Serial: "SER-1", Hostname: "foreign-w1", ClusterName: "other",
			UserDisks: []string{"/dev/sdb (100 GiB)"}, EncryptedDisks: []string{"/dev/sdb (100 GiB)"},
		},
		Conditions: []metav1.Condition{{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "AwaitingConfirmation",
			Message: "type the UUID", LastTransitionTime: metav1.Now()}},
	}
	if err := admin.Status().Update(ctx, mr); err != nil {
		t.Fatal(err)
	}

	got, err := reclaims(t, adminTok(t)).GetReclaim(ctx, &ichorv1.GetReclaimRequest{Name: name})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	responses = append(responses, got.String())
	r := got.GetReclaim()
	in := r.GetInspection()
	if r.GetPhase() != "AwaitingConfirmation" || r.GetMessage() != "type the UUID" || in.GetUuid() != uuid || in.GetHostname() != "foreign-w1" ||
		in.GetClusterName() != "other" || len(in.GetEncryptedDisks()) != 1 || r.GetConfirmed() {
		t.Errorf("reclaim: %v", r)
	}
	code, body = rest(t, httpClient(), http.MethodGet, "/api/v1/reclaims", adminTok(t), "")
	responses = append(responses, toJSON(body))
	if code != http.StatusOK || !strings.Contains(toJSON(body), `"`+name+`"`) {
		t.Errorf("REST list: %d %v", code, body)
	}

	// A wrong UUID is refused and nothing is written.
	_, err = reclaims(t, adminTok(t)).ConfirmReclaim(ctx, &ichorv1.ConfirmReclaimRequest{Name: name, Uuid: "4c4c4544-0000-0000-0000-000000000000"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not the machine's UUID") || !strings.Contains(err.Error(), uuid) {
		t.Errorf("confirm with a wrong UUID: %v", err)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, mr); err != nil || mr.Spec.ConfirmUUID != "" {
		t.Errorf("a wrong UUID was written: %q (%v)", mr.Spec.ConfirmUUID, err)
	}
	// A viewer may not confirm.
	_, err = reclaims(t, viewer(t)).ConfirmReclaim(ctx, &ichorv1.ConfirmReclaimRequest{Name: name, Uuid: uuid})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer confirm: %v, want PermissionDenied", err)
	}

	// The right UUID, typed in capitals with spaces, is written as the node reports it.
	conf, err := reclaims(t, adminTok(t)).ConfirmReclaim(ctx, &ichorv1.ConfirmReclaimRequest{Name: name, Uuid: "  " + strings.ToUpper(uuid) + " "})
	if err != nil {
		t.Fatalf("confirm: %v", err)
	}
	responses = append(responses, conf.String())
	if !conf.GetReclaim().GetConfirmed() {
		t.Errorf("confirm response: %v", conf.GetReclaim())
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, mr); err != nil || mr.Spec.ConfirmUUID != uuid {
		t.Errorf("spec.confirmUUID %q (%v), want %s", mr.Spec.ConfirmUUID, err, uuid)
	}

	// An operator may not cancel; the admin cancels: the credential is gone at
	// once, the MachineReclaim stays as the record.
	_, err = reclaims(t, operator(t)).CancelReclaim(ctx, &ichorv1.CancelReclaimRequest{Name: name})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("operator cancel: %v, want PermissionDenied", err)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: sec.Name}, &corev1.Secret{}); err != nil {
		t.Errorf("the credential is gone after a refused cancel: %v", err)
	}
	code, body = rest(t, httpClient(), http.MethodPost, "/api/v1/reclaims/"+name+":cancel", adminTok(t), "{}")
	responses = append(responses, toJSON(body))
	if code != http.StatusOK {
		t.Fatalf("admin cancel: %d %v", code, body)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: sec.Name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the credential Secret after cancel: %v, want NotFound", err)
	}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: name}, mr); err != nil {
		t.Errorf("the MachineReclaim is gone after cancel: %v", err)
	}
	// Cancelling again is harmless.
	if _, err := reclaims(t, adminTok(t)).CancelReclaim(ctx, &ichorv1.CancelReclaimRequest{Name: name}); err != nil {
		t.Errorf("second cancel: %v", err)
	}

	// A reset already sent cannot be cancelled.
	mr.Status.Phase = ichorv1alpha1.ReclaimResetting
	if err := admin.Status().Update(ctx, mr); err != nil {
		t.Fatal(err)
	}
	_, err = reclaims(t, adminTok(t)).CancelReclaim(ctx, &ichorv1.CancelReclaimRequest{Name: name})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already sent") {
		t.Errorf("cancel while resetting: %v, want FailedPrecondition", err)
	}

	for i, resp := range responses {
		tc.assertNoSecret(t, fmt.Sprintf("response %d", i), resp)
	}
	tc.assertNoSecret(t, "the access log", logBuf.String())
	if !strings.Contains(logBuf.String(), `"path":"/api/v1/reclaims"`) {
		t.Errorf("the access log has no line for POST /api/v1/reclaims")
	}
}

func TestReclaimRefusedWithoutTheVerb(t *testing.T) {
	tc := newForeignTalosconfig(t)
	mrs, secrets := reclaimObjects(t)
	req := toJSON(map[string]any{"address": "10.99.0.6", "talosconfig": tc.yaml})
	for _, who := range []struct {
		name string
		tok  string
	}{{"viewer", viewer(t)}, {"operator", operator(t)}} {
		code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/reclaims", who.tok, req)
		msg, _ := body["message"].(string)
		if code != http.StatusForbidden || !strings.Contains(msg, "machinereclaims") || !strings.Contains(msg, "ichor-admin") {
			t.Errorf("%s start: %d %v, want 403 naming what it needs", who.name, code, body)
		}
		tc.assertNoSecret(t, who.name+"'s refusal", toJSON(body))
		_, err := reclaims(t, who.tok).ListReclaims(context.Background(), &ichorv1.ListReclaimsRequest{})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s list: %v, want PermissionDenied", who.name, err)
		}
	}
	assertNothingNew(t, "after the refusals", len(mrs), len(secrets))
	tc.assertNoSecret(t, "the access log", logBuf.String())
}

func TestReclaimBadInput(t *testing.T) {
	tc := newForeignTalosconfig(t)
	mrs, secrets := reclaimObjects(t)
	// A talosconfig whose key is not the certificate's: the error must not quote either.
	other := newForeignTalosconfig(t)
	withoutKey, _, _ := strings.Cut(tc.yaml, "    key: ")
	_, otherKey, _ := strings.Cut(other.yaml, "    key: ")
	mismatched := withoutKey + "    key: " + otherKey
	noContext := strings.Replace(tc.yaml, "context: foreign\n", "", 1)
	for _, c := range []struct {
		name, address, talosconfig, ttl, want string
	}{
		{"host name", "node-1.example", tc.yaml, "", "not an IP address"},
		{"address with port", "10.99.0.7:50000", tc.yaml, "", "not an IP address"},
		{"no address", "", tc.yaml, "", "address is required"},
		{"no talosconfig", "10.99.0.7", "", "", "talosconfig: is required"},
		{"not YAML", "10.99.0.7", "{{{ not yaml", "", "not valid YAML"},
		{"no current context", "10.99.0.7", noContext, "", "no current context"},
		{"key of another certificate", "10.99.0.7", mismatched, "", "not a certificate and its key"},
		{"no key", "10.99.0.7", withoutKey, "", "has no key"},
		{"ttl too long", "10.99.0.7", tc.yaml, "2h", "between 1m0s and 1h0m0s"},
		{"ttl not a duration", "10.99.0.7", tc.yaml, "soon", "not a duration"},
	} {
		code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/reclaims", adminTok(t),
			toJSON(map[string]any{"address": c.address, "talosconfig": c.talosconfig, "ttl": c.ttl}))
		msg, _ := body["message"].(string)
		if code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %v, want 400 saying %q", c.name, code, body, c.want)
		}
		tc.assertNoSecret(t, c.name+"'s error", toJSON(body))
		other.assertNoSecret(t, c.name+"'s error", toJSON(body))
	}
	assertNothingNew(t, "after bad input", len(mrs), len(secrets))
	tc.assertNoSecret(t, "the access log", logBuf.String())
}

// TestReclaimRefusedReclaimLeavesNoSecret: when the API server refuses the
// MachineReclaim after the Secret was written, the Secret is deleted again.
// An admission policy refuses reclaims of one address, as a webhook would.
func TestReclaimRefusedReclaimLeavesNoSecret(t *testing.T) {
	ctx := context.Background()
	const addr = "10.99.0.66"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-refuse-reclaim-of-" + strings.ReplaceAll(addr, ".", "-")},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{ichorv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"machinereclaims"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: fmt.Sprintf("object.spec.address != '%s'", addr), Message: "refused by the test"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), o) })
	}
	// The policy takes effect after a moment: wait with a dry run.
	probe := &ichorv1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "probe"},
		Spec:       ichorv1alpha1.MachineReclaimSpec{Address: addr, CredentialsRef: ichorv1alpha1.SecretReference{Name: "none"}},
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := admin.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "refused by the test") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test's admission policy did not take effect: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	tc := newForeignTalosconfig(t)
	mrs, secrets := reclaimObjects(t)
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/reclaims", adminTok(t),
		toJSON(map[string]any{"address": addr, "talosconfig": tc.yaml}))
	msg, _ := body["message"].(string)
	if code < 400 || !strings.Contains(msg, "refused by the test") {
		t.Errorf("start refused by admission: %d %v", code, body)
	}
	tc.assertNoSecret(t, "the refusal", toJSON(body))
	assertNothingNew(t, "after the refused MachineReclaim", len(mrs), len(secrets))
}

// TestReclaimBackendMayWriteOnlyForeignTalosconfigs: ichor-ui's own identity
// may create and delete Secrets of the foreign-talosconfig type and no other
// (the admission policy in kustomize/base/rbac/ui.yaml), and read none.
func TestReclaimBackendMayWriteOnlyForeignTalosconfigs(t *testing.T) {
	ctx := context.Background()
	cfg, err := suite.Env.UserConfig(backendUser, "system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	backend, err := client.New(cfg, client.Options{Scheme: suite.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "test-backend-opaque"}, Type: corev1.SecretTypeOpaque,
		StringData: map[string]string{"a": "b"}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := backend.Create(ctx, opaque.DeepCopy(), client.DryRunAll)
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			if !strings.Contains(err.Error(), "foreign-talosconfig") {
				t.Errorf("refusal of an Opaque Secret: %v, want the admission policy's message", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ichor-ui's identity may create an Opaque Secret: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// It may not delete one either.
	if err := admin.Create(ctx, opaque.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), opaque) })
	if err := backend.Delete(ctx, opaque.DeepCopy()); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("ichor-ui's identity deleting an Opaque Secret: %v, want refused", err)
	}
	if err := backend.Get(ctx, client.ObjectKeyFromObject(opaque), &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Errorf("ichor-ui's identity reading a Secret: %v, want Forbidden", err)
	}
	// A foreign talosconfig it may create and delete.
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "test-backend-foreign"},
		Type: ichorv1alpha1.ForeignTalosconfigSecretType, StringData: map[string]string{"talosconfig": "x"}}
	if err := backend.Create(ctx, foreign); err != nil {
		t.Fatalf("ichor-ui's identity creating a foreign talosconfig: %v", err)
	}
	if err := backend.Delete(ctx, foreign); err != nil {
		t.Errorf("ichor-ui's identity deleting a foreign talosconfig: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
