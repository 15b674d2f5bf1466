package machinereclaim

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The package's tests share one API server, one controller manager and one
// emulated world with two clusters: a foreign one (fcp-1, fw-1), configured
// from a bundle made here that Ichor does not manage, and an Ichor one
// (ichor-1), whose TalosCluster and bundle are in the API server.
var (
	env     *testenv.Env
	scheme  *runtime.Scheme
	k8s     client.Client
	world   *talosemu.World
	foreign *secrets.Bundle
	managed *secrets.Bundle
	// adminPEM is the os:admin client certificate of the foreign talosconfig.
	adminPEM struct{ crt, key []byte }
	logs     syncBuffer
)

const (
	ns = "default"
	// foreignEndpoint is the endpoint written in the foreign talosconfig; it
	// answers nothing, so a controller that dialled it would fail.
	foreignEndpoint = "192.0.2.99"
)

// syncBuffer collects the controller's logs for the redaction checks.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.buf.String()
}

func TestMain(m *testing.M) {
	// Everything the controller logs is kept, and checked for the credential.
	os.Exit(testenv.Main(m, testenv.SuiteOptions{LogTo: &logs}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		env, scheme, k8s = s.Env, s.Scheme, s.Env.Client

		err := setup(ctx, s)
		if world != nil {
			return world.Close, err
		}

		return nil, err
	}))
}

func setup(ctx context.Context, s *testenv.Suite) error {
	spec := &talosemu.Spec{
		Subnet: "127.0.91.0/24",
		Machines: []talosemu.MachineSpec{
			{Name: "fcp-1", Role: talosemu.RoleHintControlPlane},
			{Name: "fw-1", Role: talosemu.RoleHintWorker, Disks: []talosemu.DiskSpec{
				{Type: "nvme", Size: "100GiB"}, {Type: "virtio", Size: "20GiB", Model: "DataDisk"},
			}},
			{Name: "ichor-1", Role: talosemu.RoleHintControlPlane},
		},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond),
			Reboot:  talosemu.Duration(200 * time.Millisecond),
			Boot:    talosemu.Duration(50 * time.Millisecond),
		},
	}

	var err error

	if world, err = talosemu.Start(ctx, spec, s.Dir); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if foreign, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	if managed, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	// The foreign cluster: configured the way its own tooling would, with a
	// bundle Ichor never sees.
	theirs := cluster("theirs")
	for _, n := range []string{"fcp-1", "fw-1"} {
		extra := ""
		if n == "fw-1" {
			extra = encryptedVolume
		}

		if err := configure(ctx, theirs, foreign, n, extra); err != nil {
			return fmt.Errorf("configuring %s: %w", n, err)
		}
	}

	if err := bootstrap(ctx, "fcp-1"); err != nil {
		return err
	}

	// The Ichor cluster.
	prod := cluster("prod")

	sec, err := bundle.Secret(ns, prod.Spec.SecretsBundleRef, managed)
	if err != nil {
		return err
	}

	if err := k8s.Create(ctx, sec); err != nil {
		return err
	}

	if err := k8s.Create(ctx, prod); err != nil {
		return err
	}

	if err := configure(ctx, prod, managed, "ichor-1", ""); err != nil {
		return fmt.Errorf("configuring ichor-1: %w", err)
	}

	mgr, err := s.NewManager()
	if err != nil {
		return err
	}

	r := &Reconciler{PollInterval: 200 * time.Millisecond, ResetTimeout: time.Minute}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}

	return testenv.StartManager(ctx, mgr)
}

// encryptedVolume is a user volume on the worker's second disk, encrypted:
// the inspection calls it out.
const encryptedVolume = `---
apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: disk.transport == "virtio"
  maxSize: 10GiB
encryption:
  provider: luks2
  keys:
    - slot: 0
      nodeID: {}
`

func cluster(name string) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(true)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

// configure renders a machine's configuration for cluster c from bundle b,
// applies it in maintenance mode and waits until the machine runs it.
func configure(ctx context.Context, c *ichorv1alpha1.TalosCluster, b *secrets.Bundle, name, extra string) error {
	em, err := world.Machine(name)
	if err != nil {
		return err
	}

	role := ichorv1alpha1.RoleWorker
	if em.Info().RoleHint == talosemu.RoleHintControlPlane {
		role = ichorv1alpha1.RoleControlPlane
	}

	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: c.Name,
			Address:     em.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved},
			Role:        role,
			Hostname:    name,
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}

	res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: b})
	if err != nil {
		return err
	}

	data := append(append([]byte{}, res.Bytes...), extra...)

	return em.ApplyInMaintenance(ctx, data, 30*time.Second)
}

// bootstrap starts etcd on a foreign control plane and waits until it lists its member.
func bootstrap(ctx context.Context, name string) error {
	em, err := world.Machine(name)
	if err != nil {
		return err
	}

	c, err := talos.DialTalosconfig(ctx, em.IP(), 0, foreignTalosconfig())
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	if err := waitFor(30*time.Second, func() error { return c.Bootstrap(ctx, &machine.BootstrapRequest{}) }); err != nil {
		return fmt.Errorf("bootstrap %s: %w", name, err)
	}

	return waitFor(60*time.Second, func() error {
		_, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})

		return err
	})
}

// foreignTalosconfig is the foreign cluster's os:admin talosconfig. Its
// endpoint is an address nothing answers on.
func foreignTalosconfig() []byte {
	if adminPEM.key == nil {
		admin, err := foreign.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
		if err != nil {
			panic(err)
		}

		adminPEM.crt, adminPEM.key = admin.Crt, admin.Key
	}

	b64 := base64.StdEncoding.EncodeToString
	cfg := &clientconfig.Config{Context: "theirs", Contexts: map[string]*clientconfig.Context{"theirs": {
		Endpoints: []string{foreignEndpoint}, Nodes: []string{foreignEndpoint},
		CA: b64(foreign.Certs.OS.Crt), Crt: b64(adminPEM.crt), Key: b64(adminPEM.key),
	}}}

	out, err := cfg.Bytes()
	if err != nil {
		panic(err)
	}

	return out
}

func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)

	for {
		err := cond()
		if err == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return err
		}

		time.Sleep(100 * time.Millisecond)
	}
}

// waitTimeout bounds every wait of the tests.
const waitTimeout = testenv.WaitTimeout
