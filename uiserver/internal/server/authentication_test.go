package server_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func storedAuthentication(t *testing.T) ichorv1alpha1.AuthenticationSpec {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	if err := admin.Get(context.Background(), keyOf(testCluster), c); err != nil {
		t.Fatal(err)
	}
	return c.Spec.Authentication
}

// TestAuthenticationAPI: the console's Authentication card reads
// spec.authentication; only a holder of `update` on
// `talosclusters/authentication` (ichor-admin) changes it, written as that
// user; a provider the kube-apiserver would refuse is refused by field with
// nothing written; the same configuration again changes nothing.
func TestAuthenticationAPI(t *testing.T) {
	ctx := context.Background()
	before := storedAuthentication(t)
	t.Cleanup(func() {
		c := &ichorv1alpha1.TalosCluster{}
		if err := admin.Get(ctx, keyOf(testCluster), c); err == nil {
			c.Spec.Authentication = before
			_ = admin.Update(ctx, c)
		}
	})

	got, err := ichorv1.NewClusterServiceClient(grpcConn(t, viewer(t))).GetAuthentication(ctx, &ichorv1.GetAuthenticationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetCanWrite() || got.GetAuthentication().GetIchorUsers() || got.GetAuthentication().GetExternal() != nil {
		t.Fatalf("a viewer's view of an empty authentication: %v", got)
	}

	provider := &ichorv1.Authentication{External: &ichorv1.ExternalOIDC{IssuerUrl: "https://login.example.com/realms/main",
		Audiences: []string{"kubernetes"}, UsernameClaim: "email", GroupsClaim: "groups"}}
	for name, tok := range map[string]string{"viewer": viewer(t), "operator": operator(t)} {
		_, err := ichorv1.NewClusterServiceClient(grpcConn(t, tok)).UpdateAuthentication(ctx, &ichorv1.UpdateAuthenticationRequest{Authentication: provider})
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "`update` on `talosclusters/authentication`") ||
			!strings.Contains(st.Message(), "nothing was changed") {
			t.Fatalf("%s's update: %v, want PermissionDenied naming the permission", name, err)
		}
	}
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/cluster/authentication:update", operator(t),
		`{"authentication":{"external":{"issuerUrl":"https://login.example.com","audiences":["k"]}}}`)
	if msg, _ := body["message"].(string); code != http.StatusForbidden || !strings.Contains(msg, "talosclusters/authentication") {
		t.Fatalf("operator over REST: %d %v", code, body)
	}
	if a := storedAuthentication(t); !reflect.DeepEqual(a, before) {
		t.Fatalf("a refused update wrote %+v", a)
	}

	admins := ichorv1.NewClusterServiceClient(grpcConn(t, adminTok(t)))
	// A provider the kube-apiserver would refuse: the claim mapping names no user.
	bad := &ichorv1.Authentication{External: &ichorv1.ExternalOIDC{IssuerUrl: "https://login.example.com", Audiences: []string{"kubernetes", "kubernetes"}}}
	_, err = admins.UpdateAuthentication(ctx, &ichorv1.UpdateAuthenticationRequest{Authentication: bad})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || len(refusalDetails(err)) != 1 ||
		refusalDetails(err)[0].GetField() != "spec.authentication.external" || !strings.Contains(st.Message(), "nothing was changed") {
		t.Fatalf("admin's refused provider: %v, want InvalidArgument naming spec.authentication.external", err)
	}
	if a := storedAuthentication(t); !reflect.DeepEqual(a, before) {
		t.Fatalf("a refused provider was written: %+v", a)
	}

	upd, err := admins.UpdateAuthentication(ctx, &ichorv1.UpdateAuthenticationRequest{Authentication: provider})
	if err != nil {
		t.Fatalf("admin's update: %v", err)
	}
	if !upd.GetChanged() || !upd.GetCurrent().GetCanWrite() || upd.GetCurrent().GetAuthentication().GetExternal().GetUsernameClaim() != "email" {
		t.Fatalf("admin's update: %v", upd)
	}
	stored := storedAuthentication(t)
	if e := stored.External; e == nil || e.IssuerURL != "https://login.example.com/realms/main" || e.GroupsClaim != "groups" || stored.IchorUsers {
		t.Fatalf("stored %+v", stored)
	}
	again, err := admins.UpdateAuthentication(ctx, &ichorv1.UpdateAuthenticationRequest{Authentication: provider})
	if err != nil || again.GetChanged() {
		t.Fatalf("the same configuration again: %v %v, want no change", again, err)
	}
	// Taking it away.
	if _, err := admins.UpdateAuthentication(ctx, &ichorv1.UpdateAuthenticationRequest{Authentication: &ichorv1.Authentication{}}); err != nil {
		t.Fatal(err)
	}
	if a := storedAuthentication(t); a.External != nil || a.IchorUsers {
		t.Fatalf("after taking it away: %+v", a)
	}
}
