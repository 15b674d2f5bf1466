package cnihandover_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/cnihandover"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
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
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}

	spec := &talosemu.Spec{
		Subnet:   "127.0.172.0/24",
		Machines: []talosemu.MachineSpec{{Name: "cp-1", Role: talosemu.RoleHintControlPlane}},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(200 * time.Millisecond), Reboot: talosemu.Duration(200 * time.Millisecond), Boot: talosemu.Duration(100 * time.Millisecond),
		},
	}

	if world, err = talosemu.Start(ctx, spec, s.Dir, talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true}); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if theBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	em, err := world.Machine("cp-1")
	if err != nil {
		return err
	}

	c := testenv.TalosCluster(ns, clusterName)
	// Booted with the older embedded chart, as `ichor init --cilium-version`
	// does, so that TestCiliumUpgradeChaos has a chart to upgrade to.
	c.Annotations = map[string]string{
		ichorv1alpha1.CNIBootstrapAnnotation: ichorv1alpha1.CNIBootstrapInline, ichorv1alpha1.CNIBootstrapChartAnnotation: bootChart,
	}
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: em.IP()}
	c.Spec.ControlPlane.Schedulable = new(true)
	c.Spec.CNI.Tunnel, c.Spec.CNI.KubeProxy = "vxlan", ichorv1alpha1.KubeProxyReplaced

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, theBun)
	if err != nil {
		return err
	}

	for _, o := range []client.Object{sec, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}, c} {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	if ierr := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); ierr != nil {
		return ierr
	}

	if err := (&talosmachine.Reconciler{DriftInterval: 2 * time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&lifecycle.Reconciler{PollInterval: 300 * time.Millisecond, MonitorInterval: time.Second}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := (&cnihandover.Reconciler{FirstBackoff: firstBackoff, Image: "ghcr.io/maeshinshin/ichor-installer:test"}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return err
	}

	w := testworld.Cluster{Client: k8s, World: world, Bundle: theBun, Namespace: ns, Name: clusterName, Machines: []string{"cp-1"}}

	return w.Provision(ctx, time.Now().Add(2*waitTimeout))
}

// adminConfig is the cluster's admin kubeconfig as cp-1 hands it out
// (Talos's Kubeconfig RPC), as the controller gets it.
func adminConfig(t *testing.T) (*rest.Config, *kubernetes.Clientset) {
	t.Helper()

	em, err := world.Machine("cp-1")
	testenv.Must(t, err)

	n, err := (&talos.Dialer{}).Dial(t.Context(), em.IP(), theBun)
	testenv.Must(t, err)

	defer n.Close()

	kc, err := n.Kubeconfig(t.Context())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	k, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	return cfg, k
}

func cluster(t *testing.T) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: clusterName}, c))

	return c
}
