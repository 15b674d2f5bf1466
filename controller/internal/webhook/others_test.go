package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func newOperation(ns, name, typ string, mutate ...func(*ichorv1alpha1.TalosOperation)) *ichorv1alpha1.TalosOperation {
	o := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: "c", Type: typ},
	}
	for _, f := range mutate {
		f(o)
	}
	return o
}

func nodeAction(action string) func(*ichorv1alpha1.TalosOperation) {
	return func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "m", Action: action}
	}
}

// notRunnable asserts that err refuses an operation only because this release
// does not run its type: every other check (the verbs above all) passed.
func notRunnable(t *testing.T, err error, typ string) {
	t.Helper()
	refused(t, err, "Invalid", "spec.type", `does not run operations of type "`+typ+`"`)
	if apierrors.IsForbidden(err) {
		t.Fatalf("refused for a verb, not only for the type: %v", err)
	}
}

// nodeMachines creates an approved control plane "cp" and an approved
// worker "m" (the machine nodeAction names) of cluster c.
func nodeMachines(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	testenv.Must(t, root.Create(ctx, newMachine(ns, "cp", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "m", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)))
}

// Rule: resetting a node needs the override verb (and its own verb).
func TestNodeResetNeedsOverride(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	nodeMachines(t, ns)
	err := operator.Create(ctx, newOperation(ns, "reset", ichorv1alpha1.OperationNode, nodeAction(ichorv1alpha1.NodeActionReset)))
	refused(t, err, "Forbidden", "spec.node.action", "`reset-node` on `talosoperations`", "`override` on `talosclusters`")
	// The neighbours: an operator reboots, an admin resets.
	testenv.Must(t, operator.Create(ctx, newOperation(ns, "reboot", ichorv1alpha1.OperationNode, nodeAction(ichorv1alpha1.NodeActionReboot))))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reset", ichorv1alpha1.OperationNode, nodeAction(ichorv1alpha1.NodeActionReset))))
}

// Rule: a node operation never shuts down or resets the last control plane,
// nor a control plane whose absence breaks the etcd quorum; the way out
// names the reboot. Its neighbours: a reboot of the last control plane, a
// reset of a worker, and a reset of one control plane of three.
func TestNodeResetLastControlPlaneRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	nodeMachines(t, ns)
	on := func(machine, action string) func(*ichorv1alpha1.TalosOperation) {
		return func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: machine, Action: action}
		}
	}
	err := admin.Create(ctx, newOperation(ns, "reset-cp", ichorv1alpha1.OperationNode, on("cp", ichorv1alpha1.NodeActionReset)))
	refused(t, err, "Invalid", "spec.node.action", "cp is the last control plane", "wipes the cluster's only etcd data", "`ichor node reboot cp`")
	err = admin.Create(ctx, newOperation(ns, "off-cp", ichorv1alpha1.OperationNode, on("cp", ichorv1alpha1.NodeActionShutdown)))
	refused(t, err, "Invalid", "cp is the last control plane")
	err = admin.Create(ctx, newOperation(ns, "reset-x", ichorv1alpha1.OperationNode, on("nope", ichorv1alpha1.NodeActionReset)))
	refused(t, err, "Invalid", "spec.node.machineName", `"nope" does not exist`, "ichor machine list")
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reboot-cp", ichorv1alpha1.OperationNode, on("cp", ichorv1alpha1.NodeActionReboot))))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reset-m", ichorv1alpha1.OperationNode, on("m", ichorv1alpha1.NodeActionReset))))

	// Two control planes (one being replaced): either alone cannot keep a quorum.
	testenv.Must(t, root.Create(ctx, newMachine(ns, "cp2", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	err = admin.Create(ctx, newOperation(ns, "reset-cp2", ichorv1alpha1.OperationNode, on("cp2", ichorv1alpha1.NodeActionReset)))
	refused(t, err, "Invalid", "would leave 1 of 2 control planes, fewer than the 2 an etcd quorum needs")
	// Three: one may go.
	testenv.Must(t, update(t, root, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.ControlPlane.Count = 3 }))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "cp3", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reset-cp3", ichorv1alpha1.OperationNode, on("cp3", ichorv1alpha1.NodeActionReset))))
}

// Rule: restoring etcd needs its verb, override and the secret-references
// verb (the identity Secret), the cluster's name typed, a backup of the
// cluster whose store lives outside it and lists the snapshot; it is refused
// while other work holds the cluster lock or another restore is unfinished.
// Each refusal names the way out, and nothing is created.
func TestEtcdRestoreAdmission(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))

	const key = "ns/c/snapshots/20261129T120000Z-r42.db.age"

	backup := func(name, endpoint string) {
		b := &ichorv1alpha1.TalosEtcdBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.TalosEtcdBackupSpec{
				ClusterName: "c", Schedule: "@daily",
				S3:               ichorv1alpha1.S3Destination{Endpoint: endpoint, Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
				EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"},
			},
		}
		testenv.Must(t, root.Create(ctx, b))
		testenv.UpdateStatus(t, root, b, func(cur *ichorv1alpha1.TalosEtcdBackup) {
			cur.Status.Snapshots = []ichorv1alpha1.SnapshotInfo{{Name: key, TakenAt: metav1.Now(), EtcdRevision: 42}}
		})
	}
	backup("b", "https://s3.example.com")
	backup("inside", "http://minio.minio.svc:9000")

	restore := func(mut func(*ichorv1alpha1.EtcdRestore)) func(*ichorv1alpha1.TalosOperation) {
		return func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.EtcdRestore = &ichorv1alpha1.EtcdRestore{BackupName: "b", Snapshot: key, ConfirmClusterName: "c",
				IdentityRef: ichorv1alpha1.SecretReference{Name: "restore-identity"}}
			mut(o.Spec.EtcdRestore)
		}
	}
	same := func(*ichorv1alpha1.EtcdRestore) {}

	err := operator.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(same)))
	refused(t, err, "Forbidden", "`restore-etcd` on `talosoperations`", "`override` on `talosclusters`", "`update` on `talosoperations/secret-references`")
	err = admin.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(func(r *ichorv1alpha1.EtcdRestore) { r.ConfirmClusterName = "prod" })))
	refused(t, err, "Invalid", "spec.etcdRestore.confirmClusterName", "typed as consent", "confirmClusterName: c")
	err = admin.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(func(r *ichorv1alpha1.EtcdRestore) { r.BackupName = "nope" })))
	refused(t, err, "Invalid", "spec.etcdRestore.backupName", `TalosEtcdBackup "nope" does not exist`, "ichor etcd backup list")
	err = admin.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(func(r *ichorv1alpha1.EtcdRestore) {
		r.Snapshot = "ns/c/snapshots/20261128T120000Z-r40.db.age"
	})))
	refused(t, err, "Invalid", "spec.etcdRestore.snapshot", "lists no snapshot", "ichor etcd backup list b")
	err = admin.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(func(r *ichorv1alpha1.EtcdRestore) { r.BackupName = "inside" })))
	refused(t, err, "Invalid", "lives inside the cluster", "override does not override this")

	// Other work holds the cluster lock: a running config rollout.
	testenv.Must(t, operator.Create(ctx, newOperation(ns, "config", ichorv1alpha1.OperationConfig)))
	if err := root.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	locker := &lock.Locker{Client: root, Check: lock.ClientChecker(root)}
	cluster := types.NamespacedName{Namespace: ns, Name: "c"}
	if res, err := locker.Acquire(ctx, cluster, lock.OperationIdentity(ns, "config")); err != nil || !res.Acquired {
		t.Fatalf("taking the lock: %+v %v", res, err)
	}
	err = admin.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(same)))
	refused(t, err, "Invalid", "spec.type", "held by "+lock.OperationIdentity(ns, "config"), "ichor operation list")
	if _, err := locker.Release(ctx, cluster, lock.OperationIdentity(ns, "config")); err != nil {
		t.Fatal(err)
	}

	testenv.Must(t, admin.Create(ctx, newOperation(ns, "restore", ichorv1alpha1.OperationEtcdRestore, restore(same))))
	// A second one while the first has not finished.
	err = admin.Create(ctx, newOperation(ns, "restore-2", ichorv1alpha1.OperationEtcdRestore, restore(same)))
	refused(t, err, "Invalid", "spec.type", "has not finished: restore")
}

// Rule: the destructive operation starts need their own verbs (admin only).
func TestDestructiveOperationsNeedTheirVerbs(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	nodeMachines(t, ns)
	for _, tc := range []struct {
		name, typ, verb string
		mutate          func(*ichorv1alpha1.TalosOperation)
	}{
		{"shutdown", ichorv1alpha1.OperationShutdown, "`shutdown` on `talosoperations`", func(*ichorv1alpha1.TalosOperation) {}},
		{"ca", ichorv1alpha1.OperationCARotation, "`rotate-ca` on `talosoperations`", func(*ichorv1alpha1.TalosOperation) {}},
		{"keys", ichorv1alpha1.OperationKeyRotation, "`rotate-keys` on `talosoperations`", func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.KeyRotation = &ichorv1alpha1.KeyRotation{ServiceAccount: true}
		}},
		{"node-off", ichorv1alpha1.OperationNode, "`shutdown-node` on `talosoperations`", nodeAction(ichorv1alpha1.NodeActionShutdown)},
	} {
		err := operator.Create(ctx, newOperation(ns, tc.name, tc.typ, tc.mutate))
		refused(t, err, "Forbidden", tc.verb, `user "otto"`)
		switch tc.typ {
		case ichorv1alpha1.OperationShutdown:
			continue // an admin's shutdown comes last: it stops everything else
		case ichorv1alpha1.OperationNode, ichorv1alpha1.OperationCARotation, ichorv1alpha1.OperationKeyRotation:
			testenv.Must(t, admin.Create(ctx, newOperation(ns, tc.name, tc.typ, tc.mutate)))
			continue
		}
		notRunnable(t, admin.Create(ctx, newOperation(ns, tc.name, tc.typ, tc.mutate)), tc.typ)
	}
	// The neighbour: a config rollout is an operator's.
	testenv.Must(t, operator.Create(ctx, newOperation(ns, "config", ichorv1alpha1.OperationConfig)))

	// A cluster shutdown runs, an admin's; until it has completed, no other
	// operation of the cluster is admitted, a second shutdown included.
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "shutdown", ichorv1alpha1.OperationShutdown)))
	for _, o := range []*ichorv1alpha1.TalosOperation{
		newOperation(ns, "config-2", ichorv1alpha1.OperationConfig),
		newOperation(ns, "shutdown-2", ichorv1alpha1.OperationShutdown),
		newOperation(ns, "reboot", ichorv1alpha1.OperationNode, nodeAction(ichorv1alpha1.NodeActionReboot)),
	} {
		refused(t, admin.Create(ctx, o), "Invalid", "spec.type", "being shut down by operation shutdown", "delete operation shutdown")
	}
	// Completed, it refuses nothing.
	done := &ichorv1alpha1.TalosOperation{}
	testenv.Must(t, root.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shutdown"}, done))
	done.Status.Phase = ichorv1alpha1.OperationSucceeded
	testenv.Must(t, root.Status().Update(ctx, done))
	testenv.Must(t, operator.Create(ctx, newOperation(ns, "config-3", ichorv1alpha1.OperationConfig)))
}

// Rule: upgrade targets of operations follow the same version rules.
func TestOperationTargetsAreChecked(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	err := operator.Create(ctx, newOperation(ns, "down", ichorv1alpha1.OperationTalos, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Talos = &ichorv1alpha1.TalosUpgrade{Version: "v1.14.0"}
	}))
	refused(t, err, "Invalid", "spec.talos.version", "downgrade")
	err = operator.Create(ctx, newOperation(ns, "k-skip", ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.39.0"}
	}))
	refused(t, err, "Invalid", "spec.kubernetes.version", "skips a minor")
	// A kubernetes operation carries out a spec.kubernetesVersion change; it
	// never names another target.
	err = operator.Create(ctx, newOperation(ns, "k-patch", ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.3"}
	}))
	refused(t, err, "Invalid", "spec.kubernetes.version", "spec.kubernetesVersion", "ichor upgrade kubernetes 1.37.3")
	// The neighbour: the operation for the cluster's spec is admitted.
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "k", func(c *ichorv1alpha1.TalosCluster) { c.Spec.KubernetesVersion = "1.37.3" })))
	k := newOperation(ns, "k-spec", ichorv1alpha1.OperationKubernetes, func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.ClusterName = "k"
		o.Spec.Kubernetes = &ichorv1alpha1.KubernetesUpgrade{Version: "1.37.3"}
	})
	testenv.Must(t, operator.Create(ctx, k))
	// Going past removed APIs in use is the override verb's: an operator is
	// refused the annotation, an admin sets it.
	override := func(o *ichorv1alpha1.TalosOperation) {
		o.Annotations = map[string]string{ichorv1alpha1.OverrideRemovedAPIsAnnotation: "1", ichorv1alpha1.ResumeAnnotation: "1"}
	}
	refused(t, update(t, operator, k, override), "Forbidden", "override", ichorv1alpha1.OverrideRemovedAPIsAnnotation)
	testenv.Must(t, update(t, admin, k, override))
}

// Rule: the IchorInstallation's write rights are split over /version and /settings.
func TestInstallationVersionAndSettingsAreSplit(t *testing.T) {
	ctx := context.Background()
	inst := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.1.0"}},
	}
	// A singleton: any other name is refused by the CRD.
	other := inst.DeepCopy()
	other.Name = "second"
	refused(t, admin.Create(ctx, other), "Invalid", "IchorInstallation is a singleton")
	testenv.Must(t, admin.Create(ctx, inst))

	settingsEditor := grantUser(t, "sally",
		rbacv1.PolicyRule{APIGroups: []string{ichorv1alpha1.Group}, Resources: []string{"ichorinstallations"}, Verbs: []string{"get", "update"}},
		rbacv1.PolicyRule{APIGroups: []string{ichorv1alpha1.Group}, Resources: []string{"ichorinstallations/settings"}, Verbs: []string{"update"}},
	)
	testenv.Must(t, update(t, settingsEditor, inst, func(i *ichorv1alpha1.IchorInstallation) {
		i.Spec.Settings.IDTokenLifetime = &metav1.Duration{Duration: 10 * time.Minute}
	}))
	err := update(t, settingsEditor, inst, func(i *ichorv1alpha1.IchorInstallation) { i.Spec.Version.Version = "v0.2.0" })
	refused(t, err, "Forbidden", "spec.version", "`update` on `ichorinstallations/version`", `user "sally"`)
	testenv.Must(t, update(t, admin, inst, func(i *ichorv1alpha1.IchorInstallation) { i.Spec.Version.Version = "v0.2.0" }))
	err = update(t, operator, inst, func(i *ichorv1alpha1.IchorInstallation) {
		i.Spec.Settings.DefaultDriftPolicy = ichorv1alpha1.DriftPolicyAutoCorrect
	})
	refused(t, err, "Forbidden") // an operator may not write the installation at all (RBAC)

	// Rule: the settings' lifetimes are bounded as ichor-ui's UpdateSettings bounds them, even written with kubectl.
	err = update(t, admin, inst, func(i *ichorv1alpha1.IchorInstallation) {
		i.Spec.Settings.IDTokenLifetime = &metav1.Duration{Duration: 2 * time.Hour}
	})
	refused(t, err, "Invalid", "spec.settings.idTokenLifetime", "lasts 1m0s to 1h0m0s, not 2h0m0s", "remove the field for the default")
}

// Rule: a reclaim needs the verb reclaim, on create and on the typed UUID.
func TestReclaimNeedsTheReclaimVerb(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	newReclaim := func(name string) *ichorv1alpha1.MachineReclaim {
		return &ichorv1alpha1.MachineReclaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.MachineReclaimSpec{
				Address:        "192.168.10.50",
				CredentialsRef: ichorv1alpha1.SecretReference{Name: name + "-talosconfig"},
			},
		}
	}
	for _, name := range []string{"r1", "r2"} {
		testenv.Must(t, root.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-talosconfig"},
			Type:       ichorv1alpha1.ForeignTalosconfigSecretType,
			StringData: map[string]string{"talosconfig": "context: foreign\n"},
		}))
	}
	// A user who may write MachineReclaims but lacks the verb reclaim.
	writer := grantUser(t, "wes", rbacv1.PolicyRule{APIGroups: []string{ichorv1alpha1.Group}, Resources: []string{"machinereclaims"}, Verbs: []string{"create", "get", "update"}})
	refused(t, writer.Create(ctx, newReclaim("r1")), "Forbidden", "`reclaim` on `machinereclaims`", `user "wes"`)

	// ichor-machine-reclaimer, unbound by default, holds it.
	reclaimer, err := userClient("rita", nil)
	testenv.Must(t, err)
	testenv.Must(t, root.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-rita"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ichor-machine-reclaimer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "rita"}},
	}))
	awaitAllowed(t, "rita", ichorv1alpha1.Group, "machinereclaims", "reclaim")
	r := newReclaim("r1")
	testenv.Must(t, reclaimer.Create(ctx, r))
	err = update(t, writer, r, func(r *ichorv1alpha1.MachineReclaim) { r.Spec.ConfirmUUID = "4c4c4544-0042-3510-8052-b4c04f384833" })
	refused(t, err, "Forbidden", "spec.confirmUUID", "`reclaim` on `machinereclaims`")
	testenv.Must(t, update(t, reclaimer, r, func(r *ichorv1alpha1.MachineReclaim) { r.Spec.ConfirmUUID = "4c4c4544-0042-3510-8052-b4c04f384833" }))

	// The credential must be a foreign-talosconfig Secret, so a reclaim cannot
	// point the controller at another Secret (the secrets bundle, say).
	testenv.Must(t, root.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bundle"}, Type: corev1.SecretTypeOpaque}))
	wrong := newReclaim("r3")
	wrong.Spec.CredentialsRef.Name = "bundle"
	refused(t, reclaimer.Create(ctx, wrong), "Invalid", "spec.credentialsRef", `type "Opaque"`, ichorv1alpha1.ForeignTalosconfigSecretType)
	missing := newReclaim("r4")
	refused(t, reclaimer.Create(ctx, missing), "Invalid", "spec.credentialsRef", "does not exist")

	long := newReclaim("r2")
	long.Spec.TTL = &metav1.Duration{Duration: 2 * time.Hour}
	refused(t, admin.Create(ctx, long), "Invalid", "spec.ttl", "at most 1h0m0s")
}

// Rule: credential requests need download on the purpose's subresource, as the requester.
func TestCredentialRequestsNeedDownload(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	req := func(name, purpose string) *ichorv1alpha1.TalosCredentialRequest {
		return &ichorv1alpha1.TalosCredentialRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.TalosCredentialRequestSpec{
				ClusterName: "c", Purpose: purpose, OperationName: "rotate",
				PublicKey: "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n",
			},
		}
	}
	refused(t, operator.Create(ctx, req("bundle", ichorv1alpha1.PurposeSupportBundle)), "Forbidden",
		"`download` on `talosclusters/support-bundle`", `user "otto"`)
	testenv.Must(t, operator.Create(ctx, req("reader", ichorv1alpha1.PurposeTalosconfigReader)))
	testenv.Must(t, admin.Create(ctx, req("bundle", ichorv1alpha1.PurposeSupportBundle)))
	// The CA rotation's new admin credentials are granted to nobody by default.
	refused(t, admin.Create(ctx, req("creds", ichorv1alpha1.PurposeRotationCredentials)), "Forbidden",
		"`download` on `talosclusters/credentials`", `user "ada"`)
	testenv.Must(t, root.Create(ctx, req("creds", ichorv1alpha1.PurposeRotationCredentials)))
}

// Rule (architecture, "Topology"): on a cluster with a single node, a
// reboot or shutdown of that node and a Talos upgrade mean downtime, and the
// write needs the person's consent (the accept-downtime annotation, "true"
// on the operation, the new version on the cluster); a missing backup is a
// warning, never a refusal. Neighbours: the same reboot with a second node
// needs no consent.
func TestSmallClusterAdmission(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))
	testenv.Must(t, root.Create(ctx, newMachine(ns, "cp", "c", ichorv1alpha1.RoleControlPlane, ichorv1alpha1.ApprovalApproved)))
	on := func(action, accept string) func(*ichorv1alpha1.TalosOperation) {
		return func(o *ichorv1alpha1.TalosOperation) {
			o.Spec.Node = &ichorv1alpha1.NodeAction{MachineName: "cp", Action: action}
			if accept != "" {
				o.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: accept}
			}
		}
	}

	err := admin.Create(ctx, newOperation(ns, "reboot", ichorv1alpha1.OperationNode, on(ichorv1alpha1.NodeActionReboot, "")))
	refused(t, err, "Invalid", ichorv1alpha1.AcceptDowntimeAnnotation, "cluster c has a single node", "rebooting cp", "`ichor node reboot cp`")
	err = admin.Create(ctx, newOperation(ns, "reboot", ichorv1alpha1.OperationNode, on(ichorv1alpha1.NodeActionReboot, "false")))
	refused(t, err, "Invalid", ichorv1alpha1.AcceptDowntimeAnnotation)

	// With the consent it is admitted, with the warning that there is no backup.
	adminWarnings.take()
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reboot", ichorv1alpha1.OperationNode, on(ichorv1alpha1.NodeActionReboot, "true"))))
	if w := strings.Join(adminWarnings.take(), "\n"); !strings.Contains(w, "cluster c has no etcd backup configured") {
		t.Errorf("want the missing-backup warning, got %q", w)
	}
	testenv.Must(t, root.Delete(ctx, newOperation(ns, "reboot", ichorv1alpha1.OperationNode)))

	// A backup with a recent verified snapshot: no warning.
	b := &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{ClusterName: "c", Schedule: "@daily",
			S3:               ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
			EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"}},
	}
	testenv.Must(t, root.Create(ctx, b))
	b.Status.LastSuccessfulTime = &metav1.Time{Time: time.Now().Add(-time.Hour)}
	testenv.Must(t, root.Status().Update(ctx, b))
	adminWarnings.take()
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reboot-2", ichorv1alpha1.OperationNode, on(ichorv1alpha1.NodeActionReboot, "true"))))
	if w := adminWarnings.take(); len(w) != 0 {
		t.Errorf("a recent backup: want no warning, got %q", w)
	}
	testenv.Must(t, root.Delete(ctx, newOperation(ns, "reboot-2", ichorv1alpha1.OperationNode)))

	// A Talos upgrade of the single node: the consent names the version.
	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) { c.Spec.TalosVersion = "v1.14.2" })
	refused(t, err, "Invalid", "spec.talosVersion", "single node", "upgrading Talos to v1.14.2", `"v1.14.2"`)
	err = update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.14.2"
		c.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: "v1.14.1"}
	})
	refused(t, err, "Invalid", "spec.talosVersion", "single node")
	testenv.Must(t, update(t, admin, newCluster(ns, "c"), func(c *ichorv1alpha1.TalosCluster) {
		c.Spec.TalosVersion = "v1.14.2"
		c.Annotations = map[string]string{ichorv1alpha1.AcceptDowntimeAnnotation: "v1.14.2"}
	}))

	// The neighbour: with a second node, nothing to consent to.
	testenv.Must(t, root.Create(ctx, newMachine(ns, "w", "c", ichorv1alpha1.RoleWorker, ichorv1alpha1.ApprovalApproved)))
	testenv.Must(t, admin.Create(ctx, newOperation(ns, "reboot-3", ichorv1alpha1.OperationNode, on(ichorv1alpha1.NodeActionReboot, ""))))
}
