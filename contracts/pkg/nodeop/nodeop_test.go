package nodeop

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Rule: an action and a wipe mode are checked as asked (a wipe mode only for
// a reset); the operation built names the machine, its cluster and, for a
// reset other than the default, the wipe mode; the steps say what is wiped.
func TestNodeOperation(t *testing.T) {
	for _, tc := range []struct{ action, wipe, want string }{
		{"reboot", "", ""},
		{"reset", "", ""},
		{"reset", "all", ""},
		{"halt", "", `action "halt" is not a node action`},
		{"reboot", "all", "wipe_mode is only for a reset"},
		{"reset", "everything", `wipe_mode "everything" is not a wipe mode`},
	} {
		got := CheckAction(tc.action, tc.wipe, "action", "wipe_mode")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s/%s: %q, want %q", tc.action, tc.wipe, got, tc.want)
		}
	}

	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1"},
		Spec:       ichorv1alpha1.TalosMachineSpec{ClusterName: "prod", Role: ichorv1alpha1.RoleWorker},
	}
	op := Node(m, ichorv1alpha1.NodeActionReset, WipeSystemDisk)
	if op.Namespace != "ns" || op.Spec.ClusterName != "prod" || op.Spec.Type != ichorv1alpha1.OperationNode ||
		op.Spec.Node.MachineName != "w-1" || op.Spec.Node.WipeMode != WipeSystemDisk {
		t.Errorf("reset: %+v %+v", op.ObjectMeta, op.Spec)
	}
	if op := Node(m, ichorv1alpha1.NodeActionReset, WipeStateEphemeral); op.Spec.Node.WipeMode != "" {
		t.Errorf("the default wipe mode is written: %+v", op.Spec.Node)
	}
	if s := strings.Join(NodeSteps(m, ichorv1alpha1.NodeActionReset, WipeSystemDisk), "\n"); !strings.Contains(s, "the whole system disk") ||
		!strings.Contains(s, "install media") || strings.Contains(s, "etcd") {
		t.Errorf("steps of a worker's system-disk reset: %s", s)
	}
	if !Destructive(ichorv1alpha1.NodeActionReset) || !Destructive(ichorv1alpha1.NodeActionShutdown) || Destructive(ichorv1alpha1.NodeActionReboot) {
		t.Error("Destructive")
	}
	if s := Shutdown("ns", "prod"); s.Spec.Type != ichorv1alpha1.OperationShutdown || s.Spec.ClusterName != "prod" || s.GenerateName != "shutdown-" {
		t.Errorf("shutdown: %+v", s)
	}
}
