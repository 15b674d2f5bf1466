package installer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installer"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestInstallerInstalls: on a cluster Ichor was never installed in, the
// installer applies everything, waits for the controller and ichor-ui with
// two replicas and PodDisruptionBudgets (two schedulable nodes), creates the
// IchorInstallation and records the installed version; a second run (an
// upgrade to another version) snapshots what the first installed.
func TestInstallerInstalls(t *testing.T) {
	reset(t)

	log, err := runInstaller(t, installer.Options{Version: "v0.1.0+abc1234"})
	if err != nil {
		t.Fatalf("a fresh install failed: %v", err)
	}

	mustContain(t, "the log", log,
		"installing Ichor v0.1.0 into namespace ichor-system",
		"[1/9] installer RBAC: applying Namespace ichor-system, ServiceAccount ichor-installer",
		"[2/9] CRD check: 0 of 11 CRDs are installed; every change is additive",
		"[3/9] snapshot: 0 objects of no previous version saved in ConfigMap ichor-system/ichor-installer-snapshot",
		"[4/9] CRDs: applying 11 CustomResourceDefinitions", "the CRDs are Established",
		"created IchorInstallation ichor (version v0.1.0, managed by ichor)",
		"[5/9] controller: 2 schedulable nodes: 2 replicas with a PodDisruptionBudget", "Deployment ichor-controller is available (2/2)",
		"[6/9] ichor-ui: 2 schedulable nodes: 2 replicas with a PodDisruptionBudget", "Deployment ichor-ui is available (2/2)",
		"[7/9] network policies: skipped, the API server does not serve cilium.io/v2 CiliumNetworkPolicy (CRD ciliumnetworkpolicies.cilium.io): ichor-system is not isolated by the installer",
		"[8/9] post-checks: the webhook Service has ready endpoints", "Service ichor-webhook has ",
		"[9/9] IchorInstallation ichor: installedVersion v0.1.0",
		"done: Ichor v0.1.0 is installed in ichor-system")

	// The post-check waits for one ready endpoint; the second replica's may
	// not be in the EndpointSlice yet when it looks.
	if !regexp.MustCompile(`Service ichor-webhook has [1-9][0-9]* ready endpoint\(s\)`).MatchString(log) {
		t.Fatalf("the post-check did not report a ready webhook endpoint:\n%s", log)
	}

	for _, name := range []string{install.ControllerName, install.UIName} {
		d := deployment(t, name)
		if *d.Spec.Replicas != 2 || d.Status.AvailableReplicas != 2 {
			t.Fatalf("Deployment %s: %d replicas, %d available", name, *d.Spec.Replicas, d.Status.AvailableReplicas)
		}

		if !pdbExists(t, name) {
			t.Fatalf("no PodDisruptionBudget %s with two schedulable nodes", name)
		}
	}

	ii := installation(t)
	c := apimeta.FindStatusCondition(ii.Status.Conditions, ichorv1alpha1.InstalledCondition)

	if ii.Spec.Version.Version != "v0.1.0" || ii.Spec.Deployment.Manager != ichorv1alpha1.ManagerIchor || ii.Status.InstalledVersion != "v0.1.0" ||
		c == nil || c.Status != metav1.ConditionTrue || c.Reason != ichorv1alpha1.InstallSucceededReason || ii.Status.FailureReason != "" {
		t.Fatalf("IchorInstallation: spec %+v, status %+v", ii.Spec, ii.Status)
	}

	// The create-only ClusterRole: the controller's rules survive a run.
	role := &unstructured.Unstructured{}
	role.SetAPIVersion("rbac.authorization.k8s.io/v1")
	role.SetKind("ClusterRole")
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Name: "ichor-ui-impersonate-users"}, role))

	rules := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"users"}, "verbs": []any{"impersonate"}, "resourceNames": []any{"ichor:alice"}}}
	testenv.Must(t, unstructured.SetNestedSlice(role.Object, rules, "rules"))
	testenv.Must(t, k8s.Update(t.Context(), role))

	// An upgrade: the snapshot holds what v0.1.0 installed.
	log, err = runInstaller(t, installer.Options{Version: "v0.2.0"})
	if err != nil {
		t.Fatalf("the upgrade failed: %v", err)
	}

	mustContain(t, "the upgrade's log", log, "[2/9] CRD check: 11 of 11 CRDs are installed; every change is additive",
		"objects of v0.1.0 saved in ConfigMap", "done: Ichor v0.2.0 is installed")

	if ii := installation(t); ii.Status.InstalledVersion != "v0.2.0" || ii.Spec.Version.Version != "v0.1.0" {
		t.Fatalf("after the upgrade: spec.version %s (the installer never writes it), installed %s", ii.Spec.Version.Version, ii.Status.InstalledVersion)
	}

	cm := &corev1.ConfigMap{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: installer.SnapshotName}, cm))

	snap, err := install.Parse([]byte(cm.Data["objects.yaml"]))
	testenv.Must(t, err)

	kinds := map[string]bool{}
	for _, o := range snap {
		kinds[o.GetKind()+"/"+o.GetName()] = true

		if o.GetResourceVersion() != "" || o.Object["status"] != nil || len(o.GetManagedFields()) > 0 {
			t.Fatalf("the snapshot keeps server state: %s %s", o.GetKind(), o.GetName())
		}

		if o.GetKind() == "CustomResourceDefinition" || o.GetName() == install.InstallerName ||
			o.GetKind() == "ClusterRole" && o.GetName() == "ichor-ui-impersonate-users" {
			t.Fatalf("the snapshot holds %s %s, which a rollback never restores", o.GetKind(), o.GetName())
		}
	}

	if cm.Data["version"] != "v0.1.0" || cm.Annotations["ichor.maesh.dev/snapshot-state"] != "released" || len(snap) < 25 ||
		!kinds["Deployment/ichor-controller"] || !kinds["Deployment/ichor-ui"] || !kinds["ValidatingWebhookConfiguration/ichor-validating-webhook"] {
		t.Fatalf("snapshot of %s (%s), %d objects: %v", cm.Data["version"], cm.Annotations["ichor.maesh.dev/snapshot-state"], len(snap), kinds)
	}

	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Name: "ichor-ui-impersonate-users"}, role))

	if got, _, _ := unstructured.NestedSlice(role.Object, "rules"); fmt.Sprint(got) != fmt.Sprint(rules) {
		t.Fatalf("the installer rewrote the controller's ClusterRole ichor-ui-impersonate-users: %v", got)
	}
}

// TestInstallerRollback: a refused CRD change applies nothing and leaves the
// previous Ichor as it was; a Deployment that never becomes available (its
// pods cannot be scheduled) is rolled back to the snapshot, the previous
// Deployments run again, and the reason is in the log and the
// IchorInstallation's status. The second case runs the built binary with a
// kubeconfig, as a Job would run it.
func TestInstallerRollback(t *testing.T) {
	installed(t, "v0.1.0")

	t.Run("RefusedCRDChange", func(t *testing.T) {
		before := versions(t)

		data := manifestWith(t, func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			crd := find(t, objs, "CustomResourceDefinition", "talosmachines.ichor.maesh.dev")
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			props, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "install", "properties")
			delete(props, "disk")
			testenv.Must(t, unstructured.SetNestedMap(versions[0].(map[string]any), props, "schema", "openAPIV3Schema", "properties", "spec", "properties", "install", "properties"))
			testenv.Must(t, unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"))

			// A change the refusal must keep out too.
			setPodAnnotation(t, find(t, objs, "Deployment", install.ControllerName), "v0.2.0")

			return objs
		})

		log, err := runInstaller(t, installer.Options{Version: "v0.2.0", Manifest: data, ManifestSource: "a manifest that drops a field"})
		if err == nil {
			t.Fatal("a CRD change that drops a stored field was installed")
		}

		mustContain(t, "the log", log, "[2/9] CRD check: 11 of 11 CRDs are installed; 1 change(s) are not additive",
			"FAILED at CRD check", "talosmachines.ichor.maesh.dev v1alpha1 .spec.install.disk: removed",
			"nothing of Ichor was changed (only the installer's own RBAC was applied); the installed Ichor (v0.1.0) is left as it was",
			"IchorInstallation ichor: Installed=False, reason Refused")

		if strings.Contains(log, "[3/9]") {
			t.Fatal("the installer went on after the refusal")
		}

		if after := versions(t); after != before {
			t.Fatalf("a refused install changed objects:\nbefore %s\nafter  %s", before, after)
		}

		ii := installation(t)
		c := apimeta.FindStatusCondition(ii.Status.Conditions, ichorv1alpha1.InstalledCondition)

		if ii.Status.InstalledVersion != "v0.1.0" || c == nil || c.Status != metav1.ConditionFalse || c.Reason != ichorv1alpha1.RefusedReason ||
			!strings.Contains(ii.Status.FailureReason, ".spec.install.disk: removed") {
			t.Fatalf("IchorInstallation status after the refusal: %+v", ii.Status)
		}
	})

	t.Run("UnavailableDeployment", func(t *testing.T) {
		var log string

		binary := buildInstaller(t, "v0.2.0")

		data := manifestWith(t, func(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
			// The controller changes (and must be rolled back too), ichor-ui
			// cannot be scheduled anywhere, and a new object appears (and
			// must be deleted).
			setPodAnnotation(t, find(t, objs, "Deployment", install.ControllerName), "v0.2.0")
			ui := find(t, objs, "Deployment", install.UIName)
			testenv.Must(t, unstructured.SetNestedStringMap(ui.Object, map[string]string{"ichor.test/nowhere": "true"}, "spec", "template", "spec", "nodeSelector"))

			extra := &unstructured.Unstructured{}
			extra.SetAPIVersion("v1")
			extra.SetKind("ConfigMap")
			extra.SetNamespace(ns)
			extra.SetName("ichor-controller-extra")

			return append(objs, extra)
		})

		path := filepath.Join(t.TempDir(), "manifest.yaml")
		testenv.Must(t, os.WriteFile(path, data, 0o600))

		cmd := exec.CommandContext(t.Context(), binary, "--kubeconfig", installerKubeconfig(t), "--manifest", path, //nolint:gosec // the binary this test built
			"--wait-timeout", "30s", "--skip-webhook-refusal-check")

		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		log = out.String()
		t.Logf("ichor-installer:\n%s", log)

		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
			t.Fatalf("the installer exited with %v, want 1", err)
		}

		mustContain(t, "the log", log,
			"installing Ichor v0.2.0 into namespace ichor-system from "+path,
			"objects of v0.1.0 saved in ConfigMap",
			"Deployment ichor-controller is available",
			"[6/9] ichor-ui: 0 schedulable nodes: 1 replica, no PodDisruptionBudget",
			"deleted PodDisruptionBudget ichor-ui",
			"FAILED at ichor-ui: Deployment ichor-ui did not become available within 30s",
			"not scheduled: 0/2 nodes are available",
			fmt.Sprintf("rolling back to v0.1.0: applying the %d objects of the snapshot again, deleting 1 object(s) the snapshot does not have", restorable(t)),
			"deleted ConfigMap ichor-controller-extra",
			"rollback: waiting up to 30s for Deployment ichor-controller",
			"rolled back: v0.1.0 runs again",
			"IchorInstallation ichor: Installed=False, reason RolledBack",
			"ichor-installer: installing Ichor v0.2.0 failed at ichor-ui and was rolled back (v0.1.0 runs)")

		for _, name := range []string{install.ControllerName, install.UIName} {
			d := deployment(t, name)
			if ok, why := available(d); !ok || *d.Spec.Replicas != 2 || d.Spec.Template.Spec.NodeSelector != nil ||
				d.Spec.Template.Annotations["ichor.test/version"] != "" {
				t.Fatalf("Deployment %s after the rollback: %s, %d replicas, nodeSelector %v, annotations %v", name, why,
					*d.Spec.Replicas, d.Spec.Template.Spec.NodeSelector, d.Spec.Template.Annotations)
			}

			if !pdbExists(t, name) {
				t.Fatalf("the rollback did not restore PodDisruptionBudget %s", name)
			}
		}

		// Everything v0.1.0 installed is there again.
		objs, err := install.Objects()
		testenv.Must(t, err)

		for _, o := range objs {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())

			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(o), cur); err != nil {
				t.Errorf("after the rollback, %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}

		err = k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "ichor-controller-extra"}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("the object the failed install created is still there: %v", err)
		}

		ii := installation(t)
		c := apimeta.FindStatusCondition(ii.Status.Conditions, ichorv1alpha1.InstalledCondition)

		if ii.Status.InstalledVersion != "v0.1.0" || c == nil || c.Status != metav1.ConditionFalse || c.Reason != ichorv1alpha1.RolledBackReason ||
			!strings.Contains(c.Message, "Ichor v0.2.0 failed and was rolled back; v0.1.0 runs") ||
			!strings.Contains(ii.Status.FailureReason, "ichor-ui: Deployment ichor-ui did not become available within 30s") ||
			!strings.Contains(ii.Status.FailureReason, "didn't match Pod's node affinity/selector") {
			t.Fatalf("IchorInstallation status after the rollback: %+v", ii.Status)
		}

		// A run that finds a snapshot an unfinished run left keeps it (what
		// runs may be half of that run's install); a good install
		// afterwards succeeds and clears the failure.
		testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: installer.SnapshotName}, cm); err != nil {
				return err
			}

			cm.Annotations["ichor.maesh.dev/snapshot-state"] = "taken"

			return k8s.Update(t.Context(), cm)
		}))

		log, err = runInstaller(t, installer.Options{Version: "v0.2.0"})
		if err != nil {
			t.Fatal(err)
		}

		mustContain(t, "the log", log, "[3/9] snapshot: an earlier run (of v0.2.0) did not finish; keeping its snapshot of v0.1.0")

		if ii := installation(t); ii.Status.InstalledVersion != "v0.2.0" || ii.Status.FailureReason != "" ||
			!apimeta.IsStatusConditionTrue(ii.Status.Conditions, ichorv1alpha1.InstalledCondition) {
			t.Fatalf("after a good install: %+v", ii.Status)
		}
	})
}

// TestInstallerSingleNode: with one node that can run Ichor's pods (the
// worker carries a taint they do not tolerate), the installer installs one
// replica of each and no PodDisruptionBudget, deleting the ones a
// two-node install left.
func TestInstallerSingleNode(t *testing.T) {
	installed(t, "v0.1.0")

	for _, name := range []string{install.ControllerName, install.UIName} {
		if !pdbExists(t, name) {
			t.Fatalf("no PodDisruptionBudget %s before the test", name)
		}
	}

	taint := corev1.Taint{Key: "ichor.test/dedicated", Value: "other", Effect: corev1.TaintEffectNoSchedule}
	setTaints(t.Context(), t, worker, func(ts []corev1.Taint) []corev1.Taint { return append(ts, taint) })
	t.Cleanup(func() {
		setTaints(context.Background(), t, worker, func(ts []corev1.Taint) []corev1.Taint {
			var out []corev1.Taint

			for _, x := range ts {
				if x.Key != taint.Key {
					out = append(out, x)
				}
			}

			return out
		})
	})

	log, err := runInstaller(t, installer.Options{Version: "v0.1.1"})
	if err != nil {
		t.Fatal(err)
	}

	mustContain(t, "the log", log,
		"[5/9] controller: 1 schedulable node: 1 replica, no PodDisruptionBudget", "deleted PodDisruptionBudget ichor-controller",
		"Deployment ichor-controller is available (1/1)",
		"[6/9] ichor-ui: 1 schedulable node: 1 replica, no PodDisruptionBudget", "deleted PodDisruptionBudget ichor-ui",
		"Deployment ichor-ui is available (1/1)", "done: Ichor v0.1.1 is installed")

	for _, name := range []string{install.ControllerName, install.UIName} {
		d := deployment(t, name)
		if ok, why := available(d); !ok || *d.Spec.Replicas != 1 {
			t.Fatalf("Deployment %s: %d replicas, %s", name, *d.Spec.Replicas, why)
		}

		if pdbExists(t, name) {
			t.Fatalf("PodDisruptionBudget %s exists on a cluster with one schedulable node", name)
		}
	}
}

// restorable counts the embedded manifest's objects a snapshot holds: the
// controller's and ichor-ui's, except the create-only ones.
func restorable(t *testing.T) int {
	t.Helper()

	objs, err := install.Objects()
	testenv.Must(t, err)

	n := 0

	for _, o := range objs {
		s := install.StepOf(o)
		if (s == install.StepController || s == install.StepUI) && o.GetAnnotations()[install.CreateOnlyAnnotation] != "true" {
			n++
		}
	}

	return n
}

func deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()

	d := &appsv1.Deployment{}
	testenv.Must(t, k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, d))

	return d
}

// available waits a little for a Deployment the installer reported
// available to be so (its status is the Deployment controller's).
func available(d *appsv1.Deployment) (bool, string) {
	want := *d.Spec.Replicas
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want || d.Status.Replicas != want {
		return false, fmt.Sprintf("generation %d/%d, %d updated, %d available, %d total",
			d.Status.ObservedGeneration, d.Generation, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.Replicas)
	}

	return true, "available"
}

func pdbExists(t *testing.T, name string) bool {
	t.Helper()

	err := k8s.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &policyv1.PodDisruptionBudget{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	return err == nil
}

func setTaints(ctx context.Context, t *testing.T, node string, f func([]corev1.Taint) []corev1.Taint) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return err
		}

		n.Spec.Taints = f(n.Spec.Taints)

		return k8s.Update(ctx, n)
	}))
}

// versions is every manifest object's resourceVersion (a Deployment's
// generation: its status moves on its own), as one string to compare.
func versions(t *testing.T) string {
	t.Helper()

	objs, err := install.Objects()
	testenv.Must(t, err)

	var b strings.Builder

	for _, o := range objs {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(o.GroupVersionKind())

		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(o), cur); err != nil {
			fmt.Fprintf(&b, "%s/%s:%v ", o.GetKind(), o.GetName(), apierrors.ReasonForError(err))

			continue
		}

		v := cur.GetResourceVersion()
		if o.GetKind() == "Deployment" || o.GetKind() == "Namespace" || o.GetKind() == "CustomResourceDefinition" {
			v = fmt.Sprint(cur.GetGeneration())
		}

		fmt.Fprintf(&b, "%s/%s:%s ", o.GetKind(), o.GetName(), v)
	}

	return b.String()
}

// manifestWith is the embedded manifest changed by edit.
func manifestWith(t *testing.T, edit func([]*unstructured.Unstructured) []*unstructured.Unstructured) []byte {
	t.Helper()

	objs, err := install.Objects()
	testenv.Must(t, err)

	var b bytes.Buffer

	for i, o := range edit(objs) {
		if i > 0 {
			b.WriteString("---\n")
		}

		y, err := yaml.Marshal(o.Object)
		testenv.Must(t, err)
		b.Write(y)
	}

	return b.Bytes()
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()

	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}

	t.Fatalf("no %s %s in the manifest", kind, name)

	return nil
}

func setPodAnnotation(t *testing.T, d *unstructured.Unstructured, version string) {
	t.Helper()

	testenv.Must(t, unstructured.SetNestedStringMap(d.Object, map[string]string{"ichor.test/version": version}, "spec", "template", "metadata", "annotations"))
}

// buildInstaller builds cmd/ as the release version would be built.
func buildInstaller(t *testing.T, version string) string {
	t.Helper()

	out := filepath.Join(t.TempDir(), "ichor-installer")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, //nolint:gosec // fixed arguments
		"-ldflags", "-X github.com/maeshinshin/ichor/contracts/pkg/version.version="+version, "../../cmd")

	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}

	return out
}

// TestInstallerIchorUsers: --ui-url installs ichor-ui as the issuer of
// Ichor's own users at that URL, with two replicas and their
// PodDisruptionBudget on two nodes (the replicas share the sessions and the
// signing key the controller keeps), and records the URL on the
// IchorInstallation; a later run without the flag keeps both; a bad URL is
// refused before anything is written.
func TestInstallerIchorUsers(t *testing.T) {
	installed(t, "v0.0.9")

	const url = "https://127.0.0.1:18443"

	if _, err := runInstaller(t, installer.Options{Version: "v0.1.1", UIURL: "http://" + strings.TrimPrefix(url, "https://")}); err == nil ||
		!strings.Contains(err.Error(), "--ui-url") || !strings.Contains(err.Error(), "https URL") {
		t.Fatalf("a plain-http --ui-url: %v", err)
	}

	if v := installation(t).Status.InstalledVersion; v != "v0.0.9" {
		t.Fatalf("the refused run changed the installed version to %s", v)
	}

	check := func(run string) {
		t.Helper()

		d := deployment(t, install.UIName)
		args := d.Spec.Template.Spec.Containers[0].Args

		if !slices.Contains(args, "--ichor-users") || !slices.Contains(args, "--issuer="+url) {
			t.Fatalf("%s: ichor-ui's args %q name no --ichor-users --issuer=%s", run, args, url)
		}

		if !slices.Contains(args, "--signing-key-file=/etc/ichor-ui/signing/signing.key") {
			t.Fatalf("%s: ichor-ui's args %q name no shared signing key", run, args)
		}

		if ok, why := available(d); !ok || *d.Spec.Replicas != 2 {
			t.Fatalf("%s: Deployment ichor-ui: %d replicas, %s; want 2 available", run, *d.Spec.Replicas, why)
		}

		if !pdbExists(t, install.UIName) {
			t.Fatalf("%s: no PodDisruptionBudget ichor-ui for two issuer replicas", run)
		}

		if got := installation(t).Annotations[install.UIURLAnnotation]; got != url {
			t.Fatalf("%s: IchorInstallation annotation %s = %q, want %q", run, install.UIURLAnnotation, got, url)
		}
	}

	// A fresh install: the installer creates the IchorInstallation with the
	// URL. (Changing the URL of an existing one is a patch the admission
	// webhook checks; this suite's controller pods are kwok's and serve none.)
	reset(t)

	log, err := runInstaller(t, installer.Options{Version: "v0.1.1", UIURL: url})
	if err != nil {
		t.Fatal(err)
	}

	mustContain(t, "the log", log, "recorded ichor-ui's URL "+url, "ichor-ui signs in Ichor's own users as the issuer at "+url,
		"[6/9] ichor-ui: 2 schedulable nodes: 2 replicas with a PodDisruptionBudget")
	check("with --ui-url")

	if _, err := runInstaller(t, installer.Options{Version: "v0.1.2"}); err != nil {
		t.Fatal(err)
	}

	check("the next run without --ui-url")
}
