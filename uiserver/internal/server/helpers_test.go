package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// token signs an access token for user in groups.
func token(t testing.TB, user string, groups ...string) string {
	t.Helper()
	tok, _, err := tokens.Mint(identity.Identity{Username: user, Groups: groups}, "", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var (
	viewer   = func(t testing.TB) string { return token(t, "ichor:vera", "ichor:viewer") }
	operator = func(t testing.TB) string { return token(t, "ichor:olivia", "ichor:operator") }
	adminTok = func(t testing.TB) string { return token(t, "ichor:ada", "ichor:admin") }
)

func httpClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true,
	}}
}

// rest calls the REST API and returns the status and the decoded JSON body.
func rest(t testing.TB, c *http.Client, method, path, tok, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if len(b) > 0 && json.Unmarshal(b, &out) != nil {
		out["raw"] = string(b)
	}
	return resp.StatusCode, out
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// grpcConn dials the server's HTTPS port with gRPC as the token's user.
func grpcConn(t testing.TB, tok string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(baseURL, "https://"),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(bearer(tok)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func machines(t testing.TB, tok string) ichorv1.MachineServiceClient {
	return ichorv1.NewMachineServiceClient(grpcConn(t, tok))
}

// createMachine creates a TalosMachine of the test cluster as the administrator,
// with one discovered disk.
func createMachine(t testing.TB, name, state, role string) *ichorv1alpha1.TalosMachine {
	t.Helper()
	ctx := context.Background()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: testCluster,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Approval:    ichorv1alpha1.MachineApproval{State: state},
			Role:        role,
		},
	}
	if state != ichorv1alpha1.ApprovalPending {
		m.Spec.Approval.DecidedBy = "admin"
		m.Spec.Approval.DecidedAt = &metav1.Time{Time: time.Now().Truncate(time.Second)}
	}
	if err := admin.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	m.Status.Stage = ichorv1alpha1.StageMaintenance
	m.Status.Hardware.Disks = []ichorv1alpha1.DiscoveredDisk{{DevicePath: "/dev/sda", Serial: "SER-" + name, SizeBytes: 100 << 30}}
	if err := admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitCached(t, name, m.ResourceVersion)
	return m
}

// waitCached waits until the backend's cache has seen the machine at rv (the
// guard checks read it from there).
func waitCached(t testing.TB, name, rv string) {
	t.Helper()
	c := machines(t, adminTok(t))
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.GetMachine(context.Background(), &ichorv1.GetMachineRequest{Name: name})
		if err == nil && resp.GetMachine().GetResourceVersion() == rv {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend's cache did not see machine %s at resourceVersion %s: %v", name, rv, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getMachine(t testing.TB, name string) (*ichorv1alpha1.TalosMachine, error) {
	t.Helper()
	m := &ichorv1alpha1.TalosMachine{}
	err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: name}, m)
	return m, err
}

func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// removeWhenDone deletes the machine when the test ends and waits until the
// backend's cache no longer shows it, so a later test counts only its own.
func removeWhenDone(t testing.TB, name string) {
	t.Helper()
	t.Cleanup(func() {
		m := &ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name}}
		if err := admin.Delete(context.Background(), m); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete machine %s: %v", name, err)

			return
		}
		c := machines(t, adminTok(t))
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := c.GetMachine(context.Background(), &ichorv1.GetMachineRequest{Name: name}); status.Code(err) == codes.NotFound {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("machine %s still in the backend's cache", name)

				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
