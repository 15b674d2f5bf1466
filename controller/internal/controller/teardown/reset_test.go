package teardown

import (
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// resetSubnet is this test's emulated machines' subnet (no other suite uses it).
const resetSubnet = "127.0.141.0/24"

// TestClusterTeardownResetsMachines deletes a TalosCluster that carries
// ichor.maesh.dev/teardown-reset-machines: "true": its running machine (an
// emulated control plane running the cluster's configuration) is held,
// recorded as reset in status before the reset is sent, reset gracefully back
// to maintenance mode, and then deleted; with no machine left running the
// cluster, the bundle Secret goes last. A machine whose node is not the one
// its TalosMachine names is not reset: a Warning Event says so and the bundle
// is kept.
func TestClusterTeardownResetsMachines(t *testing.T) {
	ctx := t.Context()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "teardown-reset-"}}
	mustCreate(t, nsObj)
	ns := nsObj.Name
	const wait = 2 * time.Minute

	spec := &talosemu.Spec{
		Subnet: resetSubnet,
		Machines: []talosemu.MachineSpec{
			{Name: "wiped-cp", Role: talosemu.RoleHintControlPlane, Links: []talosemu.LinkSpec{{Name: "enp0s1", MAC: "0a:00:00:00:41:01"}}},
			{Name: "kept-cp", Role: talosemu.RoleHintControlPlane, Links: []talosemu.LinkSpec{{Name: "enp0s1", MAC: "0a:00:00:00:41:02"}}},
		},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond),
			Reboot:  talosemu.Duration(100 * time.Millisecond),
			Boot:    talosemu.Duration(50 * time.Millisecond),
		},
	}
	w, err := talosemu.Start(ctx, spec, t.TempDir())
	if err != nil {
		t.Fatalf("starting the emulated world: %v", err)
	}
	t.Cleanup(w.Close)

	run := func(name string, kept bool) (*ichorv1alpha1.TalosCluster, *corev1.Secret, *ichorv1alpha1.TalosMachine, *talosemu.Machine) {
		bun, err := bundle.Generate(secrets.NewClock(), "v1.14")
		testenv.Must(t, err)
		wo := newWorld(ns, name)
		c := wo.cluster
		c.Annotations = map[string]string{ichorv1alpha1.TeardownResetMachinesAnnotation: "true"}
		sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, bun)
		testenv.Must(t, err)
		mustCreate(t, sec, c)

		em, err := w.Machine(name + "-cp")
		testenv.Must(t, err)
		uuid := em.UUID()
		if kept {
			uuid = "another-machine"
		}
		m := &ichorv1alpha1.TalosMachine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-cp", Finalizers: []string{ichorv1alpha1.MachineFinalizer}},
			Spec: ichorv1alpha1.TalosMachineSpec{
				ClusterName: name, Address: em.IP(), Role: ichorv1alpha1.RoleControlPlane, Hostname: name + "-cp",
				Identity: ichorv1alpha1.MachineIdentity{UUID: uuid},
				// Pending: the lifecycle provisions nothing; the test sends the configuration.
				Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
				Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
				Network:  ichorv1alpha1.MachineNetwork{MACAddress: spec.Machines[map[bool]int{false: 0, true: 1}[kept]].Links[0].MAC, DHCP: new(true)},
			},
		}
		res, err := render.Render(render.Input{Cluster: c, Machine: m, Bundle: bun})
		testenv.Must(t, err)
		testenv.Must(t, em.ApplyInMaintenance(ctx, res.Bytes, time.Minute))
		mustCreate(t, m)
		testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
			m.Status.ConfigSentAt = &metav1.Time{Time: time.Now().Truncate(time.Second)}
			return k8s.Status().Update(ctx, m)
		}))
		return c, sec, m, em
	}

	c, sec, m, em := run("wiped", false)
	deleteCluster(t, c)

	testenv.Eventually(t, wait, "the reset Event", eventOn(ns, "wiped", ResetRequestedReason))
	testenv.Eventually(t, wait, "the node back in maintenance mode", func() error {
		if s := em.Stage(); s != runtime.MachineStageMaintenance {
			return fmt.Errorf("stage %s", s)
		}
		return nil
	})
	for _, o := range []client.Object{m, c, sec} {
		testenv.Eventually(t, wait, o.GetName()+" gone", gone(o))
	}
	testenv.Eventually(t, wait, "the torn-down Event", eventOn(ns, "wiped", TornDownReason))

	// A node that is not the machine named: no reset, a Warning Event, the bundle kept.
	c, sec, m, em = run("kept", true)
	deleteCluster(t, c)
	testenv.Eventually(t, wait, "the reset-skipped Event", eventOn(ns, "kept", ResetSkippedReason))
	for _, o := range []client.Object{m, c} {
		testenv.Eventually(t, wait, o.GetName()+" gone", gone(o))
	}
	if !exists(t, sec) {
		t.Fatal("the bundle Secret was deleted although machine kept-cp was not reset")
	}
	if s := em.Stage(); s != runtime.MachineStageRunning {
		t.Errorf("the machine that was not reset is %s, want running", s)
	}
}
