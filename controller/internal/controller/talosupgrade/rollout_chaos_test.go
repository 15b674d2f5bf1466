package talosupgrade_test

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestConfigRolloutChaos (issue 30): a config rollout that reboots, with the
// controller killed after every reconcile (each reconcile a new controller
// process). A reboot-requiring difference made behind Ichor on a control
// plane and on a worker is rolled back by a config operation: each of the
// two gets exactly one Reboot, whatever the restarts, and runs Ichor's
// configuration again; the other machines get none.
func TestConfigRolloutChaos(t *testing.T) {
	waitHealthy(t)
	stopOperations()
	t.Cleanup(func() { restartOperations(t, "") })

	changed := []string{"cp-2", "w-1"}
	for _, n := range changed {
		testworld.ChangeBehindIchor(t, world, theBun, n, "machine:\n  env:\n    ICHOR_CHAOS: \"1\"\n")

		if !testworld.NodeHas(t, world, theBun, n, "ICHOR_CHAOS") {
			t.Fatalf("the difference made behind Ichor is not on %s", n)
		}
	}

	before := counts(t)

	const name = "rollout-chaos"

	testenv.Must(t, k8s.Create(context.Background(), &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: clusterName, Type: ichorv1alpha1.OperationConfig},
	}))

	chaos := testworld.RunChaos(t, 3*waitTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, name) },
		func() testworld.ChaosStep { return testworld.OperationStep(getOp(t, name), nil) })

	after := counts(t)

	for _, n := range machineNames {
		want := 0
		if slices.Contains(changed, n) {
			want = 1
		}

		if d := after[n][1] - before[n][1]; d != want {
			t.Errorf("%s got %d Reboot calls across %d controllers, want %d; steps %s", n, d, chaos.Deaths, want, chaos)
		}

		if testworld.NodeHas(t, world, theBun, n, "ICHOR_CHAOS") {
			t.Errorf("%s still runs the difference after the rollout", n)
		}
	}

	waitHealthy(t)
}
