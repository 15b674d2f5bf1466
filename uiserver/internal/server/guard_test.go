package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

func TestAdminRemovesWithGuard(t *testing.T) {
	m := createMachine(t, "rm-w1", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	// The last worker of a cluster with unschedulable control planes: the
	// guard refuses, with its rule and way out, and nothing is written.
	// This file sorts first, so no other test has approved a worker yet.
	if n := approvedWorkers(t); n != 1 {
		t.Fatalf("the test needs rm-w1 to be the only approved worker; there are %d", n)
	}
	{
		_, err := machines(t, adminTok(t)).RemoveMachine(context.Background(), &ichorv1.RemoveMachineRequest{Name: "rm-w1"})
		st := status.Convert(err)
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "last worker") {
			t.Fatalf("removing the last worker: %v, want FailedPrecondition naming the rule", err)
		}
		var details *ichorv1.RefusalDetails
		for _, d := range st.Details() {
			if rd, ok := d.(*ichorv1.RefusalDetails); ok {
				details = rd
			}
		}
		if details == nil || len(details.GetRefusals()) != 1 || details.GetRefusals()[0].GetWayOut() == "" || !details.GetRefusals()[0].GetOverridable() {
			t.Fatalf("refusal details: %v", details)
		}
		cur, err := getMachine(t, "rm-w1")
		if err != nil || cur.Annotations[ichorv1alpha1.AllowDeleteAnnotation] != "" {
			t.Fatalf("a refused removal wrote something: %v %v", err, cur.Annotations)
		}
	}
	createMachine(t, "rm-w2", ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker)
	// The later tests count the cluster's approved workers.
	removeWhenDone(t, "rm-w2")
	resp, err := machines(t, adminTok(t)).RemoveMachine(context.Background(), &ichorv1.RemoveMachineRequest{Name: "rm-w1", Reboot: true})
	if err != nil {
		t.Fatalf("admin remove: %v", err)
	}
	if resp.GetMachine().GetUid() != string(m.UID) {
		t.Errorf("response names another machine: %v", resp.GetMachine())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := getMachine(t, "rm-w1")
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rm-w1 still exists: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func approvedWorkers(t *testing.T) int {
	list := &ichorv1alpha1.TalosMachineList{}
	if err := admin.List(context.Background(), list, client.InNamespace(testNS)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range list.Items {
		if m.Spec.ClusterName == testCluster && m.Spec.Role == ichorv1alpha1.RoleWorker && m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}
