package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

	if status[1] == "" || status[last] != "deployed" {
		t.Fatalf("Helm's records of release cilium: %q, want revision 1 (the adoption) and the last deployed", out)
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
