package teardown

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The suite runs a real kube-apiserver and etcd with the teardown and the
// machine lifecycle reconcilers (whose finalizer leaves a torn-down
// cluster's nodes as they are, before any Talos call). No node is dialled:
// the machines are never approved, so the lifecycle provisions nothing.
var k8s client.Client

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client
		mgr, err := s.NewManager()
		if err != nil {
			return nil, err
		}
		if err := (&Reconciler{}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := (&lifecycle.Reconciler{}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		return nil, testenv.StartManager(ctx, mgr)
	}))
}

const testHold = "test.ichor.maesh.dev/hold"

func mustCreate(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		testenv.Must(t, k8s.Create(context.Background(), o))
	}
}

func exists(t *testing.T, o client.Object) bool {
	t.Helper()
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(o), o)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("get %s: %v", o.GetName(), err)
	}
	return err == nil
}

func gone(o client.Object) func() error {
	return func() error {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(o), o)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("%s %s still exists (deleting: %t, finalizers %v)", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(),
			!o.GetDeletionTimestamp().IsZero(), o.GetFinalizers())
	}
}

// world is one cluster's objects in namespace ns.
type world struct {
	cluster *ichorv1alpha1.TalosCluster
	bundle  *corev1.Secret
	op      *ichorv1alpha1.TalosOperation
	backup  *ichorv1alpha1.TalosEtcdBackup
	patch   *ichorv1alpha1.TalosConfigPatch
	lease   *coordinationv1.Lease
}

func newWorld(ns, name string) world {
	w := world{
		cluster: &ichorv1alpha1.TalosCluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.TalosClusterSpec{
				TalosVersion: "v1.14.1", VersionContract: "v1.14", KubernetesVersion: "1.37.2",
				Endpoint:         ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
				SecretsBundleRef: ichorv1alpha1.SecretReference{Name: name + "-secrets"},
				ControlPlane:     ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(true)},
				CNI:              ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "vxlan", KubeProxy: ichorv1alpha1.KubeProxyEnabled},
			},
		},
		bundle: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-secrets"}, Data: map[string][]byte{"bundle": []byte("not a real bundle")}},
		op: &ichorv1alpha1.TalosOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-config"},
			Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: name, Type: ichorv1alpha1.OperationConfig}},
		backup: &ichorv1alpha1.TalosEtcdBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-nightly"},
			Spec: ichorv1alpha1.TalosEtcdBackupSpec{ClusterName: name, Schedule: "@daily",
				S3:               ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
				EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"}}},
		patch: &ichorv1alpha1.TalosConfigPatch{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-patch"},
			Spec: ichorv1alpha1.TalosConfigPatchSpec{ClusterName: name, Layer: ichorv1alpha1.LayerCluster}},
		lease: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns,
			Name: lock.LeaseName(types.NamespacedName{Namespace: ns, Name: name})}},
	}
	return w
}

func (w world) objects() []client.Object {
	return []client.Object{w.bundle, w.cluster, w.op, w.backup, w.patch, w.lease}
}

// machine is a TalosMachine of cluster that the lifecycle never provisions
// (pending), with the lifecycle's finalizer as an approved one has it, and
// the extra finalizers given.
func machine(t *testing.T, ns, name, cluster string, configSent bool, finalizers ...string) *ichorv1alpha1.TalosMachine {
	t.Helper()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: append([]string{ichorv1alpha1.MachineFinalizer}, finalizers...)},
		Spec: ichorv1alpha1.TalosMachineSpec{ClusterName: cluster, Identity: ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending}},
	}
	mustCreate(t, m)
	if configSent {
		// The lifecycle writes the status too: read again on a conflict.
		testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
			m.Status.ConfigSentAt = &metav1.Time{Time: time.Now().Truncate(time.Second)}
			return k8s.Status().Update(context.Background(), m)
		}))
	}
	return m
}

func deleteCluster(t *testing.T, c *ichorv1alpha1.TalosCluster) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "the teardown finalizer on "+c.Name, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(c, ichorv1alpha1.ClusterFinalizer) {
			return fmt.Errorf("finalizers %v", c.Finalizers)
		}
		return nil
	})
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = "true"
		return k8s.Update(ctx, c)
	}))
	testenv.Must(t, k8s.Delete(ctx, c))
}

func eventOn(ns, name, reason string) func() error {
	return func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				return nil
			}
			seen = append(seen, e.Regarding.Name+"/"+e.Reason)
		}
		return fmt.Errorf("no %s Event on %s; Events: %v", reason, name, seen)
	}
}

// TestClusterTeardown deletes a TalosCluster and follows its finalizer: the
// operations and backups go first, then the machines (left as they are: the
// lifecycle drops their finalizer without a Talos call), and only then the
// configuration, the lock Lease and, last, the bundle Secret, which is kept
// when a machine was left running the cluster. Another cluster of the
// namespace keeps everything.
func TestClusterTeardown(t *testing.T) {
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "teardown-"}}
	mustCreate(t, nsObj)
	ns := nsObj.Name
	const wait = 60 * time.Second
	prod, other := newWorld(ns, "prod"), newWorld(ns, "other")
	mustCreate(t, append(prod.objects(), other.objects()...)...)
	running := machine(t, ns, "prod-running", "prod", true)
	held := machine(t, ns, "prod-held", "prod", false, testHold)
	otherM := machine(t, ns, "other-m", "other", true)

	deleteCluster(t, prod.cluster)

	// First the operations and the backups; the machines are deleted.
	testenv.Eventually(t, wait, "the operation gone", gone(prod.op))
	testenv.Eventually(t, wait, "the backup gone", gone(prod.backup))
	// The machine left running was recorded before the machines went.
	testenv.Eventually(t, wait, "the machine left running recorded", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(prod.cluster), prod.cluster); err != nil {
			return err
		}
		if got := prod.cluster.Annotations[LeftRunningAnnotation]; got != "prod-running" {
			return fmt.Errorf("%s = %q", LeftRunningAnnotation, got)
		}
		return nil
	})
	// Its finalizer left the node as it is: gone, with a Warning Event, no Talos call.
	testenv.Eventually(t, wait, "the running machine gone", gone(running))
	testenv.Eventually(t, wait, "the left-as-is Event", eventOn(ns, "prod-running", ichorv1alpha1.RemovedWithoutWipeReason))

	// While a machine remains, the configuration, the Lease and the bundle stay.
	testenv.Eventually(t, wait, "the held machine deleting", func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil {
			return err
		}
		if held.DeletionTimestamp.IsZero() || held.Annotations[ichorv1alpha1.AllowDeleteAnnotation] != "true" {
			return fmt.Errorf("not deleted with allow-delete: %v %v", held.DeletionTimestamp, held.Annotations)
		}
		if controllerutil.ContainsFinalizer(held, ichorv1alpha1.MachineFinalizer) {
			return fmt.Errorf("the lifecycle finalizer is still on it: %v", held.Finalizers)
		}
		return nil
	})
	for _, o := range []client.Object{prod.patch, prod.lease, prod.bundle, prod.cluster} {
		if !exists(t, o) {
			t.Fatalf("%s went while a machine of the cluster remains", o.GetName())
		}
	}
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil {
			return err
		}
		held.Finalizers = slices.DeleteFunc(held.Finalizers, func(f string) bool { return f == testHold })
		return k8s.Update(ctx, held)
	}))

	// Then the rest, and the cluster itself.
	for _, o := range []client.Object{held, prod.patch, prod.lease, prod.cluster} {
		testenv.Eventually(t, wait, o.GetName()+" gone", gone(o))
	}
	// A machine was left running the cluster: its CAs stay, and an Event says why.
	if !exists(t, prod.bundle) {
		t.Fatal("the bundle Secret was deleted although machine prod-running still runs the cluster")
	}
	testenv.Eventually(t, wait, "the bundle-kept Event", eventOn(ns, "prod", BundleKeptReason))

	// The other cluster of the namespace keeps everything.
	for _, o := range append(other.objects(), otherM) {
		if !exists(t, o) {
			t.Errorf("%s of the other cluster was deleted", o.GetName())
		}
	}
	if o := other.cluster; !o.DeletionTimestamp.IsZero() {
		t.Errorf("the other cluster is being deleted")
	}

	// A cluster whose machines never ran its configuration: the bundle goes last.
	empty := newWorld(ns, "empty")
	mustCreate(t, empty.bundle, empty.cluster, empty.patch)
	never := machine(t, ns, "empty-m", "empty", false)
	deleteCluster(t, empty.cluster)
	for _, o := range []client.Object{never, empty.patch, empty.cluster, empty.bundle} {
		testenv.Eventually(t, wait, o.GetName()+" gone", gone(o))
	}
	testenv.Eventually(t, wait, "the torn-down Event", eventOn(ns, "empty", TornDownReason))
	if strings.Contains(fmt.Sprint(empty.cluster.Annotations), LeftRunningAnnotation) {
		t.Errorf("no machine of the empty cluster ran its configuration: %v", empty.cluster.Annotations)
	}
}
