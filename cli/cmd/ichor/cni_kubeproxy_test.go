package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestKubeProxyCLI: `ichor cni kube-proxy [enabled|replaced] [--wait]`.
// Without a mode it prints spec.cni.kubeProxy, the KubeProxyConsistent
// condition and an unfinished switch with its step; with one, the shared
// checks (guard.CheckKubeProxySwitch) refuse before anything is written (a
// mode Ichor does not know, the mode the cluster has, no CNIHandover, an
// unfinished cni or kube-proxy operation), and no TalosOperation exists
// after a refusal; otherwise the confirmation says the steps in the
// controller's order and a TalosOperation of type kube-proxy is created;
// --wait follows it to its end.
func TestKubeProxyCLI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "kubeproxy")
	must(t, k8s.Create(ctx, newCluster(ns, "prod"))) // kube-proxy replaced
	kubeProxyOps := func() []ichorv1alpha1.TalosOperation {
		t.Helper()
		return operationsOfType(t, ns, ichorv1alpha1.OperationKubeProxy)
	}
	noOperation := func(what string) {
		t.Helper()
		if ops := kubeProxyOps(); len(ops) != 0 {
			t.Fatalf("%s created operation %s", what, ops[0].Name)
		}
	}

	// The mode, before the controller reported its consistency.
	r := mustSucceed(t, ichor(t, "cni", "kube-proxy", "-n", ns))
	for _, want := range []string{"Cluster prod: kube-proxy replaced (spec.cni.kubeProxy).", "KubeProxyConsistent: not reported yet",
		"`ichor cni kube-proxy enabled --cluster prod` switches it."} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("the status must say %q:\n%s", want, r.stdout)
		}
	}
	c := getCluster(t, ns, "prod")
	apimeta.SetStatusCondition(&c.Status.Conditions, cond(ichorv1alpha1.KubeProxyConsistentCondition, metav1.ConditionFalse,
		ichorv1alpha1.KubeProxyMismatchReason, "kube-proxy is replaced but the DaemonSet kube-system/kube-proxy runs"))
	must(t, k8s.Status().Update(ctx, c))
	r = mustSucceed(t, ichor(t, "cni", "kube-proxy", "-n", ns, "--cluster", "prod"))
	if !strings.Contains(r.stdout, "KubeProxyConsistent: False (Mismatch) kube-proxy is replaced but the DaemonSet kube-system/kube-proxy runs") {
		t.Fatalf("the status must print the condition:\n%s", r.stdout)
	}

	// Bad arguments: named, with the modes there are; nothing written.
	mustFail(t, ichor(t, "cni", "kube-proxy", "strict", "-n", ns, "-y"), `kube-proxy mode "strict" is not one Ichor knows`,
		"name enabled (Talos runs kube-proxy) or replaced (Cilium replaces it)", "nothing was changed")
	mustFail(t, ichor(t, "cni", "kube-proxy", "enabled", "replaced", "-n", ns, "-y"), "at most one mode, enabled or replaced", "`ichor cni kube-proxy --help`")
	// The mode the cluster has.
	mustFail(t, ichor(t, "cni", "kube-proxy", "replaced", "-n", ns, "-y"), "Switching kube-proxy on cluster prod to replaced is refused",
		"already has kube-proxy replaced", "name the other mode")
	// Not Ichor's release yet.
	mustFail(t, ichor(t, "cni", "kube-proxy", "enabled", "-n", ns, "-y"), "CNIHandover: the controller has not reported it", "wait until", "nothing was changed")
	noOperation("a refused switch")

	// Not confirmed: nothing is created; the confirmation says the steps in order.
	setCiliumStatus(t, ns, "v1.20.2", metav1.ConditionTrue, "Cilium is Ichor's Helm release")
	r = mustFail(t, ichorWith(t, invocation{stdin: "staging\n"}, "cni", "kube-proxy", "enabled", "-n", ns), "not confirmed", "nothing was changed")
	noOperation("an unconfirmed switch")
	wantInOrder(t, r.stderr, "from replaced to enabled", "1. kube-proxy-check:", "2. kube-proxy-talos: Talos's machine config turns kube-proxy on",
		"waits until it runs on every node", "3. kube-proxy-cilium: the ichor-cni Job upgrades Cilium's Helm release kube-system/cilium with kubeProxyReplacement: false",
		"4. kube-proxy-verify:", "holds the cluster lock", `Type "prod" to confirm`)

	// The switch: an operation of type kube-proxy to enabled, the cluster named.
	r = mustSucceed(t, ichorWith(t, invocation{stdin: "prod\n"}, "cni", "kube-proxy", "enabled", "-n", ns))
	m := startedOperation.FindStringSubmatch(r.stdout)
	ops := kubeProxyOps()
	if m == nil || len(ops) != 1 || ops[0].Name != m[1] || !strings.HasPrefix(m[1], "kube-proxy-enabled-") ||
		!strings.Contains(r.stdout, "ichor operation get "+m[1]+" --watch") {
		t.Fatalf("the switch must print the operation it created (%d kube-proxy operations):\n%s", len(ops), r.stdout)
	}
	if s := ops[0].Spec; s.ClusterName != "prod" || s.Type != ichorv1alpha1.OperationKubeProxy || s.KubeProxy == nil || s.KubeProxy.Mode != ichorv1alpha1.KubeProxyEnabled || s.CNI != nil {
		t.Fatalf("operation %s spec %+v", ops[0].Name, s)
	}
	if c := getCluster(t, ns, "prod"); c.Spec.CNI.KubeProxy != ichorv1alpha1.KubeProxyReplaced {
		t.Fatalf("the CLI wrote spec.cni.kubeProxy %q; only the operation does, at its Talos step", c.Spec.CNI.KubeProxy)
	}

	// The status names the unfinished switch and its step, as data too.
	if r := mustSucceed(t, ichor(t, "cni", "kube-proxy", "-n", ns)); !strings.Contains(r.stdout, "Switching to enabled: operation "+m[1]+", step not started") ||
		strings.Contains(r.stdout, "switches it") {
		t.Fatalf("the status with a switch before its first step:\n%s", r.stdout)
	}
	setOperationStatus(t, ns, m[1], func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.Step = ichorv1alpha1.OperationRunning, "kube-proxy-talos"
	})
	var state struct {
		Mode       string            `json:"mode"`
		Consistent *metav1.Condition `json:"consistent"`
		Unfinished []struct {
			Name, Mode, Step string
		} `json:"unfinished"`
	}
	must(t, json.Unmarshal([]byte(mustSucceed(t, ichor(t, "cni", "kube-proxy", "-n", ns, "-o", "json")).stdout), &state))
	if state.Mode != ichorv1alpha1.KubeProxyReplaced || state.Consistent == nil || state.Consistent.Status != metav1.ConditionFalse ||
		len(state.Unfinished) != 1 || state.Unfinished[0].Name != m[1] || state.Unfinished[0].Mode != "enabled" || state.Unfinished[0].Step != "kube-proxy-talos" {
		t.Fatalf("the status as data: %+v", state)
	}

	// A second switch, or a Cilium upgrade, while it has not finished: refused, naming it.
	mustFail(t, ichor(t, "cni", "kube-proxy", "enabled", "-n", ns, "-y"), "operation "+m[1]+" changes cluster prod's Cilium and has not finished",
		"ichor operation get "+m[1]+" --watch", "nothing was changed")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"), "operation "+m[1]+" changes cluster prod's Cilium and has not finished")
	if n := len(kubeProxyOps()); n != 1 {
		t.Fatalf("a refused second switch left %d kube-proxy operations", n)
	}

	// --wait follows the next one to its end.
	setOperationStatus(t, ns, m[1], func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationFailed })
	done := make(chan result, 1)
	go func() { done <- ichor(t, "cni", "kube-proxy", "enabled", "-n", ns, "-y", "--wait") }()
	var second string
	testenv.Eventually(t, 0, "the second kube-proxy operation", testenv.Holds(func() bool {
		if op := newOperationOfType(t, ns, ichorv1alpha1.OperationKubeProxy, m[1]); op != nil {
			second = op.Name
			return true
		}
		return false
	}))
	setOperationStatus(t, ns, second, func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.Step = ichorv1alpha1.OperationSucceeded, "kube-proxy-verify"
		st.Conditions = []metav1.Condition{cond(ichorv1alpha1.ReadyCondition, metav1.ConditionTrue, "Succeeded", "kube-proxy is enabled on every node")}
	})
	r = mustSucceed(t, <-done)
	if !strings.Contains(r.stdout, "Started operation "+second+".") || !strings.Contains(r.stdout, "Operation "+second+" succeeded: kube-proxy is enabled on every node.") {
		t.Fatalf("--wait must print the operation and how it ended:\n%s", r.stdout)
	}
}

// wantInOrder fails unless text holds each of wants, each after the one before.
func wantInOrder(t *testing.T, text string, wants ...string) {
	t.Helper()
	at := 0
	for _, w := range wants {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("%q is missing after offset %d (the order is %q):\n%s", w, at, wants, text)
		}
		at += i + len(w)
	}
}
