package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func storedValues(t *testing.T, c *ichorv1alpha1.TalosCluster) string {
	t.Helper()
	if c.Spec.CNI.Cilium == nil || c.Spec.CNI.Cilium.Values == nil {
		return ""
	}
	return string(c.Spec.CNI.Cilium.Values.Raw)
}

// TestCNIValuesCLI: `ichor cni values get|diff|set|edit`. get prints the
// user's layer (and --effective the merged values); diff and set --dry-run
// print what a layer changes in the rendered Cilium objects and write
// nothing; an Ichor-owned key or a layer that is not a map is refused by
// name with nothing written; an operator (without `update` on
// talosclusters/cilium-values) is refused, an admin writes; edit checks on
// save.
func TestCNIValuesCLI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "cnivalues")
	c := newCluster(ns, "prod")
	c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: []byte(`{"debug":{"enabled":true}}`)}}
	must(t, k8s.Create(ctx, c))

	// get: the user's layer as YAML, the chart named; as data; the merged values.
	r := mustSucceed(t, ichor(t, "cni", "values", "get", "-n", ns))
	if !strings.Contains(r.stdout, "debug:\n  enabled: true\n") || !strings.Contains(r.stdout, "Cilium chart "+release.DefaultCiliumVersion) ||
		strings.Contains(r.stdout, "tunnelProtocol") {
		t.Fatalf("values get:\n%s", r.stdout)
	}
	var layer map[string]map[string]bool
	must(t, json.Unmarshal([]byte(mustSucceed(t, ichor(t, "cni", "values", "get", "-n", ns, "--cluster", "prod", "-o", "json")).stdout), &layer))
	if !layer["debug"]["enabled"] || len(layer) != 1 {
		t.Fatalf("values get -o json: %v", layer)
	}
	r = mustSucceed(t, ichor(t, "cni", "values", "get", "-n", ns, "--effective"))
	for _, want := range []string{"debug:\n  enabled: true", "kubeProxyReplacement: true", "tunnelProtocol: vxlan", "k8sServicePort: 7445"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("values get --effective must show %q:\n%s", want, r.stdout)
		}
	}

	rv := getCluster(t, ns, "prod").ResourceVersion
	unchanged := func(what string) {
		t.Helper()
		if got := getCluster(t, ns, "prod"); got.ResourceVersion != rv {
			t.Fatalf("%s wrote the cluster: %s", what, storedValues(t, got))
		}
	}

	// diff: the objects the new key adds, nothing written.
	relay := writeFile(t, "relay.yaml", "debug:\n  enabled: true\nhubble:\n  relay:\n    enabled: true\n")
	r = mustSucceed(t, ichor(t, "cni", "values", "diff", "-n", ns, "-f", relay))
	if !strings.Contains(r.stdout, "added    Deployment kube-system/hubble-relay") || !strings.Contains(r.stdout, "+++ b/Deployment kube-system/hubble-relay") {
		t.Fatalf("values diff must show the added hubble-relay Deployment:\n%s", r.stdout)
	}
	unchanged("diff")
	var prev struct {
		Changed bool `json:"changed"`
		Objects []struct {
			Object string `json:"object"`
			Change string `json:"change"`
		} `json:"objects"`
	}
	must(t, json.Unmarshal([]byte(mustSucceed(t, ichor(t, "cni", "values", "diff", "-n", ns, "-f", relay, "-o", "json")).stdout), &prev))
	if !prev.Changed || len(prev.Objects) == 0 {
		t.Fatalf("values diff -o json: %+v", prev)
	}

	// set --dry-run: the diff, then nothing written.
	r = mustSucceed(t, ichor(t, "cni", "values", "set", "-n", ns, "-f", relay, "--dry-run"))
	if !strings.Contains(r.stdout, "Deployment kube-system/hubble-relay") || !strings.Contains(r.stdout, "Dry run: nothing was written") {
		t.Fatalf("set --dry-run:\n%s", r.stdout)
	}
	unchanged("set --dry-run")

	// Ichor-owned keys are refused by name, with the list; nothing written.
	owned := writeFile(t, "owned.yaml", "ipam:\n  mode: cluster-pool\nhubble:\n  tls:\n    auto:\n      method: helm\n")
	mustFail(t, ichor(t, "cni", "values", "set", "-n", ns, "-f", owned, "--yes"),
		`"hubble.tls.auto.method", "ipam.mode"`, "remove these keys", "Ichor owns cgroup.autoMount.enabled", "nothing was changed")
	mustFail(t, ichor(t, "cni", "values", "diff", "-n", ns, "-f", owned), `"ipam.mode"`)
	mustFail(t, ichor(t, "cni", "values", "set", "-n", ns, "-f", writeFile(t, "list.yaml", "- a\n- b\n"), "--yes"), "must be a map of Helm values")
	mustFail(t, ichor(t, "cni", "values", "set", "-n", ns, "--yes"), "needs --file FILE")
	unchanged("a refused set")

	// An operator may not change the values: the permission is named.
	operatorKC := userKubeconfig(t, "ichor:otto", "ichor:operator")
	mustSucceed(t, ichorWith(t, as(operatorKC), "cni", "values", "get", "-n", ns))
	mustFail(t, ichorWith(t, as(operatorKC), "cni", "values", "set", "-n", ns, "-f", relay, "--yes"),
		"`update` on `talosclusters/cilium-values`", "ichor-admin", "nothing was changed")
	unchanged("the operator's set")

	// Without --yes and no answer, nothing is written.
	mustFail(t, ichor(t, "cni", "values", "set", "-n", ns, "-f", relay), "not confirmed")
	unchanged("an unconfirmed set")

	// The admin writes; the stored layer is the file's, as JSON.
	r = mustSucceed(t, ichor(t, "cni", "values", "set", "-n", ns, "-f", relay, "--yes"))
	if !strings.Contains(r.stdout, "hubble-relay") || !strings.Contains(r.stdout, "are written") {
		t.Fatalf("set:\n%s", r.stdout)
	}
	if got := storedValues(t, getCluster(t, ns, "prod")); got != `{"debug":{"enabled":true},"hubble":{"relay":{"enabled":true}}}` {
		t.Fatalf("stored values %s", got)
	}
	r = mustSucceed(t, ichor(t, "cni", "values", "set", "-n", ns, "-f", relay, "--yes"))
	if !strings.Contains(r.stdout, "do not change") || !strings.Contains(r.stdout, "nothing was written") {
		t.Fatalf("the same values again:\n%s", r.stdout)
	}

	// edit: checked on save; an owned key reopens the editor with the
	// error, saved again unchanged it stops and writes nothing.
	addOwned := filepath.Join(t.TempDir(), "add-owned.sh")
	must(t, os.WriteFile(addOwned, []byte("#!/bin/sh\ngrep -q '^tunnelProtocol' \"$1\" || printf 'tunnelProtocol: geneve\\n' >> \"$1\"\n"), 0o700)) //nolint:gosec // an editor script
	rv = getCluster(t, ns, "prod").ResourceVersion
	r = mustFail(t, ichorWith(t, invocation{env: []string{"EDITOR=" + addOwned}}, "cni", "values", "edit", "-n", ns, "--yes"),
		`"tunnelProtocol"`, "were not changed")
	if !strings.Contains(r.stderr, "error:") {
		t.Fatalf("the error must be shown before the editor reopens:\n%s", r.stderr)
	}
	unchanged("a refused edit")
	r = mustSucceed(t, ichorWith(t, invocation{env: []string{"EDITOR=sed -i s/enabled:.true/enabled:\\x20false/"}}, "cni", "values", "edit", "-n", ns, "--yes"))
	if !strings.Contains(r.stdout, "Deployment kube-system/hubble-relay") {
		t.Fatalf("edit must show the diff:\n%s", r.stdout)
	}
	if got := storedValues(t, getCluster(t, ns, "prod")); got != `{"debug":{"enabled":false},"hubble":{"relay":{"enabled":false}}}` {
		t.Fatalf("stored values after edit %s", got)
	}
}

// cniOperations are the namespace's TalosOperations of type cni.
func cniOperations(t *testing.T, ns string) []ichorv1alpha1.TalosOperation {
	t.Helper()
	return operationsOfType(t, ns, ichorv1alpha1.OperationCNI)
}

// operationsOfType are the namespace's TalosOperations of type typ.
func operationsOfType(t *testing.T, ns, typ string) []ichorv1alpha1.TalosOperation {
	t.Helper()
	list := &ichorv1alpha1.TalosOperationList{}
	must(t, k8s.List(context.Background(), list, client.InNamespace(ns)))
	var out []ichorv1alpha1.TalosOperation
	for _, op := range list.Items {
		if op.Spec.Type == typ {
			out = append(out, op)
		}
	}
	return out
}

// newCNIOperation is the one cni operation of ns not named in known, or nil.
func newCNIOperation(t *testing.T, ns string, known ...string) *ichorv1alpha1.TalosOperation {
	t.Helper()
	return newOperationOfType(t, ns, ichorv1alpha1.OperationCNI, known...)
}

// newOperationOfType is the one operation of type typ in ns not named in known, or nil.
func newOperationOfType(t *testing.T, ns, typ string, known ...string) *ichorv1alpha1.TalosOperation {
	t.Helper()
	for _, op := range operationsOfType(t, ns, typ) {
		if !slices.Contains(known, op.Name) {
			return &op
		}
	}
	return nil
}

// marked is the cell under column col of the table row that starts with first.
func marked(out, col, first string) string {
	lines := strings.Split(out, "\n")
	at := -1
	for _, l := range lines {
		if i := strings.Index(l, col); i >= 0 && strings.HasPrefix(l, "CHART") {
			at = i
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, first+" ") && at >= 0 && len(l) > at {
			return strings.TrimSpace(l[at : at+1])
		}
	}
	return ""
}

// setCiliumStatus writes the running Cilium and the CNIHandover condition
// (no condition when handover is "") as the controller would.
func setCiliumStatus(t *testing.T, ns, running string, handover metav1.ConditionStatus, msg string) {
	t.Helper()
	c := getCluster(t, ns, "prod")
	c.Status.CNI.CiliumVersion = running
	apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.CNIHandoverCondition)
	if handover != "" {
		apimeta.SetStatusCondition(&c.Status.Conditions, cond(ichorv1alpha1.CNIHandoverCondition, handover, "Test", msg))
	}
	must(t, k8s.Status().Update(context.Background(), c))
}

var startedOperation = regexp.MustCompile(`Started operation (\S+)\.`)

// TestCNIUpgradeCLI: `ichor cni upgrade [VERSION] [--list] [--wait]`.
// --list prints the running Cilium, the embedded charts and the default
// target; the shared checks (guard.CheckCNIUpgrade) refuse before anything is
// written (no CNIHandover, a chart not embedded, a downgrade, a skipped
// minor, an incompatible pair, an unfinished cni operation), and no
// TalosOperation exists after a refusal; otherwise, after the confirmation, a
// TalosOperation of type cni is created ("Started operation NAME."), to the
// named chart or, without VERSION, to the default; --wait follows it to its
// end and a failed step is the error, with the failure reason.
func TestCNIUpgradeCLI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "cniupgrade")
	must(t, k8s.Create(ctx, newCluster(ns, "prod"))) // Kubernetes 1.37.2
	noOperation := func(what string) {
		t.Helper()
		if ops := cniOperations(t, ns); len(ops) != 0 {
			t.Fatalf("%s created operation %s", what, ops[0].Name)
		}
	}

	// --list before the controller read the running version.
	r := mustSucceed(t, ichor(t, "cni", "upgrade", "--list", "-n", ns))
	if !strings.Contains(r.stdout, "not known yet") || !strings.Contains(r.stdout, "v1.19.3") || !strings.Contains(r.stdout, "v1.20.2") ||
		strings.Contains(r.stdout, "default target") {
		t.Fatalf("--list without a running version:\n%s", r.stdout)
	}
	mustFail(t, ichor(t, "cni", "upgrade", "-n", ns, "-y"), "not known yet", "status.cni.ciliumVersion is empty", "nothing was changed")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"), "spec.cni.version", "not known yet", "nothing was changed")
	noOperation("an upgrade without a running version")

	// --list with v1.19.3 running: both charts, the running one and the default marked.
	setCiliumStatus(t, ns, "v1.19.3", "", "")
	r = mustSucceed(t, ichor(t, "cni", "upgrade", "--list", "-n", ns))
	for _, want := range []string{"runs Cilium v1.19.3", "CHART", "The default target is v1.20.2", "`ichor cni upgrade --cluster prod`"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("--list must say %q:\n%s", want, r.stdout)
		}
	}
	if marked(r.stdout, "RUNNING", "v1.19.3") != "*" || marked(r.stdout, "DEFAULT", "v1.19.3") != "-" ||
		marked(r.stdout, "RUNNING", "v1.20.2") != "-" || marked(r.stdout, "DEFAULT", "v1.20.2") != "*" {
		t.Fatalf("--list must mark v1.19.3 running and v1.20.2 the default:\n%s", r.stdout)
	}
	var list struct {
		Running string `json:"running"`
		Default string `json:"default"`
		Charts  []struct {
			Version string `json:"version"`
			Running bool   `json:"running"`
			Default bool   `json:"default"`
		} `json:"charts"`
	}
	must(t, json.Unmarshal([]byte(mustSucceed(t, ichor(t, "cni", "upgrade", "--list", "-n", ns, "-o", "json")).stdout), &list))
	if list.Running != "v1.19.3" || list.Default != "v1.20.2" || len(list.Charts) != 2 ||
		!list.Charts[0].Running || list.Charts[0].Default || list.Charts[1].Running || !list.Charts[1].Default {
		t.Fatalf("--list -o json: %+v", list)
	}

	// Not Ichor's release yet: no CNIHandover, or one that is not True.
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"), "CNIHandover: the controller has not reported it", "wait until", "nothing was changed")
	setCiliumStatus(t, ns, "v1.19.3", metav1.ConditionFalse, "adopting the release")
	mustFail(t, ichor(t, "cni", "upgrade", "-n", ns, "-y"), "Upgrading Cilium on cluster prod to v1.20.2 is refused",
		"CNIHandover: adopting the release", "nothing was changed")
	noOperation("an upgrade before the hand-over")

	// Charts that are not embedded, the running one, a downgrade, a skipped minor.
	setCiliumStatus(t, ns, "v1.19.3", metav1.ConditionTrue, "Cilium is Ichor's Helm release")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.9", "-n", ns, "-y"), "spec.cni.version", "not a chart this Ichor embeds (it has v1.19.3, v1.20.2)", "nothing was changed")
	mustFail(t, ichor(t, "cni", "upgrade", "1.19.3", "-n", ns, "-y"), "already runs v1.19.3", "`ichor cni upgrade v1.20.2`")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.19.3", "v1.20.2", "-n", ns, "-y"), "at most one VERSION")
	setCiliumStatus(t, ns, "v1.20.2", metav1.ConditionTrue, "")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.19.3", "-n", ns, "-y"), "older than the running v1.20.2", "never moves Cilium down", "nothing was changed")
	mustFail(t, ichor(t, "cni", "upgrade", "-n", ns, "-y"), "runs Cilium v1.20.2 and the newest chart this Ichor carries is v1.20.2", "nothing was changed")
	if r := mustSucceed(t, ichor(t, "cni", "upgrade", "--list", "-n", ns)); !strings.Contains(r.stdout, "nothing to upgrade to") || strings.Contains(r.stdout, "default target") {
		t.Fatalf("--list with the newest chart running:\n%s", r.stdout)
	}
	setCiliumStatus(t, ns, "v1.18.5", metav1.ConditionTrue, "")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"), "v1.18.5 to v1.20.2 skips a minor", "`ichor cni upgrade v1.19.3`", "nothing was changed")

	// A chart the cluster's Kubernetes is too old for: the pair is refused
	// (overridable at admission; the CLI refuses it like its neighbours).
	setCiliumStatus(t, ns, "v1.19.3", metav1.ConditionTrue, "")
	c := getCluster(t, ns, "prod")
	c.Spec.KubernetesVersion = "1.32.4"
	must(t, k8s.Update(ctx, c))
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"), "supports kubernetes 1.33 to 1.36, not 1.32.4", "`override` verb", "nothing was changed")
	c = getCluster(t, ns, "prod")
	c.Spec.KubernetesVersion = "1.37.2"
	must(t, k8s.Update(ctx, c))

	// Not confirmed: nothing is created.
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns), "not confirmed")
	mustFail(t, ichorWith(t, invocation{stdin: "staging\n"}, "cni", "upgrade", "v1.20.2", "-n", ns), "not confirmed", "nothing was changed")
	noOperation("an unconfirmed upgrade")

	// The upgrade: an operation of type cni to the chart, the cluster named;
	// Cilium 1.20 is tested up to Kubernetes 1.36, so 1.37.2 is warned about.
	r = mustSucceed(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"))
	m := startedOperation.FindStringSubmatch(r.stdout)
	ops := cniOperations(t, ns)
	if m == nil || len(ops) != 1 || ops[0].Name != m[1] || !strings.HasPrefix(m[1], "cni-v1-20-2-") {
		t.Fatalf("the upgrade must print the operation it created (%d cni operations):\n%s", len(ops), r.stdout)
	}
	if s := ops[0].Spec; s.ClusterName != "prod" || s.CNI == nil || s.CNI.Version != "v1.20.2" {
		t.Fatalf("operation %s spec %+v", ops[0].Name, s)
	}
	if !strings.Contains(r.stderr, "warning: Cilium v1.20.2 is not tested on Kubernetes v1.37.2") ||
		!strings.Contains(r.stdout, "ichor operation get "+m[1]+" --watch") {
		t.Fatalf("the upgrade must warn of the untested pair and say how to follow it:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}

	// A second one while the first has not finished: refused, naming it.
	mustFail(t, ichor(t, "cni", "upgrade", "-n", ns, "-y"), "operation "+m[1]+" changes cluster prod's Cilium and has not finished",
		"ichor operation get "+m[1]+" --watch", "nothing was changed")
	if n := len(cniOperations(t, ns)); n != 1 {
		t.Fatalf("a refused second upgrade left %d cni operations", n)
	}

	// Once it has finished, no VERSION moves to the default, after the
	// confirmation that says what happens.
	setOperationStatus(t, ns, m[1], func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationSucceeded })
	r = mustSucceed(t, ichorWith(t, invocation{stdin: "prod\n"}, "cni", "upgrade", "-n", ns))
	for _, want := range []string{"from v1.19.3 to v1.20.2", "Helm upgrades the release kube-system/cilium", "restart as the DaemonSet rolls (the chart's rolling update, at most two nodes at a time",
		"Helm rolls the release back to the running chart v1.19.3", "holds the cluster lock", `Type "prod" to confirm`} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("the confirmation must say %q:\n%s", want, r.stderr)
		}
	}
	m2 := startedOperation.FindStringSubmatch(r.stdout)
	second := newCNIOperation(t, ns, m[1])
	if m2 == nil || len(cniOperations(t, ns)) != 2 || second.Name != m2[1] || second.Spec.CNI.Version != "v1.20.2" {
		t.Fatalf("no VERSION must start an operation to v1.20.2:\n%s\n%+v", r.stdout, second)
	}

	// --wait follows it to its end: a failed step is the error, with its reason.
	setOperationStatus(t, ns, m2[1], func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationFailed })
	done := make(chan result, 1)
	go func() { done <- ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y", "--wait") }()
	var third string
	testenv.Eventually(t, 0, "the third cni operation", testenv.Holds(func() bool {
		if op := newCNIOperation(t, ns, m[1], m2[1]); op != nil {
			third = op.Name
			return true
		}
		return false
	}))
	const reason = "helm upgrade of kube-system/cilium failed: DaemonSet cilium did not become ready; rolled back to v1.19.3"
	setOperationStatus(t, ns, third, func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.FailedStep, st.FailureReason = ichorv1alpha1.OperationPaused, "helm-upgrade", reason
	})
	r = mustFail(t, <-done, "operation "+third+" paused on a failed step (helm-upgrade): "+reason)
	if !strings.Contains(r.stdout, "Started operation "+third+".") {
		t.Fatalf("--wait must print the operation it started:\n%s", r.stdout)
	}
}
