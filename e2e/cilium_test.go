package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestCiliumHandover: `ichor init` booted Cilium from a Talos inline
// manifest and returned only once the in-cluster controller had handed it
// over: the ichor-cni Job (the installer image's `ichor-installer cni
// apply`, run by the pod runner) installed Helm release kube-system/cilium
// over the bootstrapped objects. Helm's own record says the release is
// deployed, Cilium's objects carry the release's ownership, the DaemonSet's
// template was never changed (generation 1: no pod restarted), the
// TalosCluster says CNIHandover=True, and the control planes' configuration
// no longer carries the inline entry.
func TestCiliumHandover(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var tc struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
			} `json:"conditions"`
			CNI struct {
				ValuesHash string `json:"valuesHash"`
			} `json:"cni"`
		} `json:"status"`
	}

	// Nodes joining after init change the operator's replicas (one while
	// the cluster has one Node), which the controller applies as a second
	// revision: wait until no change is pending.
	testenv.EventuallyOK(t, 3*time.Minute, "CNIHandover=True with nothing pending", func() (bool, string) {
		if err := w.kubeJSON(ctx, &tc, "get", "taloscluster", "-n", "ichor-system", cluster); err != nil {
			return false, err.Error()
		}

		for _, c := range tc.Status.Conditions {
			if c.Type == "CNIHandover" {
				return c.Status == "True" && c.Reason == "HandoverDone" && strings.HasPrefix(c.Message, "Cilium runs as Helm release kube-system/cilium (chart") &&
					len(tc.Status.CNI.ValuesHash) == 64, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
			}
		}

		return false, "no CNIHandover condition"
	})

	if got := tc.Metadata.Annotations["ichor.maesh.dev/cni-bootstrap"]; got != "inline-manifest" {
		t.Fatalf("init did not record how Cilium was booted: annotation %q", got)
	}

	// Helm's own record (the Secrets driver's labels): revision 1 is the
	// adoption, the last one is deployed.
	if revs := w.ciliumRevisions(t, ctx); len(revs) == 0 || revs[0] == "" || revs[len(revs)-1] != "deployed" {
		t.Fatalf("Helm's records of release cilium: %v, want revision 1 (the adoption) and the last deployed", revs)
	}

	var ds struct {
		Metadata struct {
			Generation  int               `json:"generation"`
			Annotations map[string]string `json:"annotations"`
			Labels      map[string]string `json:"labels"`
		} `json:"metadata"`
	}

	if err := w.kubeJSON(ctx, &ds, "get", "daemonset", "-n", "kube-system", "cilium"); err != nil {
		t.Fatal(err)
	}

	if ds.Metadata.Annotations["meta.helm.sh/release-name"] != "cilium" || ds.Metadata.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Fatalf("DaemonSet cilium is not owned by the release: annotations %v, labels %v", ds.Metadata.Annotations, ds.Metadata.Labels)
	}

	if ds.Metadata.Generation != 1 {
		t.Fatalf("DaemonSet cilium's spec changed in the hand-over or since (generation %d): its pods were replaced", ds.Metadata.Generation)
	}

	// The control planes render no inline manifest any more.
	ms, err := w.list(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, m := range ms {
		if m.Spec.Role != "controlplane" || m.Spec.Approval.State != "approved" {
			continue
		}

		if eff := w.mustIchor(t, ctx, "config", "effective", m.Metadata.Name); strings.Contains(eff, "KubeInlineManifestConfig") || strings.Contains(eff, "inlineManifests") {
			t.Fatalf("%s's effective configuration still carries the bootstrap Cilium", m.Metadata.Name)
		}
	}
}

// The Cilium charts of the e2e world: init boots bootCilium,
// TestCiliumUpgradeAndRollback moves it to nextCilium.
const (
	bootCilium = "v1.19.3"
	nextCilium = "v1.20.2"
)

// refuseCiliumPolicy is an image policy of the workload cluster, a
// ValidatingAdmissionPolicy that refuses Cilium's DaemonSet at nextCilium:
// the upgrade's Helm run fails half-way, as it would on a cluster whose
// admission refuses the new image.
const refuseCiliumPolicy = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: e2e-refuse-cilium
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["daemonsets"]
  validations:
  - expression: "!(object.metadata.name == 'cilium' && object.spec.template.spec.containers.exists(c, c.image.contains(':` + nextCilium + `')))"
    message: "e2e image policy: Cilium ` + nextCilium + ` is not allowed in this cluster"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: e2e-refuse-cilium
spec:
  policyName: e2e-refuse-cilium
  validationActions: ["Deny"]
`

// TestCiliumUpgradeAndRollback: `ichor cni upgrade` runs a cni operation
// through the webhook, the in-cluster controller and the ichor-cni Job (the
// installer image's `ichor-installer cni apply`, run by the pod runner):
//
//  1. with an image policy refusing the new chart's DaemonSet, the Helm
//     upgrade fails and is rolled back: the operation pauses on cni-apply
//     saying so, `--wait` fails with that reason, Helm's newest record is
//     deployed at bootCilium and the DaemonSet runs bootCilium's image;
//  2. the policy removed and the operation resumed, the leading controller
//     is killed (SIGKILL, its pod force-deleted) once the resumed run's Job
//     exists; the next controller follows the same Job, the operation
//     succeeds, the DaemonSet runs nextCilium and Helm's newest record is
//     deployed; one Job per run, none repeated.
func TestCiliumUpgradeAndRollback(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	testenv.EventuallyOK(t, 5*time.Minute, "Cilium "+bootCilium+" handed over and detected", func() (bool, string) {
		var tc struct {
			Status struct {
				Conditions []struct{ Type, Status, Message string } `json:"conditions"`
				CNI        struct {
					CiliumVersion string `json:"ciliumVersion"`
				} `json:"cni"`
			} `json:"status"`
		}

		if err := w.kubeJSON(ctx, &tc, "get", "taloscluster", "-n", icNamespace, cluster); err != nil {
			return false, err.Error()
		}

		for _, c := range tc.Status.Conditions {
			if c.Type == "CNIHandover" {
				return c.Status == "True" && !strings.Contains(c.Message, "not applied yet") && tc.Status.CNI.CiliumVersion == bootCilium,
					fmt.Sprintf("%s: %s; ciliumVersion %q", c.Status, c.Message, tc.Status.CNI.CiliumVersion)
			}
		}

		return false, "no CNIHandover condition"
	})

	// 1. The refused upgrade, rolled back.
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(refuseCiliumPolicy), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := w.kubectl(ctx, "apply", "-f", policy); err != nil {
		t.Fatal(err)
	}

	removed := false
	defer func() {
		if !removed {
			_, _ = w.kubectl(context.Background(), "delete", "-f", policy, "--ignore-not-found")
		}
	}()

	testenv.EventuallyOK(t, time.Minute, "the image policy in force", func() (bool, string) {
		out, err := w.kubectl(ctx, "set", "image", "-n", "kube-system", "daemonset/cilium", "*=quay.io/cilium/cilium:"+nextCilium, "--dry-run=server")

		return err != nil && strings.Contains(err.Error(), "is not allowed in this cluster"), fmt.Sprintf("%s %v", out, err)
	})

	revisionsBefore := w.ciliumRevisions(t, ctx)

	out, err := w.ichor(ctx, "cni", "upgrade", nextCilium, "--cluster", cluster, "--yes", "--wait")
	if err == nil {
		t.Fatalf("the refused upgrade succeeded:\n%s", out)
	}

	m := regexp.MustCompile(`Started operation (\S+)\.`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("`ichor cni upgrade` did not name its operation:\n%s", out)
	}

	op := m[1]

	for _, want := range []string{"cni-apply", "rolled back: Cilium runs chart " + bootCilium + " as before", "ichor operation resume " + op} {
		if !strings.Contains(out, want) {
			t.Fatalf("the failed upgrade's output does not say %q:\n%s", want, out)
		}
	}

	if img := w.ciliumImage(t, ctx); !strings.Contains(img, ":"+bootCilium) {
		t.Fatalf("after the rollback DaemonSet cilium runs %s", img)
	}

	revs := w.ciliumRevisions(t, ctx)
	if n := len(revs); n < len(revisionsBefore)+2 || revs[n-1] != "deployed" || revs[n-2] != "failed" {
		t.Fatalf("Helm's records after the refused upgrade: %v (before %v); want the failed upgrade, then the rollback deployed", revs, revisionsBefore)
	}

	// 2. Resumed, with the leading controller killed mid-run.
	if _, err := w.kubectl(ctx, "delete", "-f", policy); err != nil {
		t.Fatal(err)
	}

	removed = true

	w.mustIchor(t, ctx, "operation", "resume", op)

	jobs := map[string]bool{}
	opJobs := func() []string {
		out, err := w.kubectl(ctx, "get", "jobs", "-n", "kube-system", "-l", "ichor.maesh.dev/operation="+op, "-o", "jsonpath={.items[*].metadata.name}")
		if err != nil {
			return nil
		}

		names := strings.Fields(out)
		for _, n := range names {
			jobs[n] = true
		}

		return names
	}

	var first []string

	testenv.EventuallyEvery(t, 3*time.Minute, 500*time.Millisecond, "the resumed run's Job", func() (bool, string) {
		first = opJobs()

		return len(jobs) == 2, fmt.Sprintf("Jobs %v", first)
	})

	leader, err := w.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	pid := w.podProcess("ichor-controller", leader)
	if pid == 0 {
		t.Fatalf("no process runs the leading controller pod %s", leader)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	if _, err := w.kubectl(ctx, "delete", "pod", "-n", icNamespace, leader, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyEvery(t, 8*time.Minute, 2*time.Second, "operation "+op+" Succeeded", func() (bool, string) {
		opJobs()

		var o struct {
			Status struct {
				Phase, FailureReason string
			} `json:"status"`
		}

		if err := w.kubeJSON(ctx, &o, "get", "talosoperation", "-n", icNamespace, op); err != nil {
			return false, err.Error()
		}

		if o.Status.FailureReason != "" {
			t.Fatalf("operation %s failed after the resume: %s", op, o.Status.FailureReason)
		}

		return o.Status.Phase == "Succeeded", o.Status.Phase
	})

	if len(jobs) != 2 {
		t.Fatalf("Jobs of operation %s: %v; want one per run (the killed controller's successor follows the same Job)", op, jobs)
	}

	if img := w.ciliumImage(t, ctx); !strings.Contains(img, ":"+nextCilium) {
		t.Fatalf("after the upgrade DaemonSet cilium runs %s", img)
	}

	if revs := w.ciliumRevisions(t, ctx); revs[len(revs)-1] != "deployed" {
		t.Fatalf("Helm's records after the upgrade: %v", revs)
	}

	t.Logf("killed leader %s mid-upgrade; Jobs %v", leader, jobs)
}

// ciliumRevisions are the statuses of release cilium's records (the Secrets
// driver's labels), oldest first.
func (w *world) ciliumRevisions(t *testing.T, ctx context.Context) []string {
	t.Helper()

	out, err := w.kubectl(ctx, "get", "secret", "-n", "kube-system", "-l", "owner=helm,name=cilium",
		"-o", "jsonpath={range .items[*]}{.metadata.labels.version}={.metadata.labels.status}{\"\\n\"}{end}")
	if err != nil {
		t.Fatal(err)
	}

	status := map[int]string{}
	last := 0

	for _, rec := range strings.Fields(out) {
		v, st, _ := strings.Cut(rec, "=")
		n, _ := strconv.Atoi(v)
		status[n], last = st, max(last, n)
	}

	revs := make([]string, 0, last)
	for i := 1; i <= last; i++ {
		revs = append(revs, status[i])
	}

	return revs
}

// ciliumImage is the image of DaemonSet cilium's agent container.
func (w *world) ciliumImage(t *testing.T, ctx context.Context) string {
	t.Helper()

	out, err := w.kubectl(ctx, "get", "daemonset", "-n", "kube-system", "cilium", "-o", `jsonpath={.spec.template.spec.containers[?(@.name=="cilium-agent")].image}`)
	if err != nil {
		t.Fatal(err)
	}

	return out
}
