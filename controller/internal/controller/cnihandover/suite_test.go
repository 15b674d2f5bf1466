package cnihandover_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/controller/cnihandover"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server and an emulated world of one
// control plane, cp-1, provisioned in TestMain by the real machine and
// lifecycle reconcilers as the one machine of cluster "cni", which is marked
// as `ichor init` marks a cluster whose Cilium it booted from an inline
// manifest. The emulator creates that manifest's objects (the DaemonSet
// cilium, the Deployment cilium-operator), kwok plays their pods and the
// ichor-cni Jobs' pods (a Job "completes" without running anything: what the
// Job would do, the tests do in-process with cilium.Apply).
var (
	k8s    client.Client
	suite  *testenv.Suite
	world  *talosemu.World
	theBun *secrets.Bundle
)

const (
	ns          = "default"
	clusterName = "cni"
	waitTimeout = 3 * time.Minute
	// bootChart is the chart the cluster boots, upgradeChart the one
	// TestCiliumUpgradeChaos moves it to.
	bootChart, upgradeChart = "v1.19.3", "v1.20.2"
	// firstBackoff is the controller's wait after a first failed Job, short here.
	firstBackoff = 2 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s, suite = s.Env.Client, s
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
		Subnet: "127.0.172.0/24", Namespace: ns, Name: clusterName, Within: 2 * waitTimeout,
		// Booted with the older embedded chart, as `ichor init
		// --cilium-version` does, so that TestCiliumUpgradeChaos has a chart
		// to upgrade to.
		Cluster: func(c *ichorv1alpha1.TalosCluster) {
			c.Annotations = map[string]string{
				ichorv1alpha1.CNIBootstrapAnnotation: ichorv1alpha1.CNIBootstrapInline, ichorv1alpha1.CNIBootstrapChartAnnotation: bootChart,
			}
			c.Spec.CNI.Tunnel, c.Spec.CNI.KubeProxy = "vxlan", ichorv1alpha1.KubeProxyReplaced
		},
		Controllers: []func(ctrl.Manager) error{
			(&cnihandover.Reconciler{FirstBackoff: firstBackoff, Image: "ghcr.io/maeshinshin/ichor-installer:test"}).SetupWithManager,
		},
	}.Start(ctx, s)

	return err
}

// adminConfig is the cluster's admin kubeconfig as cp-1 hands it out
// (Talos's Kubeconfig RPC), as the controller gets it.
func adminConfig(t *testing.T) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()

	return testworld.AdminConfig(t, world, theBun, "cp-1")
}

func cluster(t *testing.T) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: clusterName}, c))

	return c
}
