package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The admission rules of issue 17 that keep an operator from steering the CA
// keys or a reset somewhere else, and the smaller rules of the same review.

func withAddress(addr string) func(*ichorv1alpha1.TalosMachine) {
	return func(m *ichorv1alpha1.TalosMachine) { m.Spec.Address = addr }
}

// Rule: spec.address is fixed once the machine is approved; a machine moves
// by removal and a new approval.
func TestAddressImmutableOnceApproved(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, withAddress("192.168.10.21"))))

	// Allowed neighbour: the address of a machine not yet approved may change.
	testenv.Must(t, update(t, operator, newMachine(ns, "w", "", "", ""), withAddress("192.168.10.22")))
	testenv.Must(t, update(t, operator, newMachine(ns, "w", "", "", ""), approveBy("otto")))

	for _, c := range []client.Client{operator, admin} {
		err := update(t, c, newMachine(ns, "w", "", "", ""), withAddress("192.168.10.11"))
		refused(t, err, "Invalid", "spec.address is fixed once the machine is approved", "ichor node remove NAME", "approve it again at the new address")
	}
	// Taking the address away is a change too.
	refused(t, update(t, operator, newMachine(ns, "w", "", "", ""), withAddress("")), "Invalid", "spec.address is fixed")

	// Allowed neighbour: other fields of an approved machine still change.
	testenv.Must(t, update(t, operator, newMachine(ns, "w", "", "", ""), func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Labels = map[string]string{"rack": "a1"}
	}))
	got := newMachine(ns, "w", "", "", "")
	testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(got), got))
	if got.Spec.Address != "192.168.10.22" || got.Spec.Labels["rack"] != "a1" {
		t.Fatalf("address %q labels %v", got.Spec.Address, got.Spec.Labels)
	}
}

// Rule: the spec of a machine being removed is fixed (spec.forceRemove
// aside), and its finalizer can still be removed.
func TestAddressImmutableWhileDeleting(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	// Pending: the address rule of approved machines does not apply, the deletion rule does.
	m := newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, withAddress("192.168.10.21"), func(m *ichorv1alpha1.TalosMachine) {
		allowDelete(m)
		m.Finalizers = []string{ichorv1alpha1.MachineFinalizer}
	})
	testenv.Must(t, root.Create(ctx, m))
	testenv.Must(t, operator.Delete(ctx, m))

	err := update(t, operator, m, withAddress("192.168.10.11"))
	refused(t, err, "Invalid", "spec", "w is being removed", "spec.forceRemove")
	refused(t, update(t, admin, m, func(m *ichorv1alpha1.TalosMachine) { m.Spec.Role = ichorv1alpha1.RoleControlPlane }),
		"Invalid", "is being removed")

	// Allowed neighbours: forceRemove (the way out of a stuck removal), metadata, and the finalizer's removal.
	testenv.Must(t, update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Spec.ForceRemove = true }))
	testenv.Must(t, update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Labels = map[string]string{"seen": "yes"} }))
	testenv.Must(t, update(t, admin, m, func(m *ichorv1alpha1.TalosMachine) { m.Finalizers = nil }))
}

// Rule: setting or changing the trust-maintenance-fingerprint annotation
// needs `update` on `talosmachines/trust` (ichor-admin only).
func TestTrustFingerprintAnnotationNeedsAdmin(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "m", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending)))
	trust := func(fp string) func(*ichorv1alpha1.TalosMachine) {
		return func(m *ichorv1alpha1.TalosMachine) {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[ichorv1alpha1.TrustMaintenanceFingerprintAnnotation] = fp
		}
	}
	err := update(t, operator, newMachine(ns, "m", "", "", ""), trust("sha256:aa"))
	refused(t, err, "Forbidden", ichorv1alpha1.TrustMaintenanceFingerprintAnnotation, "`update` on `talosmachines/trust`", `user "otto"`, "ichor-admin")
	// An operator cannot slip it in at create either.
	err = operator.Create(ctx, newMachine(ns, "m2", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, trust("sha256:aa")))
	refused(t, err, "Forbidden", "`update` on `talosmachines/trust`")

	testenv.Must(t, update(t, admin, newMachine(ns, "m", "", "", ""), trust("sha256:aa")))
	// An operator's other writes keep the annotation as it is.
	testenv.Must(t, update(t, operator, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Labels = map[string]string{"rack": "a1"}
	}))
	refused(t, update(t, operator, newMachine(ns, "m", "", "", ""), trust("sha256:bb")), "Forbidden", "`update` on `talosmachines/trust`")
	testenv.Must(t, update(t, admin, newMachine(ns, "m", "", "", ""), trust("sha256:bb")))
}

// Rule: an operation's spec is immutable except spec.paused.
func TestOperationSpecImmutable(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "other")))
	op := newOperation(ns, "cfg", ichorv1alpha1.OperationConfig)
	testenv.Must(t, operator.Create(ctx, op))

	refused(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Type = ichorv1alpha1.OperationNode
		o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "cp-1", Action: ichorv1alpha1.NodeActionReset}
	}), "Invalid", "immutable")
	refused(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) { o.Spec.ClusterName = "other" }),
		"Invalid", "spec.type and spec.clusterName are immutable")
	refused(t, update(t, admin, op, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a1"}}
	}), "Invalid", "spec.machineSelector", "only spec.paused changes")
	refused(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) { o.Spec.OrderBy = "rack" }),
		"Invalid", "spec.orderBy", "only spec.paused changes")
	two := intstr.FromInt32(2)
	refused(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) { o.Spec.MaxUnavailable = &two }),
		"Invalid", "spec.maxUnavailable", "only spec.paused changes")

	// Allowed neighbours: what `ichor operation pause` and `resume` write.
	testenv.Must(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) { o.Spec.Paused = true }))
	testenv.Must(t, update(t, operator, op, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Paused = false
		o.Annotations = map[string]string{ichorv1alpha1.ResumeAnnotation: "2026-11-30T12:00:00Z"}
	}))
	got := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(op), got))
	if got.Spec.Type != ichorv1alpha1.OperationConfig || got.Spec.ClusterName != "c" || got.Spec.MachineSelector != nil || got.Spec.OrderBy != "" {
		t.Fatalf("the spec changed: %+v", got.Spec)
	}
}

// Rule: an operation the runnable types refuse by their spec is refused at
// admission, with what to do instead; a config rollout is admitted.
func TestOperationTypeNotRunnableIsRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	// A key rotation with a machine selector is refused; without one it is admitted.
	refused(t, admin.Create(ctx, newOperation(ns, "keys-some", ichorv1alpha1.OperationKeyRotation, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.MachineSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	})), "Invalid", "spec.machineSelector", "every control plane")
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "keys", ichorv1alpha1.OperationKeyRotation)))
	// A CA rotation of the etcd CA is refused; of the Talos API and
	// Kubernetes CAs it is admitted.
	refused(t, admin.Create(ctx, newOperation(ns, "etcd-ca", ichorv1alpha1.OperationCARotation, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.CARotation = &ichorv1alpha1.CARotation{Etcd: true}
	})), "Invalid", "spec.caRotation.etcd", "does not rotate the etcd CA")
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "ca", ichorv1alpha1.OperationCARotation, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.CARotation = &ichorv1alpha1.CARotation{}
	})))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "cfg", ichorv1alpha1.OperationConfig)))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "talos", ichorv1alpha1.OperationTalos, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Talos = &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"}
	})))
}

// Rule: machines being deleted do not count as remaining control planes.
func TestDeletingMachinesDoNotCountAsRemaining(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 3 })))
	for _, name := range []string{"cp1", "cp2", "cp3", "cp4"} {
		testenv.Must(t, root.Create(ctx, newMachine(ns, name, "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) {
			allowDelete(m)
			m.Finalizers = []string{ichorv1alpha1.MachineFinalizer}
		})))
	}
	// cp4's removal starts (3 others remain); its finalizer keeps it while the controller works.
	testenv.Must(t, admin.Delete(ctx, newMachine(ns, "cp4", "c", "", "")))

	// Counting cp4 would leave 3; it is going, so removing cp1 leaves 2.
	err := admin.Delete(ctx, newMachine(ns, "cp1", "c", "", ""))
	refused(t, err, "Invalid", "spec.role", "would leave 2 control planes, fewer than the 3")

	// Allowed neighbour: a replacement that stays (the limit of count+1 does not count cp4 either).
	testenv.Must(t, root.Create(ctx, newMachine(ns, "cp5", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, admin.Delete(ctx, newMachine(ns, "cp1", "c", "", "")))
}

// Rule: lowering spec.controlPlane.count below the approved control planes needs override.
func TestLoweringControlPlaneCountNeedsOverride(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	three := func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 3 }
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", three)))
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		testenv.Must(t, root.Create(ctx, newMachine(ns, name, "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	}
	lower := func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 1 }
	err := update(t, operator, newCluster(ns, "c"), lower)
	refused(t, err, "Invalid", "spec.controlPlane.count", "from 3 to 1 leaves 3 approved control planes", "`override`")

	// Allowed neighbours: raising it; lowering it to no fewer than the approved ones.
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 5 }))
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), three))
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "small", three)))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "s-cp1", "small", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, update(t, operator, newCluster(ns, "small"), lower))

	// The admin holds override: recorded as a warning and an Event.
	adminWarnings.take()
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), lower))
	if w := adminWarnings.take(); len(w) == 0 || !strings.Contains(strings.Join(w, "\n"), "spec.controlPlane.count") {
		t.Errorf("the override must be reported as a warning, got %q", w)
	}
	waitForOverrideEvent(t, ns, "c", "lowering the control-plane count")
}

// Rule: discovery scans at most every minute, and subnets of bounded size.
func TestDiscoveryScanLimits(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	discovery := func(interval string, subnets ...string) func(*ichorv1alpha1.TalosCluster) {
		return func(c *ichorv1alpha1.TalosCluster) {
			c.Spec.Discovery.Subnets = subnets
			c.Spec.Discovery.Interval = nil
			if interval != "" {
				d, err := time.ParseDuration(interval)
				testenv.Must(t, err)
				c.Spec.Discovery.Interval = &metav1.Duration{Duration: d}
			}
		}
	}
	refused(t, update(t, operator, newCluster(ns, "c"), discovery("30s")), "Invalid",
		"spec.discovery.interval", "at least 1m0s, not 30s", "1m or longer")
	refused(t, update(t, operator, newCluster(ns, "c"), discovery("", "10.0.0.0/16")), "Invalid",
		"spec.discovery.subnets", "more than 4096 addresses", "/20")
	refused(t, update(t, operator, newCluster(ns, "c"), discovery("", "10.0.0.0/20", "10.0.16.0/20", "10.0.32.0/20")), "Invalid",
		"spec.discovery.subnets", "12288 addresses in all", "at most 8192")
	refused(t, admin.Create(ctx, newCluster(ns, "wide", discovery("", "fd00::/64"))), "Invalid", "spec.discovery.subnets", "/116")

	// Allowed neighbours: a minute, and two /20s.
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), discovery("1m", "10.0.0.0/20", "10.0.16.0/24")))
	testenv.Must(t, update(t, operator, newCluster(ns, "c"), discovery("", "10.0.0.0/20", "10.0.16.0/20")))
}
