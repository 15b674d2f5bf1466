package server_test

import (
	"context"
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
)

// setKubernetes sets the test cluster's spec.kubernetesVersion and the
// running version the controller records.
func setKubernetes(t testing.TB, spec, running string, cands []ichorv1alpha1.VersionCandidate) {
	t.Helper()

	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &ichorv1alpha1.TalosCluster{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
			return err
		}

		c.Spec.KubernetesVersion = spec

		if err := admin.Update(ctx, c); err != nil {
			return err
		}

		now := metav1.Now()
		c.Status.KubernetesUpgrade = ichorv1alpha1.KubernetesUpgradeStatus{Source: "https://registry.example", CheckedAt: &now, Version: running, Candidates: cands}

		return admin.Status().Update(ctx, c)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func clusterKubernetesVersion(t testing.TB) string {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	if err := admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
		t.Fatal(err)
	}

	return c.Spec.KubernetesVersion
}

// The upgrade dialog's Kubernetes API: the candidates the controller
// recorded, a typed version checked by the server as `ichor upgrade
// kubernetes` checks it (one minor up at most from what runs), and the
// start, which writes spec.kubernetesVersion as the user only with the typed
// cluster name and a version the checks accept; an operation's stages and
// removed APIs show.
func TestKubernetesUpgradeAPI(t *testing.T) {
	ctx := context.Background()

	setKubernetes(t, "1.36.3", "1.36.3", []ichorv1alpha1.VersionCandidate{{Version: "v1.37.2", Group: ichorv1alpha1.CandidateRecommended}})
	t.Cleanup(func() { setKubernetes(t, "1.37.2", "", nil) })

	ops := operations(t, adminTok(t))

	var (
		preview *ichorv1.PreviewKubernetesUpgradeResponse
		err     error
	)

	deadline := time.Now().Add(30 * time.Second)

	for {
		preview, err = ops.PreviewKubernetesUpgrade(ctx, &ichorv1.PreviewKubernetesUpgradeRequest{Version: "1.35.0"})
		if err == nil && len(preview.GetCandidates()) == 1 && preview.GetCurrent() == "v1.36.3" && len(preview.GetRefusals()) == 1 {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("preview: %v %v", preview, err)
		}

		time.Sleep(50 * time.Millisecond)
	}

	if c := preview.GetCandidates()[0]; c.GetVersion() != "v1.37.2" || c.GetGroup() != ichorv1alpha1.CandidateRecommended || preview.GetCluster() != testCluster {
		t.Fatalf("preview %v", preview)
	}

	if r := preview.GetRefusals()[0]; preview.GetVersion() != "v1.35.0" || r.GetField() != "spec.kubernetesVersion" || !strings.Contains(r.GetRule(), "downgrade") {
		t.Fatalf("a typed downgrade: %v", preview.GetRefusals())
	}

	ok, err := ops.PreviewKubernetesUpgrade(ctx, &ichorv1.PreviewKubernetesUpgradeRequest{Version: "v1.37.2"})
	if err != nil || len(ok.GetRefusals()) != 0 {
		t.Fatalf("a candidate: %v %v", ok.GetRefusals(), err)
	}

	// Refused: no typed name; two minors up from what runs; a viewer. Nothing is written.
	if _, err := ops.StartKubernetesUpgrade(ctx, &ichorv1.StartKubernetesUpgradeRequest{Version: "v1.37.2"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("without the typed name: %v", err)
	}

	setKubernetes(t, "1.36.3", "1.35.9", nil)

	_, err = ops.StartKubernetesUpgrade(ctx, &ichorv1.StartKubernetesUpgradeRequest{Version: "v1.37.2", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "skips a minor") {
		t.Fatalf("two minors up from what runs: %v", err)
	}

	setKubernetes(t, "1.36.3", "1.36.3", nil)

	_, err = operations(t, viewer(t)).StartKubernetesUpgrade(ctx, &ichorv1.StartKubernetesUpgradeRequest{Version: "v1.37.2", ConfirmClusterName: testCluster})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a viewer: %v", err)
	}

	if v := clusterKubernetesVersion(t); v != "1.36.3" {
		t.Fatalf("a refused start wrote spec.kubernetesVersion %s", v)
	}

	// The allowed neighbour.
	resp, err := ops.StartKubernetesUpgrade(ctx, &ichorv1.StartKubernetesUpgradeRequest{Version: "1.37.2", ConfirmClusterName: testCluster})
	if err != nil || resp.GetFrom() != "v1.36.3" || resp.GetTo() != "v1.37.2" {
		t.Fatalf("start: %v %v", resp, err)
	}

	if v := clusterKubernetesVersion(t); v != "1.37.2" {
		t.Fatalf("spec.kubernetesVersion %s after the start", v)
	}

	// The operation page shows the stages and the pre-check's finding.
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "k8s-stages"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: testCluster, Type: ichorv1alpha1.OperationKubernetes,
			Kubernetes: &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.2"}},
	}
	if err := admin.Create(ctx, op); err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = admin.Delete(context.Background(), op) })

	op.Status = ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationPaused, Step: ichorv1alpha1.KubernetesStagePreCheck, FailedStep: ichorv1alpha1.KubernetesStagePreCheck,
		Stages: []ichorv1alpha1.OperationStage{{Name: ichorv1alpha1.KubernetesStagePreCheck, Phase: ichorv1alpha1.StageInProgress, Message: "pre-checks failed"}},
		RemovedAPIs: []ichorv1alpha1.RemovedAPI{{Group: "networking.k8s.io", Version: "v1beta1", Resource: "servicecidrs", RemovedRelease: "1.37",
			ControlPlanes: []string{"cp-1"}}},
		Machines: []ichorv1alpha1.MachineProgress{{Name: "cp-1", Role: ichorv1alpha1.RoleControlPlane, Phase: ichorv1alpha1.MachinePending,
			Stage: ichorv1alpha1.KubernetesStagePrePull}},
	}
	if err := admin.Status().Update(ctx, op); err != nil {
		t.Fatal(err)
	}

	waitOperationCached(t, op.Name, op.ResourceVersion)

	got, err := operations(t, viewer(t)).GetOperation(ctx, &ichorv1.GetOperationRequest{Name: op.Name})
	if err != nil {
		t.Fatal(err)
	}

	o := got.GetOperation()
	if len(o.GetStages()) != 1 || o.GetStages()[0].GetName() != "precheck" || len(o.GetRemovedApis()) != 1 ||
		o.GetRemovedApis()[0].GetApi() != "servicecidrs.v1beta1.networking.k8s.io" || o.GetRemovedApis()[0].GetRemovedRelease() != "1.37" ||
		o.GetMachines()[0].GetStage() != "pre-pull" {
		t.Fatalf("operation %v", o)
	}
}
