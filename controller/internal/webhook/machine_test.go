package webhook

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// approveBy approves a machine and records user as the one who decided.
func approveBy(user string) func(*ichorv1alpha1.TalosMachine) {
	return func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: user, DecidedAt: ptr(metav1.Now())}
	}
}

// Rule: no approving more control planes than count (+1 while replacing).
func TestApprovalIsLimitedByTheControlPlaneCount(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c"))) // count 1
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		testenv.Must(t, root.Create(ctx, newMachine(ns, name, "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalPending)))
	}
	testenv.Must(t, update(t, operator, newMachine(ns, "cp1", "", "", ""), approveBy("otto")))
	// The second is the replacement slot (count + 1).
	testenv.Must(t, update(t, operator, newMachine(ns, "cp2", "", "", ""), approveBy("otto")))
	err := update(t, operator, newMachine(ns, "cp3", "", "", ""), approveBy("otto"))
	refused(t, err, "Invalid", "spec.approval.state", "3 approved control planes", "declares 1", "raise spec.controlPlane.count")

	// The neighbour: the same machine approved as a worker.
	testenv.Must(t, update(t, operator, newMachine(ns, "cp3", "", "", ""), func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Role = ichorv1alpha1.RoleWorker
		approveBy("otto")(m)
	}))
}

// Rule: approving needs the verb approve on talosmachines/approval.
func TestApprovalNeedsTheApproveVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "m", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending)))
	editor := grantUser(t, "eddie", rbacv1.PolicyRule{
		APIGroups: []string{ichorv1alpha1.Group}, Resources: []string{"talosmachines"}, Verbs: []string{"get", "update"},
	})
	// The editor may change labels, but not decide the approval.
	testenv.Must(t, update(t, editor, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Labels = map[string]string{"rack": "a1"}
	}))
	err := update(t, editor, newMachine(ns, "m", "", "", ""), approveBy("eddie"))
	refused(t, err, "Forbidden", "spec.approval", "`approve` on `talosmachines/approval`", `user "eddie"`)
	testenv.Must(t, update(t, operator, newMachine(ns, "m", "", "", ""), approveBy("otto")))
}

// Rule: disk roles requiring a reinstall are immutable after install.
func TestReinstallDiskRolesAreFixedAfterInstall(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	m := newMachine(ns, "m", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.5000c500a1b2c3d4"}
		m.Spec.Disks = []ichorv1alpha1.DiskRole{
			{Disk: ichorv1alpha1.DiskSelector{Serial: "S3EPH"}, Role: ichorv1alpha1.DiskRoleEphemeral},
			{Disk: ichorv1alpha1.DiskSelector{Serial: "S3DATA"}, Role: ichorv1alpha1.DiskRoleUnused},
		}
	})
	testenv.Must(t, root.Create(ctx, m))
	// Before install, the roles may still change.
	testenv.Must(t, update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Spec.Disks[0].Disk.Serial = "S3EPH2" }))
	// The controller records the install in status.
	m.Status.Installed = true
	m.Status.Stage = ichorv1alpha1.StageRunning
	testenv.Must(t, root.Status().Update(ctx, m))

	err := update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) {
		m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.other"}
	})
	refused(t, err, "Invalid", "spec.install", "fixed once the machine is installed", "approve it again")
	err = update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Spec.Disks[0].Role = ichorv1alpha1.DiskRoleUnused })
	refused(t, err, "Invalid", "spec.disks", "system or ephemeral", "reinstall")

	// Adding a storage role to an unused disk needs no reinstall.
	testenv.Must(t, update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Spec.Disks[1].Role = ichorv1alpha1.DiskRoleStorage }))
}

// Rule: TalosMachine deletable only with allow-delete: "true".
func TestMachineDeletionNeedsAllowDelete(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	m := newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)
	testenv.Must(t, root.Create(ctx, m))
	refused(t, operator.Delete(ctx, m), "Invalid", "metadata.annotations[ichor.maesh.dev/allow-delete]",
		"protected against deletion", `ichor.maesh.dev/allow-delete: "true"`)
	testenv.Must(t, update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { allowDelete(m) }))
	testenv.Must(t, operator.Delete(ctx, m))
}

// Rule: never deleting the last control plane — and the allow-delete
// annotation alone does not let it go (the explicit test the issue asks for).
func TestAllowDeleteAloneDoesNotLetTheLastControlPlaneGo(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	c := newCluster(ns, "c")
	testenv.Must(t, admin.Create(ctx, c))
	cp := newMachine(ns, "cp", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) { allowDelete(m) })
	testenv.Must(t, root.Create(ctx, cp))
	if cp.Annotations[ichorv1alpha1.AllowDeleteAnnotation] != "true" {
		t.Fatal("the fixture must carry the allow-delete annotation")
	}
	// Refused for everyone, a cluster administrator included: no verb lets it go.
	for _, c := range []client.Client{operator, admin, root} {
		err := c.Delete(ctx, cp)
		refused(t, err, "Invalid", "spec.role", "last control plane", "the allow-delete annotation does not change that", "delete the TalosCluster")
	}
	testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(cp), cp))

	// The neighbour: when the whole cluster is being torn down, its last control plane goes.
	c.Finalizers = []string{ichorv1alpha1.ClusterFinalizer}
	testenv.Must(t, update(t, admin, c, func(c *ichorv1alpha1.TalosCluster) {
		allowDelete(c)
		c.Finalizers = []string{ichorv1alpha1.ClusterFinalizer}
	}))
	testenv.Must(t, admin.Delete(ctx, c))
	testenv.Must(t, admin.Delete(ctx, cp))
	if err := root.Get(ctx, client.ObjectKeyFromObject(cp), cp); !apierrors.IsNotFound(err) {
		t.Fatalf("the control plane should be gone, got %v", err)
	}
	// Clean up the cluster: the admin holds override, so the finalizer may go.
	testenv.Must(t, update(t, admin, c, func(c *ichorv1alpha1.TalosCluster) { c.Finalizers = nil }))
}

// Rule: a control-plane removal that would leave fewer than the declared count (quorum) is refused.
func TestControlPlaneRemovalKeepsTheDeclaredCount(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c", func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 3 })))
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		testenv.Must(t, root.Create(ctx, newMachine(ns, name, "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved,
			func(m *ichorv1alpha1.TalosMachine) { allowDelete(m) })))
	}
	err := admin.Delete(ctx, newMachine(ns, "cp1", "c", "", ""))
	refused(t, err, "Invalid", "spec.role", "would leave 2 control planes, fewer than the 3", "add, then remove")

	// Add, then remove: 3 -> 4 -> 3.
	testenv.Must(t, root.Create(ctx, newMachine(ns, "cp4", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, admin.Delete(ctx, newMachine(ns, "cp1", "c", "", "")))
}

// Rule: the last-worker guard (unschedulable control planes) needs override.
func TestLastWorkerGuardNeedsOverride(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved,
		func(m *ichorv1alpha1.TalosMachine) { allowDelete(m) })))
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Schedulable = ptr(false) }))

	err := operator.Delete(ctx, newMachine(ns, "w", "c", "", ""))
	refused(t, err, "Invalid", "spec.role", "last worker", "override")
	adminWarnings.take()
	testenv.Must(t, admin.Delete(ctx, newMachine(ns, "w", "c", "", "")))
	if w := adminWarnings.take(); len(w) == 0 {
		t.Error("the override must be reported as a warning")
	}
	waitForOverrideEvent(t, ns, "c", "last worker")
}

// Rule: removing an Ichor finalizer needs the override verb.
func TestRemovingAnIchorFinalizerNeedsOverride(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	m := newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) {
		allowDelete(m)
		m.Finalizers = []string{ichorv1alpha1.MachineFinalizer, "example.com/other"}
	})
	testenv.Must(t, root.Create(ctx, m))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "w2", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, operator.Delete(ctx, m)) // deleting: the finalizers hold it

	// Someone else's finalizer is not Ichor's business.
	testenv.Must(t, update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Finalizers = []string{ichorv1alpha1.MachineFinalizer} }))
	err := update(t, operator, m, func(m *ichorv1alpha1.TalosMachine) { m.Finalizers = nil })
	refused(t, err, "Forbidden", "metadata.finalizers", ichorv1alpha1.MachineFinalizer, "`override` on `talosclusters`", `user "otto"`)
	testenv.Must(t, update(t, admin, m, func(m *ichorv1alpha1.TalosMachine) { m.Finalizers = nil }))
	if err := root.Get(ctx, client.ObjectKeyFromObject(m), m); !apierrors.IsNotFound(err) {
		t.Fatalf("the machine should be gone once its finalizer is removed, got %v", err)
	}
}

// Rule: an approval records who decided — the requesting user — and when.
func TestApprovalRecordsWhoDecided(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "m", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending)))
	err := update(t, operator, newMachine(ns, "m", "", "", ""), approveBy("ada"))
	refused(t, err, "Invalid", "spec.approval.decidedBy", `the request comes from "otto"`, `set spec.approval.decidedBy: "otto"`)
	err = update(t, operator, newMachine(ns, "m", "", "", ""), func(m *ichorv1alpha1.TalosMachine) {
		approveBy("otto")(m)
		m.Spec.Approval.DecidedAt = nil
	})
	refused(t, err, "Invalid", "decidedAt is unset")
	testenv.Must(t, update(t, operator, newMachine(ns, "m", "", "", ""), approveBy("otto")))
	got := newMachine(ns, "m", "", "", "")
	testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(got), got))
	if got.Spec.Approval.DecidedBy != "otto" || got.Spec.Approval.DecidedAt == nil {
		t.Fatalf("approval record: %+v", got.Spec.Approval)
	}
}

// Rule: systemDiskLayout shared is warned about on a control plane (etcd
// shares the disk's I/O), admitted on a worker, and refused when it cannot
// work (an EPHEMERAL cap under Talos's 2 GiB minimum).
func TestSharedSystemDiskLayout(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))

	shared := func(maxSize string) func(*ichorv1alpha1.TalosMachine) {
		return func(m *ichorv1alpha1.TalosMachine) {
			m.Spec.Install = ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, SystemDiskLayout: ichorv1alpha1.SystemDiskLayoutShared}
			if maxSize != "" {
				m.Spec.Disks = []ichorv1alpha1.DiskRole{{Disk: ichorv1alpha1.DiskSelector{WWID: "naa.sys"}, Role: ichorv1alpha1.DiskRoleSystem, MaxSize: maxSize}}
			}
		}
	}

	adminWarnings.take()
	testenv.Must(t, admin.Create(ctx, newMachine(ns, "cp", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalPending, shared(""))))

	if w := strings.Join(adminWarnings.take(), "\n"); !strings.Contains(w, "systemDiskLayout shared on a control plane") || !strings.Contains(w, "etcd") {
		t.Errorf("warnings %q, want the control-plane warning", w)
	}

	testenv.Must(t, admin.Create(ctx, newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, shared("40GiB"))))

	if w := adminWarnings.take(); len(w) != 0 {
		t.Errorf("a shared worker is warned about: %v", w)
	}

	err := admin.Create(ctx, newMachine(ns, "tiny", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalPending, shared("1GiB")))
	refused(t, err, "Invalid", "spec.disks[0].maxSize", "EPHEMERAL needs at least 2GiB", "maxSize of at least 2GiB")
}
