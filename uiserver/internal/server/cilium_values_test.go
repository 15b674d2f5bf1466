package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func storedCiliumValues(t *testing.T) string {
	t.Helper()
	c := servedCluster(t)
	if c.Spec.CNI.Cilium == nil || c.Spec.CNI.Cilium.Values == nil {
		return ""
	}
	return string(c.Spec.CNI.Cilium.Values.Raw)
}

func refusalDetails(err error) []*ichorv1.Refusal {
	for _, d := range status.Convert(err).Details() {
		if rd, ok := d.(*ichorv1.RefusalDetails); ok {
			return rd.GetRefusals()
		}
	}
	return nil
}

// TestCiliumValues: GetCiliumValues shows the user's layer, the effective
// values, the chart and the hand-over; PreviewCiliumValues answers with
// the refusals of a wrong layer or the rendered objects a good one
// changes; UpdateCiliumValues writes as the signed-in user: a viewer and
// an operator are refused naming `update` on `talosclusters/cilium-values`,
// an Ichor-owned key is refused by name, an admin writes.
func TestCiliumValues(t *testing.T) {
	ctx := context.Background()
	before := servedCluster(t)
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Spec.CNI.Cilium = before.Spec.CNI.Cilium
			return admin.Update(ctx, c)
		})
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Status.Conditions = before.Status.Conditions
			return admin.Status().Update(ctx, c)
		})
	})
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"debug":{"enabled":true}}`)}}
		return admin.Update(ctx, c)
	}))
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.CNIHandoverCondition, Status: metav1.ConditionFalse,
			Reason: ichorv1alpha1.CNIHandoverPendingReason, Message: "waiting for the Cilium DaemonSet", LastTransitionTime: metav1.Now()})
		return admin.Status().Update(ctx, c)
	}))

	// Get, as a viewer: read-only.
	var got *ichorv1.GetCiliumValuesResponse
	testenv.Eventually(t, 30*time.Second, "the stored values in GetCiliumValues", func() error {
		var err error
		got, err = ichorv1.NewClusterServiceClient(grpcConn(t, viewer(t))).GetCiliumValues(ctx, &ichorv1.GetCiliumValuesRequest{})
		if err != nil {
			return err
		}
		if got.GetValuesYaml() != "debug:\n  enabled: true\n" || got.GetHandover().GetReason() != ichorv1alpha1.CNIHandoverPendingReason {
			return errors.New("not yet: " + got.GetValuesYaml())
		}
		return nil
	})
	if !strings.Contains(got.GetEffectiveYaml(), "tunnelProtocol: vxlan") || !strings.Contains(got.GetEffectiveYaml(), "debug:\n  enabled: true") ||
		got.GetChartVersion() == "" || got.GetApplied() || got.GetCanWrite() || got.GetHandover().GetMessage() != "waiting for the Cilium DaemonSet" {
		t.Fatalf("viewer's GetCiliumValues: %v", got)
	}

	// Preview: the effect of a new key, object by object; a wrong layer's refusals.
	relay := "debug:\n  enabled: true\nhubble:\n  relay:\n    enabled: true\n"
	prev, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).PreviewCiliumValues(ctx, &ichorv1.PreviewCiliumValuesRequest{ValuesYaml: relay})
	if err != nil {
		t.Fatal(err)
	}
	added := false
	for _, o := range prev.GetObjects() {
		if o.GetObject() == "Deployment kube-system/hubble-relay" && o.GetChange() == "added" {
			added = true
		}
	}
	if !added || len(prev.GetRefusals()) != 0 || !strings.Contains(prev.GetDiff(), "+++ b/Deployment kube-system/hubble-relay") {
		t.Fatalf("preview of hubble.relay: refusals %v, objects %v", prev.GetRefusals(), prev.GetObjects())
	}
	owned := "ipam:\n  mode: cluster-pool\n"
	prev, err = ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).PreviewCiliumValues(ctx, &ichorv1.PreviewCiliumValuesRequest{ValuesYaml: owned})
	if err != nil {
		t.Fatal(err)
	}
	if len(prev.GetRefusals()) != 1 || !strings.Contains(prev.GetRefusals()[0].GetRule(), `"ipam.mode"`) || prev.GetDiff() != "" {
		t.Fatalf("preview of an owned key: %v", prev)
	}

	// Update: a viewer and an operator are refused naming the permission; nothing written.
	for name, tok := range map[string]string{"viewer": viewer(t), "operator": operator(t)} {
		_, err := ichorv1.NewClusterServiceClient(grpcConn(t, tok)).UpdateCiliumValues(ctx, &ichorv1.UpdateCiliumValuesRequest{ValuesYaml: relay})
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "`update` on `talosclusters/cilium-values`") ||
			!strings.Contains(st.Message(), "nothing was changed") || len(refusalDetails(err)) != 1 {
			t.Fatalf("%s's update: %v, want PermissionDenied naming the permission", name, err)
		}
	}
	code, body := rest(t, httpClient(), http.MethodPost, "/api/v1/cluster/cilium-values:update", operator(t), `{"valuesYaml":"debug: {enabled: false}"}`)
	if msg, _ := body["message"].(string); code != http.StatusForbidden || !strings.Contains(msg, "talosclusters/cilium-values") {
		t.Fatalf("operator over REST: %d %v", code, body)
	}
	if v := storedCiliumValues(t); v != `{"debug":{"enabled":true}}` {
		t.Fatalf("a refused update wrote %s", v)
	}

	// An admin: an Ichor-owned key is refused by name…
	admins := ichorv1.NewClusterServiceClient(grpcConn(t, adminTok(t)))
	_, err = admins.UpdateCiliumValues(ctx, &ichorv1.UpdateCiliumValuesRequest{ValuesYaml: owned})
	st := status.Convert(err)
	if rf := refusalDetails(err); st.Code() != codes.InvalidArgument || len(rf) != 1 || !strings.Contains(rf[0].GetRule(), `"ipam.mode"`) ||
		!strings.Contains(rf[0].GetWayOut(), "remove these keys") {
		t.Fatalf("admin's owned key: %v", err)
	}
	if v := storedCiliumValues(t); v != `{"debug":{"enabled":true}}` {
		t.Fatalf("a refused update wrote %s", v)
	}
	// …and a good layer is written.
	upd, err := admins.UpdateCiliumValues(ctx, &ichorv1.UpdateCiliumValuesRequest{ValuesYaml: relay})
	if err != nil {
		t.Fatalf("admin's update: %v", err)
	}
	if !upd.GetChanged() || !strings.Contains(upd.GetValues().GetValuesYaml(), "relay:\n    enabled: true") || !upd.GetValues().GetCanWrite() {
		t.Fatalf("admin's update: %v", upd)
	}
	if v := storedCiliumValues(t); v != `{"debug":{"enabled":true},"hubble":{"relay":{"enabled":true}}}` {
		t.Fatalf("stored %s", v)
	}
}
