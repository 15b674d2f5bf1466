package server_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/recovery"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestConfirmRecovery: the Overview's notice of a full-loss recovery's holds
// (Cluster.recovery_holds) and its Confirm: a viewer is refused by RBAC, a
// wrong name is refused, and both change nothing; an operator who types the
// name lifts the recovery's holds only (a person's own hold stays); a second
// confirmation finds nothing to confirm.
func TestConfirmRecovery(t *testing.T) {
	ctx := context.Background()
	hc := httpClient()

	hold := func(name, value string) {
		testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m, err := getMachine(t, name)
			if err != nil {
				return err
			}
			m.Annotations = map[string]string{ichorv1alpha1.HoldApplyAnnotation: value}
			return admin.Update(ctx, m)
		}))
	}
	for _, n := range []string{"rec-cp", "rec-wk", "rec-own"} {
		role := ichorv1alpha1.RoleControlPlane
		if n != "rec-cp" {
			role = ichorv1alpha1.RoleWorker
		}
		createMachine(t, n, ichorv1alpha1.ApprovalApproved, role)
		removeWhenDone(t, n)
	}
	hold("rec-cp", recovery.HoldValue)
	hold("rec-wk", recovery.HoldValue)
	hold("rec-own", "a-person")

	cs := ichorv1.NewClusterServiceClient(grpcConn(t, viewer(t)))
	testenv.Eventually(t, 30*time.Second, "the recovery's holds in GetCluster", func() error {
		r, err := cs.GetCluster(ctx, &ichorv1.GetClusterRequest{})
		if err != nil {
			return err
		}
		var names []string
		for _, h := range r.GetCluster().GetRecoveryHolds() {
			names = append(names, h.GetMachine())
		}
		if !slices.Equal(names, []string{"rec-cp", "rec-wk"}) {
			return errors.New("holds " + strings.Join(names, ","))
		}
		return nil
	})

	held := func() []string {
		var out []string
		for _, n := range []string{"rec-cp", "rec-wk", "rec-own"} {
			m, err := getMachine(t, n)
			testenv.Must(t, err)
			if v := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]; v != "" {
				out = append(out, n+"="+v)
			}
		}
		return out
	}
	all := []string{"rec-cp=" + recovery.HoldValue, "rec-wk=" + recovery.HoldValue, "rec-own=a-person"}

	const path = "/api/v1/cluster:confirm-recovery"
	code, body := rest(t, hc, http.MethodPost, path, viewer(t), `{"confirmClusterName":"`+testCluster+`"}`)
	if msg, _ := body["message"].(string); code != http.StatusForbidden || !strings.Contains(msg, "may not patch talosmachines") {
		t.Fatalf("viewer: %d %v, want 403 naming the missing right", code, body)
	}
	code, body = rest(t, hc, http.MethodPost, path, operator(t), `{"confirmClusterName":"staging"}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, `type the cluster's name "`+testCluster+`"`) {
		t.Fatalf("a wrong name: %d %v, want 400", code, body)
	}
	if got := held(); !slices.Equal(got, all) {
		t.Fatalf("a refused confirmation changed the holds: %v", got)
	}

	resp, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).ConfirmRecovery(ctx, &ichorv1.ConfirmRecoveryRequest{ConfirmClusterName: testCluster})
	if err != nil {
		t.Fatalf("operator confirm: %v", err)
	}
	if !slices.Equal(resp.GetReleased(), []string{"rec-cp", "rec-wk"}) {
		t.Errorf("released %v", resp.GetReleased())
	}
	if got := held(); !slices.Equal(got, []string{"rec-own=a-person"}) {
		t.Fatalf("after the confirmation: holds %v, want only the person's own", got)
	}

	code, body = rest(t, hc, http.MethodPost, path, operator(t), `{"confirmClusterName":"`+testCluster+`"}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest && code != http.StatusPreconditionFailed || !strings.Contains(msg, "nothing to confirm") {
		t.Fatalf("a second confirmation: %d %v, want a refusal saying nothing to confirm", code, body)
	}
}
