package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/api"
	"github.com/maeshinshin/ichor/uiserver/internal/certs"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
	"github.com/maeshinshin/ichor/uiserver/internal/server"
)

func settings(t testing.TB, tok string) ichorv1.SettingsServiceClient {
	return ichorv1.NewSettingsServiceClient(grpcConn(t, tok))
}

// resetInstallation makes the IchorInstallation `ichor` exist with no
// settings and installed version v0.4.0, and returns it.
func resetInstallation(t testing.TB) *ichorv1alpha1.IchorInstallation {
	t.Helper()
	ctx := context.Background()
	inst := &ichorv1alpha1.IchorInstallation{}
	err := admin.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst)
	switch {
	case apierrors.IsNotFound(err):
		inst = &ichorv1alpha1.IchorInstallation{
			ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
			Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.4.0"}},
		}
		if err := admin.Create(ctx, inst); err != nil {
			t.Fatal(err)
		}
	case err != nil:
		t.Fatal(err)
	default:
		inst.Spec.Settings = ichorv1alpha1.IchorSettings{}
		if err := admin.Update(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	inst.Status.InstalledVersion = "v0.4.0"
	if err := admin.Status().Update(ctx, inst); err != nil {
		t.Fatal(err)
	}
	return inst
}

func getInstallation(t testing.TB) *ichorv1alpha1.IchorInstallation {
	t.Helper()
	inst := &ichorv1alpha1.IchorInstallation{}
	if err := admin.Get(context.Background(), client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst); err != nil {
		t.Fatal(err)
	}
	return inst
}

func TestSettingsGetAndUpdate(t *testing.T) {
	inst := resetInstallation(t)

	// A viewer reads: empty fields are the defaults.
	got, err := settings(t, viewer(t)).GetSettings(context.Background(), &ichorv1.GetSettingsRequest{})
	if err != nil {
		t.Fatalf("viewer get: %v", err)
	}
	s := got.GetSettings()
	if s.GetIdTokenLifetime() != "" || s.GetRefreshTokenLifetime() != "" || s.GetDefaultDriftPolicy() != "" ||
		s.GetInstalledVersion() != "v0.4.0" || s.GetReadOnly() || s.GetResourceVersion() != inst.ResourceVersion {
		t.Errorf("viewer get: %v, want defaults, v0.4.0, writable, resourceVersion %s", s, inst.ResourceVersion)
	}

	// A viewer and an operator may not change them; nothing changes.
	for who, tok := range map[string]string{"ichor:vera": viewer(t), "ichor:olivia": operator(t)} {
		code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/settings", tok, `{"idTokenLifetime":"10m"}`)
		msg, _ := body["message"].(string)
		if code != http.StatusForbidden || !strings.Contains(msg, who) || !strings.Contains(msg, "ichorinstallations/settings") {
			t.Errorf("%s update over REST: %d %v, want 403 naming the user and the permission", who, code, body)
		}
		_, err := settings(t, tok).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "10m"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s update over gRPC: %v, want PermissionDenied", who, err)
		}
	}
	if cur := getInstallation(t); cur.ResourceVersion != inst.ResourceVersion {
		t.Fatalf("a refused update changed the installation: %+v", cur.Spec.Settings)
	}

	// The admin sets all three over gRPC, from the resourceVersion read.
	up, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{
		IdTokenLifetime: "15m", RefreshTokenLifetime: "24h", DefaultDriftPolicy: "AutoCorrect", ResourceVersion: s.GetResourceVersion(),
	})
	if err != nil {
		t.Fatalf("admin update: %v", err)
	}
	if u := up.GetSettings(); u.GetIdTokenLifetime() != "15m" || u.GetRefreshTokenLifetime() != "24h" || u.GetDefaultDriftPolicy() != "AutoCorrect" ||
		u.GetResourceVersion() == s.GetResourceVersion() {
		t.Errorf("update response: %v", u)
	}
	cur := getInstallation(t)
	st := cur.Spec.Settings
	if st.IDTokenLifetime == nil || st.IDTokenLifetime.Duration != 15*time.Minute || st.RefreshTokenLifetime == nil ||
		st.RefreshTokenLifetime.Duration != 24*time.Hour || st.DefaultDriftPolicy != ichorv1alpha1.DriftPolicyAutoCorrect {
		t.Fatalf("stored settings: %+v", st)
	}
	if cur.Spec.Version.Version != "v0.4.0" {
		t.Errorf("the update touched spec.version: %s", cur.Spec.Version.Version)
	}

	// An empty field leaves the setting; clear resets one to its default (REST).
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/settings", adminTok(t), `{"refreshTokenLifetime":"90m","clear":["default_drift_policy"]}`)
	if code != http.StatusOK {
		t.Fatalf("admin update over REST: %d %v", code, body)
	}
	js := toJSON(body)
	if !strings.Contains(js, `"idTokenLifetime":"15m"`) || !strings.Contains(js, `"refreshTokenLifetime":"1h30m"`) || strings.Contains(js, "defaultDriftPolicy") {
		t.Errorf("REST update response: %s", js)
	}
	st = getInstallation(t).Spec.Settings
	if st.IDTokenLifetime == nil || st.IDTokenLifetime.Duration != 15*time.Minute || st.RefreshTokenLifetime.Duration != 90*time.Minute || st.DefaultDriftPolicy != "" {
		t.Errorf("stored after clear: %+v", st)
	}

	// REST reads the same.
	code, body = rest(t, httpClient(), http.MethodGet, "/api/v1/settings", viewer(t), "")
	if js := toJSON(body); code != http.StatusOK || !strings.Contains(js, `"installedVersion":"v0.4.0"`) || !strings.Contains(js, `"idTokenLifetime":"15m"`) {
		t.Errorf("REST get: %d %s", code, js)
	}
}

func TestSettingsValidation(t *testing.T) {
	resetInstallation(t)
	if _, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "20m"}); err != nil {
		t.Fatal(err)
	}
	before := getInstallation(t)
	cases := []struct {
		name string
		req  *ichorv1.UpdateSettingsRequest
		want []string
	}{
		{"not a duration", &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "ten minutes"}, []string{"id_token_lifetime", "not a duration", "15m"}},
		{"id too short", &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "30s"}, []string{"id_token_lifetime 30s is out of range", "between 1m and 1h"}},
		{"id too long", &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "61m"}, []string{"id_token_lifetime 1h1m is out of range"}},
		{"refresh too short", &ichorv1.UpdateSettingsRequest{RefreshTokenLifetime: "9m"}, []string{"refresh_token_lifetime 9m is out of range", "10m and 168h"}},
		{"refresh too long", &ichorv1.UpdateSettingsRequest{RefreshTokenLifetime: "169h"}, []string{"refresh_token_lifetime 169h is out of range"}},
		{"negative", &ichorv1.UpdateSettingsRequest{RefreshTokenLifetime: "-1h"}, []string{"refresh_token_lifetime -1h is out of range"}},
		{"policy", &ichorv1.UpdateSettingsRequest{DefaultDriftPolicy: "warn"}, []string{`default_drift_policy "warn"`, "Warn or AutoCorrect"}},
		{"clear name", &ichorv1.UpdateSettingsRequest{Clear: []string{"idTokenLifetime"}}, []string{`clear names "idTokenLifetime"`, "id_token_lifetime"}},
		{"set and clear", &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "10m", Clear: []string{"id_token_lifetime"}}, []string{"both set and named in clear"}},
		{"nothing", &ichorv1.UpdateSettingsRequest{}, []string{"nothing to change"}},
		// One bad field refuses the good ones too.
		{"partly bad", &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "10m", DefaultDriftPolicy: "Block"}, []string{`default_drift_policy "Block"`}},
	}
	for _, tc := range cases {
		_, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(status.Convert(err).Message(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, status.Convert(err).Message(), w)
			}
		}
	}
	// Over REST: 400 with the message.
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/settings", adminTok(t), `{"idTokenLifetime":"2h"}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "id_token_lifetime 2h is out of range") {
		t.Errorf("REST invalid update: %d %v", code, body)
	}
	if after := getInstallation(t); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("bad input changed the installation: %+v", after.Spec.Settings)
	}
}

func TestSettingsStaleResourceVersion(t *testing.T) {
	inst := resetInstallation(t)
	stale := inst.ResourceVersion
	// Someone else changes the settings meanwhile.
	if _, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{DefaultDriftPolicy: "Warn"}); err != nil {
		t.Fatal(err)
	}
	after := getInstallation(t)
	_, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "10m", ResourceVersion: stale})
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "reload") {
		t.Fatalf("update from a stale resourceVersion: %v, want Aborted asking to reload", err)
	}
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/settings", adminTok(t), `{"idTokenLifetime":"10m","resourceVersion":"`+stale+`"}`)
	if code != http.StatusConflict {
		t.Errorf("REST update from a stale resourceVersion: %d %v, want 409", code, body)
	}
	if cur := getInstallation(t); cur.ResourceVersion != after.ResourceVersion || cur.Spec.Settings.IDTokenLifetime != nil {
		t.Errorf("a stale update changed the installation: %+v", cur.Spec.Settings)
	}
	// From the current one it goes through.
	if _, err := settings(t, adminTok(t)).UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "10m", ResourceVersion: after.ResourceVersion}); err != nil {
		t.Errorf("update from the current resourceVersion: %v", err)
	}
}

// readOnlyServer serves SettingsService with --settings-read-only on its own
// listener, over the same API server.
func readOnlyServer(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := suite.Env.UserConfig(backendUser, "system:serviceaccounts", "system:serviceaccounts:ichor-system", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	clients, err := kube.New(kube.Options{Config: cfg, Scheme: suite.Scheme, Namespace: testNS, Policy: identity.Policy{}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = clients.Cache.Start(ctx) }()
	cert, leaf, err := certs.SelfSigned([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	deps := api.Deps{Clients: clients, ClusterName: testCluster}
	srv, err := server.New(server.Options{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert, nil },
		Cluster:        &api.ClusterService{Deps: deps}, Machines: &api.MachineService{Deps: deps},
		Settings:      &api.SettingsService{Deps: deps, ReadOnly: true},
		Authenticator: tokens, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return ln.Addr().String(), roots
}

func TestSettingsReadOnly(t *testing.T) {
	resetInstallation(t)
	before := getInstallation(t)
	addr, roots := readOnlyServer(t)
	tlsConf := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)), grpc.WithPerRPCCredentials(bearer(adminTok(t))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := ichorv1.NewSettingsServiceClient(conn)

	got, err := c.GetSettings(context.Background(), &ichorv1.GetSettingsRequest{})
	if err != nil || !got.GetSettings().GetReadOnly() || got.GetSettings().GetInstalledVersion() != "v0.4.0" {
		t.Fatalf("read-only get: %v %v, want read_only", got, err)
	}
	_, err = c.UpdateSettings(context.Background(), &ichorv1.UpdateSettingsRequest{IdTokenLifetime: "10m"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--settings-read-only") {
		t.Fatalf("read-only update: %v, want FailedPrecondition naming --settings-read-only", err)
	}

	// REST, as the admin.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "https://"+addr+"/api/v1/settings", strings.NewReader(`{"idTokenLifetime":"10m"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminTok(t))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if msg, _ := body["message"].(string); resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, "--settings-read-only") {
		t.Errorf("read-only REST update: %d %v, want 400 naming --settings-read-only", resp.StatusCode, body)
	}
	if after := getInstallation(t); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a read-only server changed the installation: %+v", after.Spec.Settings)
	}
	// The writable server still says so.
	w, err := settings(t, viewer(t)).GetSettings(context.Background(), &ichorv1.GetSettingsRequest{})
	if err != nil || w.GetSettings().GetReadOnly() {
		t.Errorf("writable get: %v %v", w, err)
	}
}
