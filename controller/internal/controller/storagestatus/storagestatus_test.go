package storagestatus_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/controller/internal/controller/storagestatus"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The API server plays both parts: Ichor's (TalosStorages, TalosMachines)
// and the workload cluster's, whose Nodes carry the extensions.talos.dev/*
// labels Talos writes (the test writes them as Talos's node label controller
// would).
var (
	k8s       client.Client
	world     *talosemu.World
	theBundle *secrets.Bundle
	restCfg   *rest.Config
)

// diskNode is the emulated machine, a control plane with a data disk
// (serial DATA-A).
const diskNode = "cp-disk"

const (
	ns      = "default"
	cluster = "lab"
	timeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		b, err := bundle.Generate(secrets.NewClock(), "v1.14")
		if err != nil {
			return nil, err
		}

		theBundle = b

		// One emulated machine, for the Talos side of a TalosStorage (its volumes).
		if world, err = talosemu.Start(ctx, &talosemu.Spec{
			Subnet: "127.0.147.0/24",
			Machines: []talosemu.MachineSpec{{Name: diskNode, Role: talosemu.RoleHintControlPlane, Disks: []talosemu.DiskSpec{
				{Type: talosemu.DiskNVMe}, {Type: talosemu.DiskSATA, Size: "50GiB", Serial: new("DATA-A")},
			}}},
			Durations: talosemu.Durations{
				Install: talosemu.Duration(100 * time.Millisecond), Reboot: talosemu.Duration(100 * time.Millisecond), Boot: talosemu.Duration(50 * time.Millisecond),
			},
		}, s.Dir); err != nil {
			return nil, err
		}

		c := testenv.TalosCluster(ns, cluster)

		sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
		if err != nil {
			return nil, err
		}

		for _, o := range []client.Object{sec, c} {
			if err := k8s.Create(ctx, o); err != nil {
				return nil, err
			}
		}

		mgr, err := s.NewManager()
		if err != nil {
			return nil, err
		}

		cfg := rest.CopyConfig(mgr.GetConfig())
		restCfg = cfg
		r := &storagestatus.Reconciler{
			Resync: 500 * time.Millisecond,
			Config: func(context.Context, *ichorv1alpha1.TalosCluster, *secrets.Bundle) (*rest.Config, error) {
				return cfg, nil
			},
		}

		if err := r.SetupWithManager(mgr); err != nil {
			return nil, err
		}

		return world.Close, testenv.StartManager(ctx, mgr)
	}))
}

func worker(t *testing.T, name string, labels map[string]string) {
	t.Helper()

	ctx := context.Background()
	now := metav1.Now()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: cluster, Role: ichorv1alpha1.RoleWorker, Identity: ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
		},
	}
	testenv.Must(t, k8s.Create(ctx, m))
	testenv.UpdateStatus(t, k8s, m, func(cur *ichorv1alpha1.TalosMachine) { cur.Status.NodeName = name })
	testenv.Must(t, k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}))
}

func waitCondition(t *testing.T, name string, check func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error) {
	t.Helper()

	testenv.Eventually(t, timeout, "ExtensionsPresent of "+name, func() error {
		ts := &ichorv1alpha1.TalosStorage{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ts); err != nil {
			return err
		}

		c := apimeta.FindStatusCondition(ts.Status.Conditions, ichorv1alpha1.ExtensionsPresentCondition)
		if c == nil {
			return fmt.Errorf("no condition yet")
		}

		return check(ts, c)
	})
}

// TestExtensionsPresent: a longhorn-v1 TalosStorage reports the extension a
// selected node's Node lacks, then True once its label is there; a raw one
// needs none. The condition never touches Ready.
func TestExtensionsPresent(t *testing.T) {
	ctx := context.Background()

	worker(t, "w-1", map[string]string{"extensions.talos.dev/iscsi-tools": "v0.2.0", "extensions.talos.dev/util-linux-tools": "2.41.1"})
	worker(t, "w-2", map[string]string{"extensions.talos.dev/iscsi-tools": "v0.2.0"})

	lh := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lh"},
		Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: cluster, Preset: ichorv1alpha1.StoragePresetLonghornV1},
	}
	testenv.Must(t, k8s.Create(ctx, lh))

	waitCondition(t, "lh", func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error {
		if c.Status != metav1.ConditionFalse || c.Reason != "ExtensionsMissing" || ts.Status.Nodes != 2 ||
			!slices.Equal(ts.Status.MissingExtensions, []string{"util-linux-tools"}) {
			return fmt.Errorf("%s %s %q, nodes %d, missing %v", c.Status, c.Reason, c.Message, ts.Status.Nodes, ts.Status.MissingExtensions)
		}

		if !strings.Contains(c.Message, "w-2 lacks util-linux-tools") || strings.Contains(c.Message, "w-1") {
			return fmt.Errorf("message %q", c.Message)
		}

		// ExtensionsPresent never gates Ready: Ready follows NodesPrepared
		// (the workers are not installed).
		if r := apimeta.FindStatusCondition(ts.Status.Conditions, ichorv1alpha1.ReadyCondition); r == nil || r.Reason != storagestatus.NodesNotPreparedReason {
			return fmt.Errorf("Ready %+v, want NodesNotPrepared", r)
		}

		return nil
	})

	// The node gets the extension (an upgrade to a schematic with it).
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "w-2"}, n); err != nil {
			return err
		}

		n.Labels["extensions.talos.dev/util-linux-tools"] = "2.41.1"

		return k8s.Update(ctx, n)
	}))

	waitCondition(t, "lh", func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error {
		if c.Status != metav1.ConditionTrue || c.Reason != "ExtensionsPresent" || len(ts.Status.MissingExtensions) != 0 {
			return fmt.Errorf("%s %s %q, missing %v", c.Status, c.Reason, c.Message, ts.Status.MissingExtensions)
		}

		return nil
	})

	raw := &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ceph"},
		Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: cluster, Preset: ichorv1alpha1.StoragePresetRaw},
	}
	testenv.Must(t, k8s.Create(ctx, raw))

	waitCondition(t, "ceph", func(ts *ichorv1alpha1.TalosStorage, c *metav1.Condition) error {
		if c.Status != metav1.ConditionTrue || c.Reason != "NoneRequired" || ts.Status.Nodes != 2 {
			return fmt.Errorf("%s %s %q, nodes %d", c.Status, c.Reason, c.Message, ts.Status.Nodes)
		}

		return nil
	})
}
