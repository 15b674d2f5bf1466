package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func setClusterTalosVersion(t testing.TB, v string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &ichorv1alpha1.TalosCluster{}
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
			return err
		}
		c.Spec.TalosVersion = v
		return admin.Update(context.Background(), c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func clusterTalosVersion(t testing.TB) string {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
		t.Fatal(err)
	}
	return c.Spec.TalosVersion
}

// The upgrade dialog's API: the candidates the controller recorded, a typed
// version checked by the server as `ichor upgrade talos` checks it, and the
// start, which writes spec.talosVersion as the user only with the typed
// cluster name and a version the checks accept.
func TestTalosUpgradeAPI(t *testing.T) {
	ctx := context.Background()
	t.Cleanup(func() { setClusterTalosVersion(t, "v1.14.1") })

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &ichorv1alpha1.TalosCluster{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
			return err
		}
		now := metav1.Now()
		c.Status.TalosUpgrade = ichorv1alpha1.TalosUpgradeStatus{Source: "https://factory.example", CheckedAt: &now, Version: "v1.14.1",
			Candidates: []ichorv1alpha1.VersionCandidate{{Version: "v1.14.2", Group: ichorv1alpha1.CandidatePatch, Default: true}}}
		return admin.Status().Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}

	ops := operations(t, adminTok(t))

	var preview *ichorv1.PreviewTalosUpgradeResponse
	deadline := time.Now().Add(30 * time.Second)
	for {
		preview, err = ops.PreviewTalosUpgrade(ctx, &ichorv1.PreviewTalosUpgradeRequest{Version: "1.14.0"})
		// The other tests' operations are gone from the cache once the
		// downgrade is the only refusal.
		if err == nil && len(preview.GetCandidates()) == 1 && len(preview.GetRefusals()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("preview: %v %v", preview, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c := preview.GetCandidates()[0]; c.GetVersion() != "v1.14.2" || !c.GetDefault() || preview.GetCurrent() != "v1.14.1" || preview.GetCluster() != testCluster {
		t.Fatalf("preview %v", preview)
	}
	if preview.GetVersion() != "v1.14.0" || len(preview.GetRefusals()) != 1 || preview.GetRefusals()[0].GetField() != "spec.talosVersion" {
		t.Fatalf("a typed downgrade: %v", preview.GetRefusals())
	}

	ok, err := ops.PreviewTalosUpgrade(ctx, &ichorv1.PreviewTalosUpgradeRequest{Version: "v1.14.2"})
	if err != nil || len(ok.GetRefusals()) != 0 {
		t.Fatalf("a candidate: %v %v", ok.GetRefusals(), err)
	}

	// Refused: no typed name; a downgrade. Nothing is written.
	_, err = ops.StartTalosUpgrade(ctx, &ichorv1.StartTalosUpgradeRequest{Version: "v1.14.2"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("without the typed name: %v", err)
	}
	_, err = ops.StartTalosUpgrade(ctx, &ichorv1.StartTalosUpgradeRequest{Version: "v1.14.0", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a downgrade: %v", err)
	}
	_, err = operations(t, viewer(t)).StartTalosUpgrade(ctx, &ichorv1.StartTalosUpgradeRequest{Version: "v1.14.2", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a viewer: %v", err)
	}
	if v := clusterTalosVersion(t); v != "v1.14.1" {
		t.Fatalf("a refused start wrote spec.talosVersion %s", v)
	}

	// The allowed neighbour.
	resp, err := ops.StartTalosUpgrade(ctx, &ichorv1.StartTalosUpgradeRequest{Version: "v1.14.2", ConfirmClusterName: testCluster})
	if err != nil || resp.GetFrom() != "v1.14.1" || resp.GetTo() != "v1.14.2" {
		t.Fatalf("start: %v %v", resp, err)
	}
	if v := clusterTalosVersion(t); v != "v1.14.2" {
		t.Fatalf("spec.talosVersion %s after the start", v)
	}
}
