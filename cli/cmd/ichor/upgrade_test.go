package main

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// `ichor upgrade talos --list` prints the candidates the controller recorded,
// grouped, the default marked; `ichor upgrade talos VERSION` refuses a
// downgrade and a second upgrade while one is unfinished (nothing written),
// and otherwise sets spec.talosVersion (the controller starts the operation).
func TestUpgradeTalos(t *testing.T) {
	ns := namespace(t, "upgrade-talos")
	c := newCluster(ns, "prod")
	must(t, k8s.Create(context.Background(), c))

	mustSucceed(t, ichor(t, "upgrade", "talos", "--list", "-n", ns)) // not read yet: says so

	checked := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c.Status.TalosUpgrade = ichorv1alpha1.TalosUpgradeStatus{
		Source: "https://factory.talos.dev", CheckedAt: &checked, Version: "v1.14.1",
		Candidates: []ichorv1alpha1.VersionCandidate{
			{Version: "v1.14.3", Group: ichorv1alpha1.CandidatePatch, Default: true},
			{Version: "v1.14.2", Group: ichorv1alpha1.CandidatePatch},
		},
	}
	must(t, k8s.Status().Update(context.Background(), c))

	out := mustSucceed(t, ichor(t, "upgrade", "talos", "--list", "-n", ns)).stdout
	if !strings.Contains(out, "GROUP") || !strings.Contains(out, "v1.14.3") || !strings.Contains(out, "*") ||
		strings.Index(out, "v1.14.3") > strings.Index(out, "v1.14.2") {
		t.Fatalf("--list printed:\n%s", out)
	}

	mustFail(t, ichor(t, "upgrade", "talos", "-n", ns, "-y"), "needs a VERSION", "the default is v1.14.3")
	mustFail(t, ichor(t, "upgrade", "talos", "v1.14.0", "-n", ns, "-y"), "spec.talosVersion", "downgrade", "nothing was changed")

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "talos-running"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationTalos,
			Talos: &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"}},
	}
	createOperation(t, op)
	mustFail(t, ichor(t, "upgrade", "talos", "v1.14.3", "-n", ns, "-y"), "talos-running", "has not finished")
	if got := getTalosVersion(t, ns); got != "v1.14.1" {
		t.Fatalf("a refused upgrade wrote spec.talosVersion %s", got)
	}

	must(t, k8s.Delete(context.Background(), op))
	mustSucceed(t, ichor(t, "upgrade", "talos", "v1.14.3", "-n", ns, "-y"))
	if got := getTalosVersion(t, ns); got != "v1.14.3" {
		t.Fatalf("spec.talosVersion %s after the upgrade", got)
	}
}

func getTalosVersion(t *testing.T, ns string) string {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "prod"}, c))
	return c.Spec.TalosVersion
}

// `ichor upgrade kubernetes --list` prints the Kubernetes candidates;
// `ichor upgrade kubernetes VERSION` counts one minor up from what the
// machines run (status.kubernetesUpgrade.version), refuses a second upgrade
// while one is unfinished (nothing written), and otherwise sets
// spec.kubernetesVersion; `ichor operation resume --override` sets the
// override of the operation's type with the resume, and only on a failed step.
func TestUpgradeKubernetes(t *testing.T) {
	ns := namespace(t, "upgrade-k8s")
	c := newCluster(ns, "prod")
	c.Spec.KubernetesVersion = "1.36.3"
	must(t, k8s.Create(context.Background(), c))

	checked := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	c.Status.KubernetesUpgrade = ichorv1alpha1.KubernetesUpgradeStatus{
		Source: "https://ghcr.io", CheckedAt: &checked, Version: "1.35.9",
		Candidates: []ichorv1alpha1.VersionCandidate{
			{Version: "v1.37.2", Group: ichorv1alpha1.CandidateRecommended},
			{Version: "v1.36.4", Group: ichorv1alpha1.CandidatePatch, Default: true},
		},
	}
	must(t, k8s.Status().Update(context.Background(), c))

	out := mustSucceed(t, ichor(t, "upgrade", "kubernetes", "--list", "-n", ns)).stdout
	if !strings.Contains(out, "Kubernetes candidates") || !strings.Contains(out, "running 1.35.9") || !strings.Contains(out, "v1.36.4") ||
		strings.Index(out, "v1.37.2") > strings.Index(out, "v1.36.4") {
		t.Fatalf("--list printed:\n%s", out)
	}

	mustFail(t, ichor(t, "upgrade", "kubernetes", "-n", ns, "-y"), "needs a VERSION", "the default is v1.36.4")
	// The machines run 1.35.9: 1.37 is two minors up, whatever the spec says.
	mustFail(t, ichor(t, "upgrade", "kubernetes", "1.37.2", "-n", ns, "-y"), "spec.kubernetesVersion", "skips a minor", "nothing was changed")

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "k8s-running"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationKubernetes,
			Kubernetes: &ichorv1alpha1.KubernetesUpgrade{Version: "1.36.3"}},
	}
	createOperation(t, op)
	mustFail(t, ichor(t, "upgrade", "kubernetes", "1.36.4", "-n", ns, "-y"), "k8s-running", "has not finished")

	if got := getKubernetesVersion(t, ns); got != "1.36.3" {
		t.Fatalf("a refused upgrade wrote spec.kubernetesVersion %s", got)
	}

	// Paused on its pre-checks: resume with the override.
	op.Status = ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationPaused, FailedStep: ichorv1alpha1.KubernetesStagePreCheck,
		FailureReason: "APIs that Kubernetes v1.36.3 removes are in use", Overridable: true}
	must(t, k8s.Status().Update(context.Background(), op))
	mustSucceed(t, ichor(t, "operation", "resume", "k8s-running", "--override", "-n", ns))

	got := &ichorv1alpha1.TalosOperation{}
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(op), got))

	if tok := got.Annotations[ichorv1alpha1.OverrideRemovedAPIsAnnotation]; tok == "" || tok != got.Annotations[ichorv1alpha1.ResumeAnnotation] {
		t.Fatalf("annotations after resume --override: %v", got.Annotations)
	}

	must(t, k8s.Delete(context.Background(), op))
	mustSucceed(t, ichor(t, "upgrade", "kubernetes", "v1.36.4", "-n", ns, "-y"))

	if got := getKubernetesVersion(t, ns); got != "1.36.4" {
		t.Fatalf("spec.kubernetesVersion %s after the upgrade", got)
	}

	talos := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "talos-paused"},
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationTalos,
			Talos: &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"}},
	}
	createOperation(t, talos)
	talos.Status = ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationPaused, FailedStep: "upgrade", FailureReason: "x"}
	must(t, k8s.Status().Update(context.Background(), talos))
	mustFail(t, ichor(t, "operation", "resume", "talos-paused", "--override", "-n", ns), "did not stop at one", "nothing was changed")

	// Stopped by the drain capacity check: the override of any other type
	// is the drain capacity annotation.
	talos.Status = ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationPaused, FailedStep: "drain",
		FailureReason: "a cluster of three control planes and no worker is checked before each drain", Overridable: true}
	must(t, k8s.Status().Update(context.Background(), talos))
	mustSucceed(t, ichor(t, "operation", "resume", "talos-paused", "--override", "-n", ns))

	got = &ichorv1alpha1.TalosOperation{}
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(talos), got))

	if tok := got.Annotations[ichorv1alpha1.OverrideDrainCapacityAnnotation]; tok == "" || tok != got.Annotations[ichorv1alpha1.ResumeAnnotation] ||
		got.Annotations[ichorv1alpha1.OverrideRemovedAPIsAnnotation] != "" {
		t.Fatalf("annotations after resume --override of a talos operation: %v", got.Annotations)
	}
}

func getKubernetesVersion(t *testing.T, ns string) string {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "prod"}, c))
	return c.Spec.KubernetesVersion
}
