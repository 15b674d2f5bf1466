package commands

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
)

// TestNodeActionTextSmallCluster: the confirmation (and --dry-run) of a
// reboot of a single-node cluster's only node says there will be downtime
// and names the consent confirming sets, with the backup warning; on a
// larger cluster it says neither.
func TestNodeActionTextSmallCluster(t *testing.T) {
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cp-1"},
		Spec: ichorv1alpha1.TalosMachineSpec{ClusterName: "prod", Role: ichorv1alpha1.RoleControlPlane,
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved}},
	}
	op := nodeop.Node(m, ichorv1alpha1.NodeActionReboot, "")
	notices := func(n guard.ApprovedCounts) smallClusterNotices {
		return smallClusterNotices{downtime: guard.OperationDowntime(op, n), warnings: guard.BackupWarnings("prod", nil, metav1.Now().Time)}
	}
	single := nodeActionText(m, ichorv1alpha1.NodeActionReboot, "", notices(guard.ApprovedCounts{ControlPlanes: 1}), nil)
	for _, w := range []string{"Downtime: cluster prod has a single node", ichorv1alpha1.AcceptDowntimeAnnotation, "Warnings:", "no etcd backup configured"} {
		if !strings.Contains(single, w) {
			t.Errorf("single node: the text does not say %q:\n%s", w, single)
		}
	}
	three := nodeActionText(m, ichorv1alpha1.NodeActionReboot, "", notices(guard.ApprovedCounts{ControlPlanes: 3}), nil)
	if strings.Contains(three, "Downtime") {
		t.Errorf("three nodes: no downtime to accept:\n%s", three)
	}
}
