package install_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

func TestManifestHoldsIchor(t *testing.T) {
	objs, err := install.Objects()
	if err != nil {
		t.Fatal(err)
	}

	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++

		if o.GetKind() == "Deployment" && o.GetNamespace() != install.Namespace {
			t.Errorf("Deployment %s is in namespace %q, want %s", o.GetName(), o.GetNamespace(), install.Namespace)
		}
	}

	if kinds["Namespace"] != 1 || kinds["CustomResourceDefinition"] < 10 || kinds["Deployment"] != 2 || kinds["ValidatingWebhookConfiguration"] != 1 {
		t.Fatalf("the install manifest holds %v; want the namespace, the CRDs, the controller, ichor-ui and the webhook configuration", kinds)
	}

	// ichor-ui: its Deployment mounts the Secret the controller keeps, and its
	// Service serves the console first (ichor ui forwards to the first port)
	// and the issuer's keys on 8444.
	byName := map[string]bool{}
	for _, o := range objs {
		byName[o.GetKind()+"/"+o.GetName()] = true
	}
	for _, want := range []string{"Deployment/ichor-ui", "Service/ichor-ui", "PodDisruptionBudget/ichor-ui", "ServiceAccount/ichor-ui"} {
		if !byName[want] {
			t.Errorf("the install manifest has no %s", want)
		}
	}

	crds, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}

	// The namespace, the CRDs, the users' 5 roles and 3 bindings.
	if crds[0].GetKind() != "Namespace" || len(crds) != kinds["CustomResourceDefinition"]+1+5+3 {
		t.Fatalf("CRDs() gives %d objects starting with %s", len(crds), crds[0].GetKind())
	}

	for _, o := range crds {
		if o.GetKind() == "ClusterRoleBinding" && o.GetName() == "ichor-controller" || o.GetKind() == "Deployment" ||
			o.GetKind() == "Service" || o.GetKind() == "PodDisruptionBudget" || o.GetName() == "ichor-ui" {
			t.Fatalf("CRDs() holds %s %s, which runs only with the controller in the cluster", o.GetKind(), o.GetName())
		}
	}
}

func TestParseRefusesGarbage(t *testing.T) {
	if _, err := install.Parse([]byte("kind: ConfigMap\n")); err == nil {
		t.Fatal("a document without apiVersion parsed")
	}

	if _, err := install.Parse([]byte("a: [\n")); err == nil {
		t.Fatal("malformed YAML parsed")
	}
}

func TestParseIn(t *testing.T) {
	objs, err := install.ParseIn(install.Manifest(), "ichor-test")
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range objs {
		if strings.Contains(fmt.Sprint(o.Object), "ichor-system") {
			t.Errorf("%s %s still names ichor-system", o.GetKind(), o.GetName())
		}

		if o.GetKind() == "Namespace" && o.GetName() != "ichor-test" {
			t.Errorf("Namespace %s", o.GetName())
		}

		if o.GetKind() == "Deployment" && o.GetNamespace() != "ichor-test" {
			t.Errorf("Deployment %s in %s", o.GetName(), o.GetNamespace())
		}
	}
}
