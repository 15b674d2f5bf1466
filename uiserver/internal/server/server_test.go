package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

func TestHealthMetricsAndSPA(t *testing.T) {
	c := httpClient()
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/": "<html", "/nodes/some-node": "<html"} {
		code, body := rest(t, c, http.MethodGet, path, "", "")
		if code != http.StatusOK || !strings.Contains(body["raw"].(string), want) {
			t.Errorf("GET %s: %d %v, want 200 with %q", path, code, body, want)
		}
	}
	// /metrics has a listener of its own (TestMetricsNotOnThePublicListener).
	// HTTPS only: a plain HTTP request to the port is not served.
	plain, err := http.NewRequestWithContext(context.Background(), http.MethodGet, strings.Replace(baseURL, "https://", "http://", 1)+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(plain)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP was served: %s", b)
		}
	}
}

func TestUnauthenticated(t *testing.T) {
	c := httpClient()
	code, body := rest(t, c, http.MethodGet, "/api/v1/machines", "", "")
	if code != http.StatusUnauthorized || !strings.Contains(body["message"].(string), "sign in") {
		t.Errorf("no token: %d %v, want 401 asking to sign in", code, body)
	}
	bad := token(t, "ichor:vera", "ichor:viewer") + "x"
	code, body = rest(t, c, http.MethodGet, "/api/v1/machines", bad, "")
	if code != http.StatusUnauthorized || strings.Contains(body["message"].(string), bad) {
		t.Errorf("bad token: %d %v, want 401 without the token", code, body)
	}
}

// The user client sends nothing without a signed-in user: it never falls
// back to the backend's own identity.
func TestNoIdentityFailsClosed(t *testing.T) {
	cfg, err := suite.Env.UserConfig(backendUser)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := kube.New(kube.Options{Config: cfg, Scheme: suite.Scheme, Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	err = clients.User.List(context.Background(), &ichorv1alpha1.TalosMachineList{}, client.InNamespace(testNS))
	if !errors.Is(err, kube.ErrNoIdentity) {
		t.Fatalf("a request without a user: %v, want ErrNoIdentity", err)
	}
}

func TestViewerListsButCannotApprove(t *testing.T) {
	createMachine(t, "viewer-m1", ichorv1alpha1.ApprovalPending, "")
	c := httpClient()
	tok := viewer(t)
	code, body := rest(t, c, http.MethodGet, "/api/v1/machines", tok, "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), `"viewer-m1"`) {
		t.Fatalf("viewer list: %d %v", code, body)
	}
	code, body = rest(t, c, http.MethodPost, "/api/v1/machines/viewer-m1:approve", tok, `{"role":"worker"}`)
	msg, _ := body["message"].(string)
	if code != http.StatusForbidden || !strings.Contains(msg, "403 Forbidden") || !strings.Contains(msg, "ichor:vera") {
		t.Fatalf("viewer approve over REST: %d %q, want 403 naming the user and the API server's refusal", code, msg)
	}
	_, err := machines(t, tok).ApproveMachine(context.Background(), &ichorv1.ApproveMachineRequest{Name: "viewer-m1", Role: "worker"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer approve over gRPC: %v, want PermissionDenied", err)
	}
	m, err := getMachine(t, "viewer-m1")
	if err != nil || m.Spec.Approval.State != ichorv1alpha1.ApprovalPending {
		t.Fatalf("the machine changed after a refused approval: %v %+v", err, m.Spec.Approval)
	}
	// A viewer cannot remove either.
	_, err = machines(t, tok).RemoveMachine(context.Background(), &ichorv1.RemoveMachineRequest{Name: "viewer-m1"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer remove: %v, want PermissionDenied", err)
	}
}

func TestOperatorApproves(t *testing.T) {
	createMachine(t, "op-m1", ichorv1alpha1.ApprovalPending, "")
	resp, err := machines(t, operator(t)).ApproveMachine(context.Background(), &ichorv1.ApproveMachineRequest{
		Name: "op-m1", Role: ichorv1alpha1.RoleWorker, Hostname: "worker-1", Labels: map[string]string{"rack": "a"},
	})
	if err != nil {
		t.Fatalf("operator approve: %v", err)
	}
	if resp.GetMachine().GetApproval().GetState() != ichorv1alpha1.ApprovalApproved {
		t.Errorf("response: %v", resp.GetMachine().GetApproval())
	}
	m, err := getMachine(t, "op-m1")
	if err != nil {
		t.Fatal(err)
	}
	a := m.Spec.Approval
	if a.State != ichorv1alpha1.ApprovalApproved || a.DecidedBy != "ichor:olivia" || a.DecidedAt == nil ||
		m.Spec.Role != ichorv1alpha1.RoleWorker || m.Spec.Install.Disk == nil || m.Spec.Install.Disk.Serial != "SER-op-m1" {
		t.Fatalf("approved machine: %+v %+v", a, m.Spec)
	}
	// The write was made as the user: the API server recorded their name.
	found := false
	for _, f := range m.ManagedFields {
		if f.Operation == "Update" && f.Manager != "" {
			found = true
		}
	}
	if !found {
		t.Error("no update recorded")
	}

	// Approving again is refused with the reason, nothing written.
	_, err = machines(t, operator(t)).ApproveMachine(context.Background(), &ichorv1.ApproveMachineRequest{Name: "op-m1", Role: "worker"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "already approved") {
		t.Errorf("second approval: %v", err)
	}
	// Bad input says what was wrong.
	_, err = machines(t, operator(t)).ApproveMachine(context.Background(), &ichorv1.ApproveMachineRequest{Name: "op-m1", Role: "boss"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "controlplane or worker") {
		t.Errorf("bad role: %v", err)
	}
}

func TestOperatorRejects(t *testing.T) {
	createMachine(t, "rej-m1", ichorv1alpha1.ApprovalPending, "")
	c := httpClient()
	code, body := rest(t, c, http.MethodPost, "/api/v1/machines/rej-m1:reject", operator(t), `{}`)
	if code != http.StatusOK {
		t.Fatalf("reject: %d %v", code, body)
	}
	m, err := getMachine(t, "rej-m1")
	if err != nil || m.Spec.Approval.State != ichorv1alpha1.ApprovalRejected || m.Spec.Approval.DecidedBy != "ichor:olivia" {
		t.Fatalf("rejected machine: %v %+v", err, m.Spec.Approval)
	}
}

func TestWatchResumesFromToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := machines(t, viewer(t))
	stream, err := c.WatchMachines(ctx, &ichorv1.WatchMachinesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetType() == ichorv1.WatchMachinesResponse_EVENT_TYPE_SYNCED {
			token = ev.GetResumeToken()
			break
		}
	}
	if token == "" {
		t.Fatal("SYNCED carries no resume token")
	}
	createMachine(t, "watch-m1", ichorv1alpha1.ApprovalPending, "")
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetMachine().GetName() == "watch-m1" {
			token = ev.GetResumeToken()
			break
		}
	}
	cancel()

	// While no one watches, the machine changes; resuming from the token sees it.
	m, err := getMachine(t, "watch-m1")
	if err != nil {
		t.Fatal(err)
	}
	m.Spec.Hostname = "renamed"
	if err := admin.Update(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	stream, err = c.WatchMachines(ctx2, &ichorv1.WatchMachinesRequest{ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("resumed watch: %v", err)
		}
		if ev.GetMachine().GetName() == "watch-m1" && ev.GetMachine().GetHostname() == "renamed" {
			if ev.GetType() != ichorv1.WatchMachinesResponse_EVENT_TYPE_MODIFIED {
				t.Errorf("resumed event type %v, want MODIFIED", ev.GetType())
			}
			return
		}
	}
}

func TestWhoAmIAndCluster(t *testing.T) {
	c := httpClient()
	code, body := rest(t, c, http.MethodGet, "/api/v1/whoami", operator(t), "")
	if code != http.StatusOK || body["username"] != "ichor:olivia" {
		t.Fatalf("whoami: %d %v", code, body)
	}
	code, body = rest(t, c, http.MethodGet, "/api/v1/cluster", viewer(t), "")
	cl, _ := body["cluster"].(map[string]any)
	if code != http.StatusOK || cl["name"] != testCluster || cl["talosVersion"] != "v1.14.1" {
		t.Fatalf("cluster: %d %v", code, body)
	}
}

func TestAccessLogHoldsNoSecret(t *testing.T) {
	tok := operator(t)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, baseURL+"/api/v1/machines?access_token=query-secret-123", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Cookie", "session=cookie-secret-456")
	resp, err := httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if _, err := machines(t, tok).ListMachines(context.Background(), &ichorv1.ListMachinesRequest{}); err != nil {
		t.Fatal(err)
	}
	log := logBuf.String()
	for _, secret := range []string{tok, tok[len(tok)-20:], "query-secret-123", "cookie-secret-456", "Bearer"} {
		if strings.Contains(log, secret) {
			t.Errorf("the access log holds a secret (%.12s…)", secret)
		}
	}
	if !strings.Contains(log, `"user":"ichor:olivia"`) || !strings.Contains(log, `"path":"/api/v1/machines"`) || !strings.Contains(log, `"route":"grpc"`) {
		t.Errorf("the access log lacks the user, path or gRPC line:\n%s", log)
	}
}

func TestEffectiveConfigMasksSecrets(t *testing.T) {
	createMachine(t, "cfg-cp1", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleControlPlane)
	resp, err := machines(t, viewer(t)).GetEffectiveConfig(context.Background(), &ichorv1.GetEffectiveConfigRequest{Name: "cfg-cp1"})
	if err != nil {
		t.Fatal(err)
	}
	var sawToken, sawSystem bool
	for _, e := range resp.GetEntries() {
		if strings.Contains(e.GetValueJson(), "PRIVATE KEY") || strings.Contains(e.GetValueJson(), "BEGIN") {
			t.Errorf("%s:%s holds key material: %.40s", e.GetKind(), e.GetField(), e.GetValueJson())
		}
		if e.GetKind() == "v1alpha1" && e.GetField() == "machine.token" {
			sawToken = true
			if !e.GetSecret() || e.GetValueJson() != `"******"` {
				t.Errorf("machine.token is not masked: %v", e)
			}
		}
		if e.GetOriginLayer() == "system" {
			sawSystem = true
		}
	}
	if !sawToken || !sawSystem || len(resp.GetSteps()) == 0 {
		t.Errorf("effective config: token %v, system layer %v, %d steps, %d entries", sawToken, sawSystem, len(resp.GetSteps()), len(resp.GetEntries()))
	}
	// A pending machine has no role, so no configuration.
	createMachine(t, "cfg-pending", ichorv1alpha1.ApprovalPending, "")
	_, err = machines(t, viewer(t)).GetEffectiveConfig(context.Background(), &ichorv1.GetEffectiveConfigRequest{Name: "cfg-pending"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("pending machine: %v", err)
	}
}

// TestEffectiveConfigRendersTheStoragePreset: the console's effective
// configuration is rendered from the same input as the controller's
// (render.LoadInput): a TalosStorage selecting the machine puts its preset's
// UserVolumeConfig for the storage disk into the system layer.
func TestEffectiveConfigRendersTheStoragePreset(t *testing.T) {
	ctx := context.Background()
	m := createMachine(t, "cfg-storage", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}
		cur.Labels = map[string]string{"storage": "yes"}
		cur.Spec.Disks = []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.storage"}, Role: ichorv1alpha1.DiskRoleStorage}}
		return admin.Update(ctx, cur)
	}); err != nil {
		t.Fatal(err)
	}
	st := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "cfg-storage"},
		Spec: ichorv1alpha1.TalosStorageSpec{ClusterName: testCluster, Preset: ichorv1alpha1.StoragePresetLonghornV1,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"storage": "yes"}}},
	}
	if err := admin.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), st) })

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := machines(t, viewer(t)).GetEffectiveConfig(ctx, &ichorv1.GetEffectiveConfigRequest{Name: "cfg-storage"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			if e.GetKind() == "UserVolumeConfig" && e.GetOriginLayer() == "system" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no UserVolumeConfig of the longhorn-v1 preset in the effective configuration (%d entries)", len(resp.GetEntries()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
