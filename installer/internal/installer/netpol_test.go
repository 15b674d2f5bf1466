package installer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installer"
	"github.com/maeshinshin/ichor/contracts/pkg/netpol"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// ciliumVersion is the Cilium whose CiliumNetworkPolicy CRD the test
// installs: the oldest chart contracts/pkg/cilium embeds.
const ciliumVersion = "v1.19.3"

// ciliumCRD is Cilium's own CiliumNetworkPolicy CRD of ciliumVersion.
func ciliumCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()

	return testenv.CiliumNetworkPolicyCRD(t, ciliumVersion)
}

// crds is the cluster admin's client for CustomResourceDefinitions.
func crds(t *testing.T) client.Client {
	t.Helper()

	s := installer.Scheme()
	testenv.Must(t, apiextensionsv1.AddToScheme(s))

	c, err := client.New(admin, client.Options{Scheme: s})
	testenv.Must(t, err)

	return c
}

// removeCRD deletes the CRD (and so every policy) and waits until it is gone.
func removeCRD(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()

	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: netpol.CRDName}}
	if err := c.Delete(ctx, crd); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	testenv.Eventually(t, waitTimeout, "CRD "+netpol.CRDName+" gone", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd)
		if apierrors.IsNotFound(err) {
			return nil
		}

		if err != nil {
			return fmt.Errorf("reading it: %w", err)
		}

		return errors.New("still there")
	})
}

// policy reads a CiliumNetworkPolicy of Ichor's namespace; nil when there is none.
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

// policiesAreTheSet fails unless every policy of the set exists with the
// set's spec and labels, applied by the installer.
func policiesAreTheSet(t *testing.T, when string) {
	t.Helper()

	for _, want := range netpol.Policies(ns, netpol.Options{}) {
		got := policy(t, want.GetName())
		if got == nil {
			t.Fatalf("%s: no CiliumNetworkPolicy %s", when, want.GetName())
		}

		if !reflect.DeepEqual(got.Object["spec"], want.Object["spec"]) || !reflect.DeepEqual(got.GetLabels(), want.GetLabels()) {
			t.Fatalf("%s: CiliumNetworkPolicy %s is\n%v\nwant\n%v", when, want.GetName(), got.Object["spec"], want.Object["spec"])
		}

		if !slices.ContainsFunc(got.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool {
			return m.Manager == install.FieldManager && m.Operation == metav1.ManagedFieldsOperationApply
		}) {
			t.Fatalf("%s: CiliumNetworkPolicy %s is not applied by %s: %v", when, want.GetName(), install.FieldManager, got.GetManagedFields())
		}
	}
}

// edit changes a policy as someone else would (kubectl edit).
func edit(t *testing.T, name, patch string) {
	t.Helper()

	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(netpol.GVK)
	o.SetNamespace(ns)
	o.SetName(name)
	testenv.Must(t, k8s.Patch(t.Context(), o, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("kubectl-edit")))
}

// TestInstallerNetworkPolicies: without Cilium's CRD the installer skips
// Ichor's CiliumNetworkPolicies and says so; with it (Cilium's own CRD, so
// its schema validates them) every run applies them, putting back what
// someone changed or deleted, and a run that fails after applying them
// rolls them back with the rest.
func TestInstallerNetworkPolicies(t *testing.T) {
	crd, c := ciliumCRD(t), crds(t)

	// Cilium's CRD is this test's alone: the others run without it.
	removeCRD(t.Context(), t, c)
	t.Cleanup(func() { removeCRD(context.Background(), t, c) })

	reset(t)

	log, err := runInstaller(t, installer.Options{Version: "v0.1.0"})
	if err != nil {
		t.Fatalf("installing without Cilium's CRD: %v", err)
	}

	mustContain(t, "the log", log,
		"[7/9] network policies: skipped, the API server does not serve cilium.io/v2 CiliumNetworkPolicy (CRD ciliumnetworkpolicies.cilium.io): ichor-system is not isolated by the installer",
		"[8/9] post-checks", "done: Ichor v0.1.0 is installed")

	testenv.Must(t, c.Create(t.Context(), crd.DeepCopy()))
	testenv.Eventually(t, waitTimeout, "CRD "+netpol.CRDName+" Established", func() error {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(crd), cur); err != nil {
			return err
		}

		for _, c := range cur.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}

		return fmt.Errorf("not Established: %v", cur.Status.Conditions)
	})

	t.Run("WaitsForTheEgress", func(t *testing.T) {
		// Without the controller's egress policies the default deny would
		// cut its egress to Talos nodes and S3 stores: nothing is applied.
		log, err := runInstaller(t, installer.Options{Version: "v0.1.1"})
		if err != nil {
			t.Fatalf("upgrading with Cilium's CRD and no egress policies: %v", err)
		}

		mustContain(t, "the log", log,
			"[7/9] network policies: skipped, the controller has not written its egress policy ichor-controller-egress yet",
			"done: Ichor v0.1.1 is installed")

		for _, p := range netpol.Policies(ns, netpol.Options{}) {
			if policy(t, p.GetName()) != nil {
				t.Fatalf("CiliumNetworkPolicy %s was applied before the controller's egress policies exist", p.GetName())
			}
		}

		// The controller writes them (controller netpolicy; here as it would).
		egress, err := netpol.EgressPolicies(ns, netpol.Targets{Controller: []netpol.Target{{Host: "192.0.2.10", Port: netpol.TalosAPIPort, Source: "test"}}})
		testenv.Must(t, err)

		for _, o := range egress {
			testenv.Must(t, k8s.Patch(t.Context(), o, client.Apply, client.FieldOwner("ichor-controller"), client.ForceOwnership)) //nolint:staticcheck // Apply of unstructured objects
		}
	})

	t.Run("Applied", func(t *testing.T) {
		log, err := runInstaller(t, installer.Options{Version: "v0.2.0"})
		if err != nil {
			t.Fatalf("upgrading with Cilium's CRD: %v", err)
		}

		mustContain(t, "the log", log,
			"[7/9] network policies: applying CiliumNetworkPolicy ichor-controller, CiliumNetworkPolicy ichor-ui, CiliumNetworkPolicy ichor-installer, CiliumNetworkPolicy ichor-default-deny",
			"[8/9] post-checks", "done: Ichor v0.2.0 is installed")
		policiesAreTheSet(t, "after the upgrade")
	})

	t.Run("ReappliedOnARerun", func(t *testing.T) {
		edit(t, netpol.ControllerPolicy, `{"spec":{"ingress":[{"fromEntities":["world"]}]}}`)
		del(t, policy(t, netpol.InstallerPolicy))

		if _, err := runInstaller(t, installer.Options{Version: "v0.3.0"}); err != nil {
			t.Fatalf("a re-run: %v", err)
		}

		policiesAreTheSet(t, "after a re-run")
	})

	t.Run("RolledBack", func(t *testing.T) {
		edit(t, netpol.UIPolicy, `{"spec":{"description":"edited by hand"}}`)
		del(t, policy(t, netpol.InstallerPolicy))

		// The admission webhooks of a simulated controller never answer, so
		// the post-check's refusal fails, after the policies were applied.
		var out bytes.Buffer

		err := installer.Run(t.Context(), installer.Options{Config: installerConfig, Log: &out, Version: "v0.4.0", WaitTimeout: 10 * time.Second})
		t.Logf("installer v0.4.0 log:\n%s", out.String())

		if err == nil {
			t.Fatal("the post-check passed without a controller to answer it")
		}

		mustContain(t, "the log", out.String(),
			"[7/9] network policies: applying CiliumNetworkPolicy ichor-controller",
			"FAILED at post-checks",
			"deleted CiliumNetworkPolicy ichor-installer",
			"rolled back: v0.3.0 runs again")

		if p := policy(t, netpol.InstallerPolicy); p != nil {
			t.Fatal("the rollback left CiliumNetworkPolicy ichor-installer, which the run created")
		}

		if d, _, _ := unstructured.NestedString(policy(t, netpol.UIPolicy).Object, "spec", "description"); d != "edited by hand" {
			t.Fatalf("the rollback did not put CiliumNetworkPolicy ichor-ui back as it was: description %q", d)
		}
	})
}
