package netpolicy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
	"github.com/maeshinshin/ichor/controller/internal/controller/netpolicy"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The API server holds Ichor's namespace, two TalosClusters ("home", whose
// machine cp-1 is the Node the controller runs on, and "away") and, from
// the test on, Cilium's own CiliumNetworkPolicy CRD (read out of Cilium's Go
// module, so its schema validates what the controller applies). No Cilium
// agent runs: what is checked is what the API server holds, against the
// flows the objects name (netpol.Allows).
var (
	k8s   client.Client
	admin client.Client
	cfgOK bool
)

const (
	ns          = install.Namespace
	ownNode     = "node-home"
	waitTimeout = 60 * time.Second
	// ciliumVersion is the Cilium whose CRD is installed: the oldest chart
	// contracts/pkg/cilium embeds.
	ciliumVersion = "v1.19.3"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		sc := runtime.NewScheme()
		if err := apiextensionsv1.AddToScheme(sc); err != nil {
			return nil, err
		}

		var err error
		if admin, err = client.New(s.Env.Config, client.Options{Scheme: sc}); err != nil {
			return nil, err
		}

		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}

		mgr, err := s.NewManager()
		if err != nil {
			return nil, err
		}

		if err := (&netpolicy.Reconciler{Namespace: ns, OwnNode: ownNode, Resync: time.Second,
			ReleaseSources: []string{"https://factory.example.org", ""}}).SetupWithManager(mgr); err != nil {
			return nil, err
		}

		cfgOK = true

		return nil, testenv.StartManager(ctx, mgr)
	}))
}

// ciliumCRD is Cilium's own CiliumNetworkPolicy CRD of ciliumVersion.
func ciliumCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()

	return testenv.CiliumNetworkPolicyCRD(t, ciliumVersion)
}

func machine(cluster, name, address string, role string) *ichorv1alpha1.TalosMachine {
	now := metav1.Now()

	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{ichorv1alpha1.ClusterLabel: cluster}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: cluster,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: "00000000-0000-0000-0000-" + fmt.Sprintf("%012d", len(name)+len(address)), Serial: "SER-" + name},
			Address:     address,
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        role,
			Hostname:    name,
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}
}

func condition(t *testing.T, name string) *metav1.Condition {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, c))

	return apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.NetworkPoliciesAppliedCondition)
}

func waitCondition(t *testing.T, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()

	const name = "home"

	var got *metav1.Condition

	testenv.Eventually(t, waitTimeout, fmt.Sprintf("%s NetworkPoliciesApplied=%s %s", name, status, reason), func() error {
		got = condition(t, name)
		if got == nil || got.Status != status || got.Reason != reason {
			return fmt.Errorf("it is %+v", got)
		}

		return nil
	})

	return got
}

func policies(t *testing.T) []*unstructured.Unstructured {
	t.Helper()

	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(netpol.GVK.GroupVersion().WithKind(netpol.GVK.Kind + "List"))
	testenv.Must(t, k8s.List(t.Context(), list, client.InNamespace(ns)))

	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		o := &list.Items[i]
		// What the API server adds is not policy.
		clean := &unstructured.Unstructured{Object: map[string]any{"apiVersion": o.GetAPIVersion(), "kind": o.GetKind(), "spec": o.Object["spec"]}}
		clean.SetNamespace(o.GetNamespace())
		clean.SetName(o.GetName())
		out = append(out, clean)
	}

	return out
}

func policy(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()

	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(netpol.GVK)

	err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, o)
	if apierrors.IsNotFound(err) {
		return nil
	}

	testenv.Must(t, err)

	return o
}

// TestNetworkPolicies walks the gate (no CRD, then no Cilium detected, then
// both), checks what is applied against every flow the objects name, follows
// a new S3 store, puts back a hand edit, and refuses a target it cannot
// write without changing what is applied.
func TestNetworkPolicies(t *testing.T) {
	if !cfgOK {
		t.Fatal("no suite")
	}

	ctx := t.Context()

	for _, name := range []string{"home", "away"} {
		c := testenv.TalosCluster(ns, name)
		if name == "away" {
			c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeLoadBalancer, Host: "api.away.example.com", Port: 443}
			c.Spec.Discovery.Subnets = []string{"198.51.100.0/28"}
		}

		testenv.Must(t, k8s.Create(ctx, c))
	}

	home := machine("home", "cp-1", "192.0.2.10", ichorv1alpha1.RoleControlPlane)
	away := machine("away", "cp-a", "203.0.113.7", ichorv1alpha1.RoleControlPlane)
	worker := machine("away", "w-a", "203.0.113.8", ichorv1alpha1.RoleWorker)

	for _, m := range []*ichorv1alpha1.TalosMachine{home, away, worker} {
		testenv.Must(t, k8s.Create(ctx, m))
	}

	testenv.UpdateStatus(t, k8s, home, func(m *ichorv1alpha1.TalosMachine) { m.Status.NodeName = ownNode })
	testenv.UpdateStatus(t, k8s, away, func(m *ichorv1alpha1.TalosMachine) { m.Status.NodeName = "node-away" })

	t.Run("NoCRD", func(t *testing.T) {
		c := waitCondition(t, metav1.ConditionFalse, ichorv1alpha1.CiliumCRDMissingReason)
		if !strings.Contains(c.Message, "is not isolated by Ichor") {
			t.Fatalf("message %q", c.Message)
		}

		if c := condition(t, "away"); c != nil {
			t.Fatalf("cluster away, which Ichor does not run in, got %+v", c)
		}
	})

	crd := ciliumCRD(t)
	testenv.Must(t, admin.Create(ctx, crd.DeepCopy()))
	testenv.Eventually(t, waitTimeout, "CRD "+netpol.CRDName+" Established", func() error {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(crd), cur); err != nil {
			return err
		}

		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}

		return errors.New("not Established")
	})

	t.Run("NotCilium", func(t *testing.T) {
		c := waitCondition(t, metav1.ConditionFalse, ichorv1alpha1.CNINotCiliumReason)
		if !strings.Contains(c.Message, "not detected yet") {
			t.Fatalf("message %q", c.Message)
		}

		if policy(t, netpol.DefaultDenyName) != nil {
			t.Fatal("the default deny was applied without Cilium")
		}

		testenv.UpdateStatus(t, k8s, testenv.TalosCluster(ns, "home"), func(c *ichorv1alpha1.TalosCluster) { c.Status.CNI.Detected = "flannel" })
		testenv.Eventually(t, waitTimeout, "the message names flannel", func() error {
			if c := condition(t, "home"); c == nil || !strings.Contains(c.Message, "flannel") {
				return fmt.Errorf("it is %+v", c)
			}

			return nil
		})
	})

	testenv.UpdateStatus(t, k8s, testenv.TalosCluster(ns, "home"), func(c *ichorv1alpha1.TalosCluster) { c.Status.CNI.Detected = cni.DetectedCilium })

	t.Run("Applied", func(t *testing.T) {
		c := waitCondition(t, metav1.ConditionTrue, ichorv1alpha1.NetworkPoliciesInPlaceReason)
		for _, want := range []string{netpol.ControllerEgressPolicy, netpol.UIEgressPolicy, netpol.DefaultDenyName} {
			if !strings.Contains(c.Message, want) {
				t.Fatalf("message %q does not name %s", c.Message, want)
			}
		}

		checkFlows(t)

		for _, name := range []string{netpol.ControllerEgressPolicy, netpol.DefaultDenyName} {
			o := policy(t, name)
			if !slices.ContainsFunc(o.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool {
				return m.Manager == netpolicy.FieldOwner && m.Operation == metav1.ManagedFieldsOperationApply
			}) {
				t.Fatalf("%s is not applied by %s: %v", name, netpolicy.FieldOwner, o.GetManagedFields())
			}
		}
	})

	t.Run("FollowsAStore", func(t *testing.T) {
		b := &ichorv1alpha1.TalosEtcdBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
			Spec: ichorv1alpha1.TalosEtcdBackupSpec{
				ClusterName:      "away",
				Schedule:         "0 3 * * *",
				S3:               ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.net:9000", Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
				EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"},
			},
		}
		testenv.Must(t, k8s.Create(ctx, b))

		testenv.Eventually(t, waitTimeout, "the egress policy names the store", func() error {
			if !strings.Contains(fmt.Sprint(policy(t, netpol.ControllerEgressPolicy).Object["spec"]), "s3.example.net") {
				return errors.New("not yet")
			}

			return nil
		})

		checkFlows(t)
	})

	t.Run("PutsBackAnEdit", func(t *testing.T) {
		o := &unstructured.Unstructured{}
		o.SetGroupVersionKind(netpol.GVK)
		o.SetNamespace(ns)
		o.SetName(netpol.ControllerEgressPolicy)
		testenv.Must(t, k8s.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"egress":[{"toEntities":["world"]}]}}`)),
			client.FieldOwner("kubectl-edit")))

		testenv.Eventually(t, waitTimeout, "the edit undone", func() error {
			if strings.Contains(fmt.Sprint(policy(t, netpol.ControllerEgressPolicy).Object["spec"]), "world") {
				return errors.New("world egress still there")
			}

			return nil
		})

		checkFlows(t)
	})

	t.Run("RefusesABadTarget", func(t *testing.T) {
		before := policy(t, netpol.ControllerEgressPolicy).Object["spec"]

		one := int32(1)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: netpol.UIDeployment},
			Spec: appsv1.DeploymentSpec{
				Replicas: &one,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{netpol.AppLabel: "ichor-ui"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{netpol.AppLabel: "ichor-ui"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "ichor-ui", Image: "ichor-ui:test", Args: []string{"--oidc-issuer-url=ftp://login.example.org"},
					}}},
				},
			},
		}
		testenv.Must(t, k8s.Create(ctx, d))

		c := waitCondition(t, metav1.ConditionFalse, ichorv1alpha1.NetworkPoliciesFailedReason)
		if !strings.Contains(c.Message, "Deployment ichor-system/ichor-ui container ichor-ui --oidc-issuer-url") ||
			!strings.Contains(c.Message, "not an http(s) URL") {
			t.Fatalf("message %q does not say which object and why", c.Message)
		}

		if after := policy(t, netpol.ControllerEgressPolicy).Object["spec"]; fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("a refused target changed what is applied:\n%v\nwas\n%v", after, before)
		}

		d.Spec.Template.Spec.Containers[0].Args = []string{"--oidc-issuer-url", "https://login.example.org/realms/ichor"}
		testenv.Must(t, k8s.Update(ctx, d))

		// The Deployment is not watched: the resync applies it.
		waitCondition(t, metav1.ConditionTrue, ichorv1alpha1.NetworkPoliciesInPlaceReason)
		checkFlows(t)

		f := netpol.Flow{From: netpol.App(ns, netpol.UIPolicy), To: netpol.External("login.example.org"), Port: 443, Protocol: netpol.TCP}
		if p, ok, err := netpol.Allows(policies(t), f); err != nil || !ok || p != netpol.UIEgressPolicy {
			t.Fatalf("%s: allowed %v by %q (%v), want by %s", f, ok, p, err, netpol.UIEgressPolicy)
		}
	})
}

// checkFlows checks what the API server holds against every flow the
// objects name (read here on their own, not through the controller) and the
// static set's flows, and that nothing else reaches the world.
func checkFlows(t *testing.T) {
	t.Helper()

	got := policies(t)

	want := []netpol.Flow{
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("192.0.2.10"), Port: netpol.TalosAPIPort},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("192.0.2.10"), Port: netpol.KubeAPIServerPort},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("203.0.113.7"), Port: netpol.TalosAPIPort},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("203.0.113.8"), Port: netpol.TalosAPIPort},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("198.51.100.9"), Port: netpol.TalosAPIPort},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("api.away.example.com"), Port: 443},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("10.0.0.10"), Port: netpol.KubeAPIServerPort},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("factory.example.org"), Port: 443},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("ghcr.io"), Port: 443},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.Entity(netpol.EntityRemoteNode), Port: netpol.TalosAPIPort},
	}

	if b := (&ichorv1alpha1.TalosEtcdBackup{}); k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "nightly"}, b) == nil {
		want = append(want, netpol.Flow{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("s3.example.net"), Port: 9000})
	}

	for _, f := range want {
		f.Protocol = netpol.TCP

		p, ok, err := netpol.Allows(got, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}

		if !ok || p != netpol.ControllerEgressPolicy {
			t.Errorf("%s: allowed %v by %q, want by %s", f, ok, p, netpol.ControllerEgressPolicy)
		}
	}

	for _, f := range netpol.Flows(ns, netpol.Options{}) {
		if _, ok, err := netpol.Allows(got, f); err != nil || !ok {
			t.Errorf("%s (%s): refused (%v) once the egress policies are in place", f, f.Why, err)
		}
	}

	for _, f := range []netpol.Flow{
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("192.0.2.99"), Port: netpol.TalosAPIPort, Protocol: netpol.TCP},
		{From: netpol.App(ns, netpol.ControllerPolicy), To: netpol.External("203.0.113.8"), Port: netpol.KubeAPIServerPort, Protocol: netpol.TCP},
		{From: netpol.App(ns, netpol.UIPolicy), To: netpol.External("192.0.2.10"), Port: netpol.TalosAPIPort, Protocol: netpol.TCP},
		{From: netpol.App(ns, netpol.InstallerPolicy), To: netpol.External("192.0.2.10"), Port: netpol.TalosAPIPort, Protocol: netpol.TCP},
	} {
		if p, ok, err := netpol.Allows(got, f); err != nil || ok {
			t.Errorf("%s: allowed by %q (%v), want refused", f, p, err)
		}
	}
}
