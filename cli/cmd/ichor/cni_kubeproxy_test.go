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
// unfinished cni or kube-proxy operation, a mode Talos's side has not
// recorded), and nothing is written after a refusal; otherwise the
// confirmation says the steps in the controller's order and
// spec.cni.kubeProxy is written with the annotation naming the mode (no
// operation: the controller starts it); --wait follows the one it starts.
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

	// Ichor's release, but the mode Talos's side runs not recorded yet.
	setCiliumStatus(t, ns, "v1.20.2", metav1.ConditionTrue, "Cilium is Ichor's Helm release")
	mustFail(t, ichor(t, "cni", "kube-proxy", "enabled", "-n", ns, "-y"), "status.cni.kubeProxy is empty", "nothing was changed")
	recordKubeProxy := func(mode string) {
		t.Helper()
		c := getCluster(t, ns, "prod")
		c.Status.CNI.KubeProxy = mode
		must(t, k8s.Status().Update(ctx, c))
	}
	recordKubeProxy(ichorv1alpha1.KubeProxyReplaced)
	specMode := func() string {
		t.Helper()
		return getCluster(t, ns, "prod").Spec.CNI.KubeProxy
	}

	// Not confirmed: nothing is changed; the confirmation says the steps in order.
	r = mustFail(t, ichorWith(t, invocation{stdin: "staging\n"}, "cni", "kube-proxy", "enabled", "-n", ns), "not confirmed", "nothing was changed")
	if m := specMode(); m != ichorv1alpha1.KubeProxyReplaced {
		t.Fatalf("an unconfirmed switch wrote spec.cni.kubeProxy %q", m)
	}
	wantInOrder(t, r.stderr, "from replaced to enabled", "1. kube-proxy-check:", "2. kube-proxy-talos: Talos's side moves (status.cni.kubeProxy: enabled)",
		"waits until it runs on every node", "3. kube-proxy-cilium: the ichor-cni Job upgrades Cilium's Helm release kube-system/cilium with kubeProxyReplacement: false",
		"4. kube-proxy-verify:", "holds the cluster lock", `Type "prod" to confirm`)

	// The switch: spec.cni.kubeProxy written with the annotation naming the
	// mode (admission refuses it otherwise); the operation is the controller's.
	r = mustSucceed(t, ichorWith(t, invocation{stdin: "prod\n"}, "cni", "kube-proxy", "enabled", "-n", ns))
	c = getCluster(t, ns, "prod")
	if c.Spec.CNI.KubeProxy != ichorv1alpha1.KubeProxyEnabled || c.Annotations[ichorv1alpha1.KubeProxySwitchAnnotation] != ichorv1alpha1.KubeProxyEnabled ||
		!strings.Contains(r.stdout, "Set spec.cni.kubeProxy of cluster prod to enabled; the controller starts a kube-proxy operation.") {
		t.Fatalf("the switch: spec.cni.kubeProxy %q, annotations %v:\n%s", c.Spec.CNI.KubeProxy, c.Annotations, r.stdout)
	}
	noOperation("the CLI (the controller starts the operation)")

	// The operation the controller starts; the status names it and its step, as data too.
	startOp := func(mode string) string {
		t.Helper()
		op := &ichorv1alpha1.TalosOperation{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "kube-proxy-" + mode + "-"},
			Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationKubeProxy,
				KubeProxy: &ichorv1alpha1.KubeProxySwitch{Mode: mode}},
		}
		must(t, k8s.Create(ctx, op))
		return op.Name
	}
	first := startOp(ichorv1alpha1.KubeProxyEnabled)
	if r := mustSucceed(t, ichor(t, "cni", "kube-proxy", "-n", ns)); !strings.Contains(r.stdout, "Switching to enabled: operation "+first+", step not started") ||
		strings.Contains(r.stdout, "switches it") {
		t.Fatalf("the status with a switch before its first step:\n%s", r.stdout)
	}
	setOperationStatus(t, ns, first, func(st *ichorv1alpha1.TalosOperationStatus) {
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
	if state.Mode != ichorv1alpha1.KubeProxyEnabled || state.Consistent == nil || state.Consistent.Status != metav1.ConditionFalse ||
		len(state.Unfinished) != 1 || state.Unfinished[0].Name != first || state.Unfinished[0].Mode != "enabled" || state.Unfinished[0].Step != "kube-proxy-talos" {
		t.Fatalf("the status as data: %+v", state)
	}

	// The same mode again, or a Cilium upgrade while the switch runs: refused.
	mustFail(t, ichor(t, "cni", "kube-proxy", "enabled", "-n", ns, "-y"), "already has kube-proxy enabled", "nothing was changed")
	mustFail(t, ichor(t, "cni", "upgrade", "v1.20.2", "-n", ns, "-y"), "operation "+first+" changes cluster prod's Cilium and has not finished")

	// --wait follows the operation the controller starts for the next switch.
	setOperationStatus(t, ns, first, func(st *ichorv1alpha1.TalosOperationStatus) { st.Phase = ichorv1alpha1.OperationSucceeded })
	recordKubeProxy(ichorv1alpha1.KubeProxyEnabled)
	done := make(chan result, 1)
	go func() { done <- ichor(t, "cni", "kube-proxy", "replaced", "-n", ns, "-y", "--wait") }()
	testenv.Eventually(t, 0, "spec.cni.kubeProxy replaced", testenv.Holds(func() bool { return specMode() == ichorv1alpha1.KubeProxyReplaced }))
	second := startOp(ichorv1alpha1.KubeProxyReplaced)
	setOperationStatus(t, ns, second, func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.Step = ichorv1alpha1.OperationSucceeded, "kube-proxy-cleanup"
		st.Conditions = []metav1.Condition{cond(ichorv1alpha1.ReadyCondition, metav1.ConditionTrue, "Succeeded", "kube-proxy switched from enabled to replaced")}
	})
	r = mustSucceed(t, <-done)
	if !strings.Contains(r.stdout, "Started operation "+second+".") || !strings.Contains(r.stdout, "Operation "+second+" succeeded: kube-proxy switched from enabled to replaced.") {
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
