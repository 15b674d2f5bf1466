package selfdeploy_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/controller/internal/controller/selfdeploy"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The API server holds Ichor's namespace with the controller's and
// ichor-ui's Deployments as the install manifest defines them (no pods run:
// envtest has no kube-controller-manager, and the reconciler needs none),
// the Nodes the test adds and removes, and the IchorInstallation; the
// manager runs the reconciler as cmd/main.go registers it.
var k8s client.Client

const (
	ns      = install.Namespace
	timeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}

		mgr, err := s.NewManager()
		if err != nil {
			return nil, err
		}

		if err := (&selfdeploy.Reconciler{Namespace: ns, Resync: 2 * time.Second}).SetupWithManager(mgr); err != nil {
			return nil, err
		}

		return nil, testenv.StartManager(ctx, mgr)
	}))
}

func addNode(t *testing.T, name string, taints ...corev1.Taint) {
	t.Helper()

	testenv.Must(t, k8s.Create(t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{Taints: taints},
	}))
}

func removeNode(t *testing.T, name string) {
	t.Helper()

	testenv.Must(t, k8s.Delete(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// deployments creates the manifest's Deployments of the controller and ichor-ui.
func deployments(t *testing.T) {
	t.Helper()

	objs, err := install.Objects()
	testenv.Must(t, err)

	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}

		d := &appsv1.Deployment{}
		testenv.Must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
		testenv.Must(t, k8s.Create(t.Context(), d))
	}
}

// want waits until both Deployments run replicas, their PodDisruptionBudgets
// exist or not, and the IchorInstallation's status says so.
func want(t *testing.T, nodes int, replicas int32, reason string) {
	t.Helper()

	testenv.Eventually(t, timeout, fmt.Sprintf("%d replicas, PDB %v, %s", replicas, replicas > 1, reason), func() error {
		for _, name := range []string{install.ControllerName, install.UIName} {
			d := &appsv1.Deployment{}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
				return err
			}

			if *d.Spec.Replicas != replicas {
				return fmt.Errorf("Deployment %s has %d replicas", name, *d.Spec.Replicas)
			}

			err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &policyv1.PodDisruptionBudget{})
			if replicas > 1 && err != nil {
				return fmt.Errorf("PodDisruptionBudget %s: %w", name, err)
			}

			if replicas == 1 && !apierrors.IsNotFound(err) {
				return fmt.Errorf("PodDisruptionBudget %s exists (%w)", name, err)
			}
		}

		return status(t, nodes, replicas, reason)
	})
}

func status(t *testing.T, nodes int, replicas int32, reason string) error {
	t.Helper()

	ii := &ichorv1alpha1.IchorInstallation{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); err != nil {
		return err
	}

	c := apimeta.FindStatusCondition(ii.Status.Conditions, ichorv1alpha1.HighlyAvailableCondition)
	if c == nil || c.Reason != reason || ii.Status.Replicas != replicas || ii.Status.SchedulableNodes != int32(nodes) { //nolint:gosec // a test's count
		return fmt.Errorf("status: replicas %d, nodes %d, HighlyAvailable %+v", ii.Status.Replicas, ii.Status.SchedulableNodes, c)
	}

	return nil
}

// TestReplicasFollowNodes: a cluster of one control plane runs one replica
// of each and no PodDisruptionBudget; a worker joining makes two with
// PodDisruptionBudgets (created as the manifest defines them); a node Ichor's
// pods cannot run on (a taint they do not tolerate) and a cordoned node do
// not change the count the wrong way; the worker leaving drops back to one.
// Helm-managed Ichor and a controller that runs elsewhere are left alone.
func TestReplicasFollowNodes(t *testing.T) {
	ctx := t.Context()

	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: "v0.1.0"},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: ichorv1alpha1.ManagerIchor},
		},
	}
	testenv.Must(t, k8s.Create(ctx, ii))

	addNode(t, "cp-1", corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})

	// No Deployment yet: the controller runs elsewhere.
	testenv.Eventually(t, timeout, "NotDeployed", func() error {
		got := &ichorv1alpha1.IchorInstallation{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ii), got); err != nil {
			return err
		}

		if c := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.HighlyAvailableCondition); c == nil ||
			c.Reason != ichorv1alpha1.NotDeployedReason || c.Status != metav1.ConditionUnknown {
			return fmt.Errorf("HighlyAvailable %+v", c)
		}

		return nil
	})

	deployments(t)
	want(t, 1, 1, ichorv1alpha1.SingleNodeReason)

	addNode(t, "w-1")
	want(t, 2, 2, ichorv1alpha1.MultipleNodesReason)

	// The PodDisruptionBudget is the manifest's.
	pdb := &policyv1.PodDisruptionBudget{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.UIName}, pdb))

	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != install.UIName {
		t.Fatalf("PodDisruptionBudget ichor-ui: %+v", pdb.Spec)
	}

	// A node the pods cannot run on does not count, a cordoned worker (a
	// drain) still does, and a new worker does: three. The count in the
	// status is the positive marker that the reconciler saw all three changes.
	addNode(t, "w-gpu", corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: "w-1"}, n); err != nil {
			return err
		}

		n.Spec.Unschedulable = true
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})

		return k8s.Update(ctx, n)
	}))
	addNode(t, "w-3")
	want(t, 3, 2, ichorv1alpha1.MultipleNodesReason)

	// The workers leave.
	removeNode(t, "w-1")
	removeNode(t, "w-3")
	want(t, 1, 1, ichorv1alpha1.SingleNodeReason)

	// A replica count someone set by hand is put back at the next resync.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.ControllerName}, d); err != nil {
			return err
		}

		d.Spec.Replicas = new(int32(3))

		return k8s.Update(ctx, d)
	}))
	want(t, 1, 1, ichorv1alpha1.SingleNodeReason)

	// Helm owns a Helm install's replicas: a node joining changes nothing.
	testenv.Must(t, k8s.Delete(ctx, ii))
	testenv.Eventually(t, timeout, "the IchorInstallation gone", func() error {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(ii), &ichorv1alpha1.IchorInstallation{})
		if apierrors.IsNotFound(err) {
			return nil
		}

		return fmt.Errorf("still there: %w", err)
	})

	// The node joins first, so the reconcile the create triggers sees two.
	addNode(t, "w-2")

	helm := ii.DeepCopy()
	helm.ResourceVersion, helm.Spec.Deployment.Manager = "", ichorv1alpha1.ManagerHelm
	testenv.Must(t, k8s.Create(ctx, helm))

	testenv.Eventually(t, timeout, "ManagedByHelm", func() error {
		got := &ichorv1alpha1.IchorInstallation{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(ii), got); err != nil {
			return err
		}

		if c := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.HighlyAvailableCondition); c == nil || c.Reason != ichorv1alpha1.ManagedByHelmReason {
			return fmt.Errorf("HighlyAvailable %+v", c)
		}

		return nil
	})

	// The reconciler has looked at it with two schedulable nodes (the
	// condition is there), and left the replicas as they were.
	for _, name := range []string{install.ControllerName, install.UIName} {
		d := &appsv1.Deployment{}
		testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d))

		if *d.Spec.Replicas != 1 {
			t.Fatalf("Deployment %s of a Helm install: %d replicas", name, *d.Spec.Replicas)
		}
	}
}
