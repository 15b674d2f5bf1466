package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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
	if one := mustSucceed(t, ichor(t, "cluster", "get", "prod", "-n", ns)); !strings.Contains(one.stdout, "Needs attention:\n  nothing\n") {
		t.Fatalf("a cluster with nothing wrong:\n%s", one.stdout)
	}

	// What needs attention, in the console's words (contracts/pkg/attention):
	// a machine waiting for approval, and one whose node does not answer,
	// told once though two conditions say it.
	createMachine(t, newMachine(ns, "prod-7f3a", "prod"))
	down := newMachine(ns, "prod-w1", "prod")
	down.Spec.Approval.State, down.Spec.Role = ichorv1alpha1.ApprovalApproved, ichorv1alpha1.RoleWorker
	since := metav1.NewTime(time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC))
	refused := `Unavailable: connection error: desc = "transport: Error while dialing: dial tcp 192.168.10.21:50000: connect: connection refused"`
	down.Status.Conditions = []metav1.Condition{
		{Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.JoinedReason, Message: "joined", LastTransitionTime: since},
		{Type: ichorv1alpha1.NodeHealthyCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.NodeUnreachableReason, Message: refused, LastTransitionTime: since},
		{Type: ichorv1alpha1.InSyncCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.NodeUnreachableReason, Message: refused, LastTransitionTime: since},
	}
	ichorv1alpha1.SummarizeTalosMachine(down)
	createMachine(t, down)
	// The CNI the controller read from the cluster (status.cni).
	prod := getCluster(t, ns, "prod")
	prod.Status.CNI.Detected, prod.Status.CNI.CiliumVersion = "cilium", "v1.20.2"
	must(t, k8s.Status().Update(context.Background(), prod))
	one := mustSucceed(t, ichor(t, "cluster", "get", "prod", "-n", ns))
	out := ageLine.ReplaceAllString(one.stdout, "${1}<age>")
	out = attentionSince.ReplaceAllString(out, "${1}<age>  ")
	out = attentionMore.ReplaceAllString(out, "           ${1}: ")
	golden(t, "cluster-get.golden", out)

	// Automatic patch upgrades are shown when a cluster opts in (off above).
	staging := getCluster(t, ns, "staging")
	staging.Spec.AutoPatch.Enabled = true
	must(t, k8s.Update(context.Background(), staging))
	if got := mustSucceed(t, ichor(t, "cluster", "get", "staging", "-n", ns)).stdout; !strings.Contains(got, "Automatic patches:    on: newer patches of the running minors") ||
		!strings.Contains(got, "written as ichor-auto-patch") {
		t.Fatalf("cluster get of a cluster with spec.autoPatch.enabled:\n%s", got)
	}
}

var (
	// attentionSince is the SINCE column of `cluster get`'s Needs attention.
	attentionSince = regexp.MustCompile(`(?m)^(  (?:Error|Warning|Info) +)\d+[smhd] +`)
	// attentionMore are its run: and why: lines, indented after SINCE.
	attentionMore = regexp.MustCompile(`(?m)^ +(run|why): `)
)

// TestWritesRefusedAcrossMinors: the CLI (built as v0.4.0) refuses every
// write when the cluster's IchorInstallation records an Ichor two minors
// away, before any confirmation and with nothing written; reads work with
// one warning; one minor away and no installation at all, writes go through.
func TestWritesRefusedAcrossMinors(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "skew")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))

	// No IchorInstallation: the server version is unknown and writes go through.
	v := mustSucceed(t, ichor(t, "version"))
	if !strings.Contains(v.stdout, "ichor "+cliVersion) || !strings.Contains(v.stdout, "Server:  unknown") {
		t.Fatalf("version without an installation:\n%s", v.stdout)
	}
	if r := mustSucceed(t, ichor(t, "cluster", "discovery", "add", "10.1.0.8", "-n", ns)); strings.Contains(r.stderr, "warning") {
		t.Fatalf("a write without an installation warned:\n%s", r.stderr)
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
	if !strings.Contains(v.stdout, "Ichor v0.6.1") || !strings.Contains(v.stdout, "Writes:  refused") || strings.Contains(v.stderr, "warning") {
		t.Fatalf("version must show the server and the refusal, and warn of nothing:\nstdout:\n%s\nstderr:\n%s", v.stdout, v.stderr)
	}
	refusal := "this ichor is v0.4.0 and the cluster runs Ichor v0.6.1, more than one minor release apart"
	mustFail(t, ichor(t, "cluster", "discovery", "add", "10.1.0.9", "-n", ns), refusal, "install ichor v0.6.x")
	createMachine(t, newMachine(ns, "m-1", "prod"))
	mustFail(t, ichor(t, "machine", "reject", "m-1", "-n", ns), "install ichor v0.6.x")
	mustFail(t, ichor(t, "node", "remove", "m-1", "-n", ns, "--yes"), "install ichor v0.6.x")
	mustFail(t, ichor(t, "cluster", "pause", "prod", "-n", ns), "install ichor v0.6.x")
	// The one write that goes to Talos rather than the API server is refused
	// too, before it dials (no machine answers on this address).
	tc := filepath.Join(t.TempDir(), "talosconfig")
	must(t, os.WriteFile(tc, []byte("context: x\n"), 0o600))
	mustFail(t, ichor(t, "machine", "reclaim", "127.0.0.1", "--talosconfig", tc, "--confirm-uuid", "u"), "install ichor v0.6.x")
	// The refusal comes before the confirmation, not after someone typed it.
	if r := mustFail(t, ichorWith(t, invocation{stdin: "m-1\n"}, "node", "remove", "m-1", "-n", ns), "install ichor v0.6.x"); strings.Contains(r.stderr, "to confirm") {
		t.Fatalf("a refused write asked for a confirmation:\n%s", r.stderr)
	}
	c, m := getCluster(t, ns, "prod"), getMachine(t, ns, "m-1")
	if len(c.Spec.Discovery.Addresses) != 1 || c.Spec.Paused || m.Spec.Approval.State != ichorv1alpha1.ApprovalPending || m.DeletionTimestamp != nil {
		t.Fatalf("a refused write changed something: discovery %v, paused %t, approval %s", c.Spec.Discovery.Addresses, c.Spec.Paused, m.Spec.Approval.State)
	}
	ops := &ichorv1alpha1.TalosOperationList{}
	must(t, k8s.List(ctx, ops, client.InNamespace(ns)))
	if len(ops.Items) != 0 {
		t.Fatalf("a refused write created %d TalosOperations", len(ops.Items))
	}

	// Reads still work, with the refusal as one warning on stderr.
	r := mustSucceed(t, ichor(t, "machine", "list", "-n", ns))
	if !strings.Contains(r.stdout, "m-1") || strings.Count(r.stderr, "warning: "+refusal) != 1 {
		t.Fatalf("a read must list and warn once:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}

	// One minor away: writes go through, and reads do not warn.
	inst.Status.InstalledVersion = "v0.5.3"
	must(t, k8s.Status().Update(ctx, inst))
	mustSucceed(t, ichor(t, "cluster", "discovery", "add", "10.1.0.9", "-n", ns))
	if len(getCluster(t, ns, "prod").Spec.Discovery.Addresses) != 2 {
		t.Fatal("the write one minor away did not add the address")
	}
	if r := mustSucceed(t, ichor(t, "machine", "list", "-n", ns)); strings.Contains(r.stderr, "warning") {
		t.Fatalf("a read one minor away warned:\n%s", r.stderr)
	}
}

// TestClusterPauseResume: `cluster pause` sets spec.paused and the reason,
// `cluster get` says since when once the controller confirmed it, `cluster
// resume` clears both; a refused pause changes nothing.
func TestClusterPauseResume(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "pause")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))

	mustFail(t, ichor(t, "cluster", "pause", "-n", ns), "takes one CLUSTER")
	mustFail(t, ichor(t, "cluster", "pause", "nope", "-n", ns), `TalosCluster "nope" not found`, "prod")
	mustFail(t, ichor(t, "cluster", "pause", "prod", "-n", ns, "--reason", strings.Repeat("x", 513)), "at most 512", "nothing was changed")
	if c := getCluster(t, ns, "prod"); c.Spec.Paused || c.Annotations[ichorv1alpha1.PausedReasonAnnotation] != "" {
		t.Fatalf("a refused pause changed the cluster: paused %t, annotations %v", c.Spec.Paused, c.Annotations)
	}

	r := mustSucceed(t, ichor(t, "cluster", "pause", "prod", "-n", ns, "--reason", "disk swap on cp-2"))
	if !strings.Contains(r.stdout, "cluster prod is paused") || !strings.Contains(r.stdout, "ichor cluster resume prod") {
		t.Fatalf("output: %s", r.stdout)
	}
	c := getCluster(t, ns, "prod")
	if !c.Spec.Paused || c.Annotations[ichorv1alpha1.PausedReasonAnnotation] != "disk swap on cp-2" {
		t.Fatalf("paused %t, annotations %v; want paused with the reason", c.Spec.Paused, c.Annotations)
	}
	if out := mustSucceed(t, ichor(t, "cluster", "get", "prod", "-n", ns)).stdout; !strings.Contains(out, "not confirmed it yet") || !strings.Contains(out, "disk swap on cp-2") {
		t.Fatalf("cluster get before the controller confirmed:\n%s", out)
	}

	// The controller confirms with the Paused condition; its transition time is "since".
	since := metav1.NewTime(time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC))
	c.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.PausedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.PausedReason, Message: "paused", LastTransitionTime: since}}
	must(t, k8s.Status().Update(ctx, c))
	if out := mustSucceed(t, ichor(t, "cluster", "get", "prod", "-n", ns)).stdout; !strings.Contains(out, "yes, since 2026-05-04T03:02:01Z") {
		t.Fatalf("cluster get after the controller confirmed:\n%s", out)
	}

	if r := mustSucceed(t, ichor(t, "cluster", "pause", "prod", "-n", ns)); !strings.Contains(r.stdout, "already paused; nothing changed") {
		t.Fatalf("pausing twice: %s", r.stdout)
	}
	if got := getCluster(t, ns, "prod").Annotations[ichorv1alpha1.PausedReasonAnnotation]; got != "disk swap on cp-2" {
		t.Fatalf("a second pause without a reason dropped the first one's: %q", got)
	}

	r = mustSucceed(t, ichor(t, "cluster", "resume", "prod", "-n", ns))
	if !strings.Contains(r.stdout, "cluster prod is resumed") {
		t.Fatalf("output: %s", r.stdout)
	}
	c = getCluster(t, ns, "prod")
	if c.Spec.Paused {
		t.Fatal("resume left the cluster paused")
	}
	if _, ok := c.Annotations[ichorv1alpha1.PausedReasonAnnotation]; ok {
		t.Fatalf("resume kept the pause reason: %v", c.Annotations)
	}
	if r := mustSucceed(t, ichor(t, "cluster", "resume", "prod", "-n", ns)); !strings.Contains(r.stdout, "not paused; nothing changed") {
		t.Fatalf("resuming twice: %s", r.stdout)
	}
}

// TestDiscoveryScan: `cluster discovery scan` writes the scan request, and
// with --wait follows it until the controller's answer (written here as the
// controller writes it) and prints the results; a paused cluster and one
// with nothing to scan are refused, with nothing written.
func TestDiscoveryScan(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "scan")
	must(t, k8s.Create(ctx, newCluster(ns, "prod")))

	mustFail(t, ichor(t, "cluster", "discovery", "scan", "-n", ns), "registers no address or subnet", "ichor cluster discovery add")
	mustSucceed(t, ichor(t, "cluster", "discovery", "add", "192.168.30.0/24", "-n", ns))
	mustSucceed(t, ichor(t, "cluster", "pause", "prod", "-n", ns))
	mustFail(t, ichor(t, "cluster", "discovery", "scan", "prod", "-n", ns), "is paused", "ichor cluster resume prod", "nothing was changed")
	if _, ok := getCluster(t, ns, "prod").Annotations[ichorv1alpha1.ScanRequestedAnnotation]; ok {
		t.Fatal("a refused scan request was written")
	}
	mustSucceed(t, ichor(t, "cluster", "resume", "prod", "-n", ns))

	r := mustSucceed(t, ichor(t, "cluster", "discovery", "scan", "prod", "-n", ns))
	if !strings.Contains(r.stdout, "asked cluster prod for a scan") {
		t.Fatalf("output: %s", r.stdout)
	}
	first := getCluster(t, ns, "prod").Annotations[ichorv1alpha1.ScanRequestedAnnotation]
	if _, err := time.Parse(time.RFC3339Nano, first); err != nil {
		t.Fatalf("the request %q is not an RFC 3339 time: %v", first, err)
	}
	mustFail(t, ichor(t, "cluster", "discovery", "scan", "prod", "-n", ns, "--cluster", "staging"), "name it once")

	// --wait follows a new request until a scan answered it.
	done := make(chan result, 1)
	go func() { done <- ichor(t, "cluster", "discovery", "scan", "-n", ns, "--wait", "--timeout", "90s") }()
	var c *ichorv1alpha1.TalosCluster
	deadline := time.Now().Add(90 * time.Second)
	for {
		c = getCluster(t, ns, "prod")
		if v := c.Annotations[ichorv1alpha1.ScanRequestedAnnotation]; v != first && v != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting scan request was never written")
		}
		time.Sleep(100 * time.Millisecond)
	}
	scanned := metav1.NewTime(time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC))
	c.Status.Discovery = ichorv1alpha1.DiscoveryStatus{
		LastScanTime: &scanned, LastHandledScanRequest: c.Annotations[ichorv1alpha1.ScanRequestedAnnotation],
		Addresses: []ichorv1alpha1.DiscoveryResult{{Address: "192.168.30.7", Result: ichorv1alpha1.DiscoveryResultPending, Machine: "prod-7f3a", ProbedAt: scanned}},
	}
	must(t, k8s.Status().Update(ctx, c))
	r = mustSucceed(t, <-done)
	for _, want := range []string{"cluster prod scanned at 2026-05-04T03:02:01Z", "192.168.30.7", "Pending", "prod-7f3a"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--wait output lacks %q:\n%s", want, r.stdout)
		}
	}
}
