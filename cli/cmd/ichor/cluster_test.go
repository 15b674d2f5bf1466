package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func getCluster(t *testing.T, ns, name string) *ichorv1alpha1.TalosCluster {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, c))
	return c
}

func TestClusterGetAndDiscoveryAdd(t *testing.T) {
	ns := namespace(t, "discovery")
	mustFail(t, ichor(t, "cluster", "discovery", "add", "192.168.10.5", "-n", ns), "has no TalosCluster", "-n NAMESPACE")
	must(t, k8s.Create(context.Background(), newCluster(ns, "prod")))

	r := mustSucceed(t, ichor(t, "cluster", "discovery", "add", "192.168.10.5", "192.168.20.0/24", "-n", ns))
	if !strings.Contains(r.stdout, "cluster prod now discovers 192.168.10.5, 192.168.20.0/24") {
		t.Fatalf("output: %s", r.stdout)
	}
	c := getCluster(t, ns, "prod")
	if !slices.Equal(c.Spec.Discovery.Addresses, []string{"192.168.10.5"}) || !slices.Equal(c.Spec.Discovery.Subnets, []string{"192.168.20.0/24"}) {
		t.Fatalf("discovery: %+v", c.Spec.Discovery)
	}
	r = mustSucceed(t, ichor(t, "cluster", "discovery", "add", "192.168.10.5", "-n", ns))
	if !strings.Contains(r.stdout, "nothing changed") {
		t.Fatalf("adding an address twice must change nothing: %s", r.stdout)
	}
	mustFail(t, ichor(t, "cluster", "discovery", "add", "192.168.20.7/24", "-n", ns), "did you mean 192.168.20.0/24")
	mustFail(t, ichor(t, "cluster", "discovery", "add", "node-7", "-n", ns), "neither an IP address")

	must(t, k8s.Create(context.Background(), newCluster(ns, "staging")))
	mustFail(t, ichor(t, "cluster", "discovery", "add", "192.168.10.6", "-n", ns), "2 TalosClusters (prod, staging)", "--cluster")
	mustSucceed(t, ichor(t, "cluster", "discovery", "add", "192.168.10.6", "-n", ns, "--cluster", "staging"))
	if got := getCluster(t, ns, "staging").Spec.Discovery.Addresses; !slices.Equal(got, []string{"192.168.10.6"}) {
		t.Fatalf("staging discovery: %v", got)
	}
	mustFail(t, ichor(t, "cluster", "discovery", "add", "192.168.10.6", "-n", ns, "--cluster", "nope"), `TalosCluster "nope" not found`, "prod, staging")

	list := mustSucceed(t, ichor(t, "cluster", "get", "-n", ns))
	golden(t, "cluster-list.golden", normaliseTableAges(list.stdout))
	one := mustSucceed(t, ichor(t, "cluster", "get", "prod", "-n", ns))
	golden(t, "cluster-get.golden", ageLine.ReplaceAllString(one.stdout, "${1}<age>"))
}

func TestWritesRefusedAcrossMinors(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "skew")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))

	// No IchorInstallation: the server version is unknown and writes go through.
	v := mustSucceed(t, ichor(t, "version"))
	if !strings.Contains(v.stdout, "ichor "+cliVersion) || !strings.Contains(v.stdout, "Server:  unknown") {
		t.Fatalf("version without an installation:\n%s", v.stdout)
	}

	inst := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.6.1"}},
	}
	must(t, k8s.Create(ctx, inst))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), inst) })
	inst.Status.InstalledVersion = "v0.6.1"
	must(t, k8s.Status().Update(ctx, inst))

	v = mustSucceed(t, ichor(t, "version"))
	if !strings.Contains(v.stdout, "Ichor v0.6.1") || !strings.Contains(v.stdout, "Writes:  refused") {
		t.Fatalf("version must show the server and the refusal:\n%s", v.stdout)
	}
	mustFail(t, ichor(t, "cluster", "discovery", "add", "10.1.0.9", "-n", ns), "more than one minor release apart", "install ichor v0.6.x")
	createMachine(t, newMachine(ns, "m-1", "prod"))
	mustFail(t, ichor(t, "machine", "reject", "m-1", "-n", ns), "install ichor v0.6.x")
	mustFail(t, ichor(t, "node", "remove", "m-1", "-n", ns, "--yes"), "install ichor v0.6.x")
	if len(getCluster(t, ns, "prod").Spec.Discovery.Addresses) != 0 || getMachine(t, ns, "m-1").Spec.Approval.State != ichorv1alpha1.ApprovalPending {
		t.Fatal("a refused write changed something")
	}
	// Reads still work.
	mustSucceed(t, ichor(t, "machine", "list", "-n", ns))

	inst.Status.InstalledVersion = "v0.5.3"
	must(t, k8s.Status().Update(ctx, inst))
	mustSucceed(t, ichor(t, "cluster", "discovery", "add", "10.1.0.9", "-n", ns))
}
