package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
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
