package testworld

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// FirstControlPlane is the machine bootstrapped, cp-1.
const FirstControlPlane = "cp-1"

// OneControlPlane is a world whose cluster is one schedulable control plane,
// cp-1, with the cluster's Kubernetes served by one API server, provisioned
// by the real machine and lifecycle reconcilers of a long-lived manager.
type OneControlPlane struct {
	// Subnet is the world's; each test package needs its own.
	Subnet          string
	Namespace, Name string
	// Extra are machines the world has besides cp-1, which the cluster
	// does not take.
	Extra []talosemu.MachineSpec
	// Cluster changes the TalosCluster before it is created.
	Cluster func(*ichorv1alpha1.TalosCluster)
	// Controllers set up further reconcilers on the manager.
	Controllers []func(ctrl.Manager) error
	// Within bounds the provisioning.
	Within time.Duration
}

// Start starts the world and the manager and provisions cp-1. The world is
// returned once started, with an error too, for the caller to close.
func (o OneControlPlane) Start(ctx context.Context, s *testenv.Suite) (*talosemu.World, *secrets.Bundle, error) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return nil, nil, err
	}

	spec := &talosemu.Spec{
		Subnet:   o.Subnet,
		Machines: append([]talosemu.MachineSpec{{Name: FirstControlPlane, Role: talosemu.RoleHintControlPlane}}, o.Extra...),
		Durations: talosemu.Durations{
			Install: talosemu.Duration(200 * time.Millisecond), Reboot: talosemu.Duration(200 * time.Millisecond), Boot: talosemu.Duration(100 * time.Millisecond),
		},
	}

	world, err := talosemu.Start(ctx, spec, s.Dir, talosemu.Options{Kubernetes: true, KubeAssets: assets, SingleAPIServer: true})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the emulated world: %w", err)
	}

	bun, err := o.start(ctx, s, world)

	return world, bun, err
}

func (o OneControlPlane) start(ctx context.Context, s *testenv.Suite, world *talosemu.World) (*secrets.Bundle, error) {
	bun, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		return nil, err
	}

	em, err := world.Machine(FirstControlPlane)
	if err != nil {
		return nil, err
	}

	c := testenv.TalosCluster(o.Namespace, o.Name)
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: em.IP()}
	c.Spec.ControlPlane.Schedulable = new(true)

	if o.Cluster != nil {
		o.Cluster(c)
	}

	sec, err := bundle.Secret(o.Namespace, c.Spec.SecretsBundleRef, bun)
	if err != nil {
		return nil, err
	}

	for _, obj := range []client.Object{sec, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}, c} {
		if err := s.Env.Client.Create(ctx, obj); err != nil {
			return nil, err
		}
	}

	mgr, err := s.NewManager()
	if err != nil {
		return nil, err
	}

	if err := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}

	setups := append([]func(ctrl.Manager) error{
		(&talosmachine.Reconciler{DriftInterval: 2 * time.Second}).SetupWithManager,
		(&lifecycle.Reconciler{PollInterval: 300 * time.Millisecond, MonitorInterval: time.Second}).SetupWithManager,
	}, o.Controllers...)

	for _, setup := range setups {
		if err := setup(mgr); err != nil {
			return nil, err
		}
	}

	if err := testenv.StartManager(ctx, mgr); err != nil {
		return nil, err
	}

	w := Cluster{Client: s.Env.Client, World: world, Bundle: bun, Namespace: o.Namespace, Name: o.Name, Machines: []string{FirstControlPlane}}

	return bun, w.Provision(ctx, time.Now().Add(o.Within))
}
