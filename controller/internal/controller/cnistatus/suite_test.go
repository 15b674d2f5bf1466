package cnistatus_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/controller/internal/controller/cnistatus"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server and an emulated world of two
// control-plane machines: cp-1, provisioned in TestMain by the real machine
// and lifecycle reconcilers as the one machine of cluster "cni" (etcd and a
// real Kubernetes control plane), and cp-x, left in maintenance for the
// CNIUnsupported test's cluster. The CNI status reconciler reads the
// cluster every 300 ms (its slow interval, shortened).
var (
	env    *testenv.Env
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
)

const (
	ns          = "default"
	clusterName = "cni"
	waitTimeout = 150 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, k8s = s.Env, s.Env.Client

		err := setup(ctx, s)
		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

func setup(ctx context.Context, s *testenv.Suite) error {
	var err error

	world, theBun, err = testworld.OneControlPlane{
		Subnet: "127.0.97.0/24", Namespace: ns, Name: clusterName, Within: 2 * waitTimeout,
		Extra: []talosemu.MachineSpec{{Name: "cp-x", Role: talosemu.RoleHintControlPlane}},
		Controllers: []func(ctrl.Manager) error{
			(&cnistatus.Reconciler{Interval: 300 * time.Millisecond}).SetupWithManager,
		},
	}.Start(ctx, s)

	return err
}

// adminClient is a client of the cluster's Kubernetes API with the admin
// kubeconfig cp-1 hands out (Talos's Kubeconfig RPC), as the controller gets one.
func adminClient(t *testing.T) *kubernetes.Clientset {
	t.Helper()

	_, k := testworld.AdminConfig(t, world, theBun, "cp-1")

	return k
}
