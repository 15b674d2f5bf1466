package kubeletcsr_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/kubeletcsr"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share Ichor's API server and one emulated control plane
// running etcd and the real Kubernetes control plane, provisioned in TestMain
// by the lifecycle reconciler, with the approver polling every 300 ms.
var (
	k8s    client.Client
	world  *talosemu.World
	theBun *secrets.Bundle
)

const (
	ns          = "default"
	clusterName = "csr"
	waitTimeout = 150 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

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
		Subnet:   "127.0.84.0/24",
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

	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2",
			Endpoint:         ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: em.IP()},
			SecretsBundleRef: ichorv1alpha1.SecretReference{Name: clusterName + "-secrets"},
			ControlPlane:     ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(true)},
			CNI:              ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
			Security:         ichorv1alpha1.SecuritySpec{KubeletServingCertificates: true},
		},
	}

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

	if err := (&kubeletcsr.Reconciler{Interval: 300 * time.Millisecond}).SetupWithManager(mgr); err != nil {
		return err
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return err
	}

	return provision(ctx, em)
}

// provision creates cp-1 as discovery does, approves it, bootstraps etcd as
// `ichor init` does, and waits until it is provisioned.
func provision(ctx context.Context, em *talosemu.Machine) error {
	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-1", Labels: map[string]string{ichorv1alpha1.ClusterLabel: clusterName}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: clusterName,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: em.UUID(), Serial: "SER-cp-1"},
			Address:     em.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        ichorv1alpha1.RoleControlPlane,
			Hostname:    "cp-1",
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}

	if err := k8s.Create(ctx, tm); err != nil {
		return err
	}

	tm.Status.Stage = ichorv1alpha1.StageMaintenance
	tm.Status.MaintenanceFingerprint = em.MaintenanceFingerprint()

	if err := k8s.Status().Update(ctx, tm); err != nil {
		return err
	}

	deadline := time.Now().Add(2 * waitTimeout)
	bootstrapped := false

	for {
		m := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-1"}, m); err != nil {
			return err
		}

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition) {
			return nil
		}

		if !bootstrapped && m.Status.Stage == ichorv1alpha1.StageRunning {
			n, err := (&talos.Dialer{}).Dial(ctx, em.IP(), theBun)
			if err != nil {
				return err
			}

			_, err = n.Client().MachineClient.Bootstrap(ctx, &machine.BootstrapRequest{})
			n.Close()

			bootstrapped = err == nil || status.Code(err) == codes.AlreadyExists
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("cp-1 was not provisioned: stage %q, %+v", m.Status.Stage, m.Status.Conditions)
		}

		time.Sleep(200 * time.Millisecond)
	}
}
