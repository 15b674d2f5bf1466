package main

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage/imagetest"
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

// installation creates the IchorInstallation (a singleton, deleted when the
// test ends) managed by manager, with installed recorded.
func installation(t *testing.T, manager, installed string) {
	t.Helper()
	ctx := context.Background()
	inst := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: installed},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: manager},
		},
	}
	must(t, k8s.Create(ctx, inst))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), inst) })
	inst.Status.InstalledVersion = installed
	must(t, k8s.Status().Update(ctx, inst))
}

func ichorOperations(t *testing.T, ns string) []ichorv1alpha1.TalosOperation {
	t.Helper()
	ops := &ichorv1alpha1.TalosOperationList{}
	must(t, k8s.List(context.Background(), ops, client.InNamespace(ns)))
	var out []ichorv1alpha1.TalosOperation
	for _, op := range ops.Items {
		if op.Spec.Type == ichorv1alpha1.OperationIchor {
			out = append(out, op)
		}
	}
	return out
}

// `ichor upgrade ichor VERSION` refuses, with nothing created, an Ichor Helm
// manages, a downgrade and a skipped minor, each saying what to do instead;
// otherwise it creates the ichor operation the controller runs, with the
// pinned digest and the signature skip when asked (the skip warned about).
// Without VERSION it names this ichor's own release (v0.4.0 here).
func TestUpgradeIchor(t *testing.T) {
	ns := namespace(t, "upgrade-ichor")
	must(t, k8s.Create(context.Background(), newCluster(ns, "prod")))

	t.Run("helm", func(t *testing.T) {
		installation(t, ichorv1alpha1.ManagerHelm, "v0.3.2")
		mustFail(t, ichor(t, "upgrade", "ichor", "v0.4.0", "-n", ns, "-y"),
			"Upgrading Ichor to v0.4.0 is refused; nothing was changed", "installed with Helm", "spec.deployment.manager: helm", "`helm upgrade`")
	})

	t.Run("ichor", func(t *testing.T) {
		installation(t, ichorv1alpha1.ManagerIchor, "v0.3.2")
		mustFail(t, ichor(t, "upgrade", "ichor", "v0.3.1", "-n", ns, "-y"),
			"spec.ichor.version", "v0.3.1 is older than the installed Ichor v0.3.2", "never downgrades", "choose v0.3.2 or a newer release")
		mustFail(t, ichor(t, "upgrade", "ichor", "v0.5.0", "-n", ns, "-y"),
			"spec.ichor.version", "skips a minor release", "upgrade to the newest v0.4.x first")
		mustFail(t, ichor(t, "upgrade", "ichor", "v0.4.0", "--installer-digest", "sha256:abc", "-n", ns, "-y"),
			"--installer-digest", "64 lowercase hex", "nothing was changed")
		if ops := ichorOperations(t, ns); len(ops) != 0 {
			t.Fatalf("refused upgrades created %d operations", len(ops))
		}

		out := mustSucceed(t, ichor(t, "upgrade", "ichor", "-n", ns, "-y"))
		if !strings.Contains(out.stdout, "Started operation ichor-v0-4-0-") {
			t.Fatalf("upgrade printed:\n%s", out.all())
		}
		digest := "sha256:" + strings.Repeat("0a", 32)
		out = mustSucceed(t, ichor(t, "upgrade", "ichor", "v0.4.1", "--installer-digest", digest, "--skip-signature-check", "-n", ns, "-y"))
		if !strings.Contains(out.stderr, "WITHOUT its signature checked") {
			t.Fatalf("the signature skip was not warned about:\n%s", out.all())
		}

		got := map[string]ichorv1alpha1.IchorUpgrade{}
		for _, op := range ichorOperations(t, ns) {
			if op.Spec.ClusterName != "prod" {
				t.Errorf("operation %s is of cluster %q", op.Name, op.Spec.ClusterName)
			}
			got[op.Spec.Ichor.Version] = *op.Spec.Ichor
		}
		if len(got) != 2 || got["v0.4.0"] != (ichorv1alpha1.IchorUpgrade{Version: "v0.4.0"}) ||
			got["v0.4.1"] != (ichorv1alpha1.IchorUpgrade{Version: "v0.4.1", InstallerDigest: digest, InstallerSignature: "skip"}) {
			t.Fatalf("the ichor operations: %+v", got)
		}
	})

	// --local checks what the operation checks, here, before anything is
	// applied: an unsigned image is refused, the signature check cannot be
	// skipped (a skip is recorded only on an operation), and --wait does not
	// apply; nothing is changed and no operation is created. (An image
	// without a manifest: installerimage's TestManifest; e2e
	// TestSelfUpgradeRollback runs a --local upgrade to its end.)
	t.Run("local", func(t *testing.T) {
		ctx := context.Background()
		installation(t, ichorv1alpha1.ManagerIchor, "v0.3.2")

		reg := imagetest.NewWorld(t, true)
		reg.Push("v0.4.0")

		inst := &ichorv1alpha1.IchorInstallation{}
		must(t, k8s.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst))
		inst.Spec.Version.InstallerRepository = reg.Repo.Name()
		must(t, k8s.Update(ctx, inst))

		ops := len(ichorOperations(t, ns))

		mustFail(t, ichor(t, "upgrade", "ichor", "v0.4.0", "--local", "--wait", "-n", ns, "-y"), "--local and --wait do not go together", "nothing was changed")
		mustFail(t, ichor(t, "upgrade", "ichor", "v0.4.0", "--local", "-n", ns, "-y"), "is not signed", "nothing was changed")
		mustFail(t, ichor(t, "upgrade", "ichor", "v0.4.0", "--local", "--skip-signature-check", "-n", ns, "-y"),
			"--local never skips the signature check", "nothing was changed")

		must(t, k8s.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst))
		if inst.Status.InstalledVersion != "v0.3.2" || len(ichorOperations(t, ns)) != ops {
			t.Fatalf("a refused --local upgrade changed something: installed %s, %d ichor operations (had %d)",
				inst.Status.InstalledVersion, len(ichorOperations(t, ns)), ops)
		}
	})
}
