package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestKubeProxySwitch switches the scenario cluster's kube-proxy replaced →
// enabled → replaced with `ichor cni kube-proxy MODE --wait`, the in-cluster
// controller running the operation and the real ichor-cni Job (the
// installer image's Helm run, through the pod runner), and watches the
// cluster all along for the order:
//
//   - to enabled, Cilium's kube-proxy-replacement is never false while
//     Talos's kube-proxy DaemonSet is missing or not rolled out;
//   - to replaced, Talos's side (status.cni.kubeProxy) never moves while
//     Cilium's kube-proxy-replacement is not true, and Talos's kube-proxy is
//     never gone while Talos's side still renders it; afterwards its
//     DaemonSet, ServiceAccount and ClusterRoleBinding are deleted and
//     Talos's inventory no longer records them.
//
// A direct edit of spec.cni.kubeProxy is refused at admission, naming the
// command.
func TestKubeProxySwitch(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	type facts struct {
		kpr, recorded string
		proxy, ready  bool
	}

	read := func() (facts, error) {
		var f facts

		out, err := w.kubectl(ctx, "get", "configmap", "-n", "kube-system", "cilium-config", "-o", "jsonpath={.data.kube-proxy-replacement}")
		if err != nil {
			return f, err
		}

		f.kpr = strings.TrimSpace(out)

		if f.recorded, err = w.kubectl(ctx, "get", "taloscluster", "-n", icNamespace, cluster, "-o", "jsonpath={.status.cni.kubeProxy}"); err != nil {
			return f, err
		}

		var ds struct {
			Status struct {
				Desired   int `json:"desiredNumberScheduled"`
				Updated   int `json:"updatedNumberScheduled"`
				Available int `json:"numberAvailable"`
			} `json:"status"`
		}

		err = w.kubeJSON(ctx, &ds, "get", "daemonset", "-n", "kube-system", "kube-proxy")
		switch {
		case err == nil:
			f.proxy = true
			f.ready = ds.Status.Desired > 0 && ds.Status.Updated == ds.Status.Desired && ds.Status.Available == ds.Status.Desired
		case strings.Contains(err.Error(), "NotFound"):
		default:
			return f, err
		}

		return f, nil
	}

	testenv.EventuallyOK(t, 5*time.Minute, "Cilium handed over, kube-proxy replaced and recorded", func() (bool, string) {
		f, err := read()
		if err != nil {
			return false, err.Error()
		}

		out, _ := w.kubectl(ctx, "get", "taloscluster", "-n", icNamespace, cluster, "-o", `jsonpath={.status.conditions[?(@.type=="CNIHandover")].status}`)

		return out == "True" && f.kpr == "true" && f.recorded == "replaced" && !f.proxy, fmt.Sprintf("handover %q, %+v", out, f)
	})

	// A direct edit is refused, naming the command.
	out, err := w.kubectl(ctx, "patch", "taloscluster", "-n", icNamespace, cluster, "--type=merge", "-p", `{"spec":{"cni":{"kubeProxy":"enabled"}}}`)
	if err == nil || !strings.Contains(out, "ichor cni kube-proxy enabled --cluster "+cluster) {
		t.Fatalf("a direct edit of spec.cni.kubeProxy: %v\n%s", err, out)
	}

	// switchTo runs the CLI and checks the order on every look until it returns.
	switchTo := func(mode string, order func(facts) string) string {
		t.Helper()

		type result struct {
			out string
			err error
		}

		done := make(chan result, 1)

		go func() {
			out, err := w.ichor(ctx, "cni", "kube-proxy", mode, "--cluster", cluster, "--yes", "--wait")
			done <- result{out, err}
		}()

		looks := 0

		for {
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("switching to %s: %v", mode, r.err)
				}

				t.Logf("switched to %s, the order checked on %d looks", mode, looks)

				return r.out
			case <-time.After(300 * time.Millisecond):
			}

			f, err := read()
			if err != nil {
				continue // an API call that failed on a busy machine says nothing about the order
			}

			looks++

			if bad := order(f); bad != "" {
				t.Fatalf("switching to %s: %s (%+v)", mode, bad, f)
			}
		}
	}

	out = switchTo("enabled", func(f facts) string {
		if f.kpr == "false" && !f.ready {
			return "Cilium stopped replacing kube-proxy before Talos's kube-proxy ran on every node"
		}

		return ""
	})
	if !strings.Contains(out, "succeeded: kube-proxy switched from replaced to enabled") {
		t.Fatalf("the switch to enabled:\n%s", out)
	}

	if f, err := read(); err != nil || f.kpr != "false" || f.recorded != "enabled" || !f.ready {
		t.Fatalf("after the switch to enabled: %+v %v", f, err)
	}

	out = switchTo("replaced", func(f facts) string {
		switch {
		case f.recorded == "replaced" && f.kpr != "true":
			return "Talos's side moved to replaced while Cilium does not replace kube-proxy"
		case !f.proxy && f.recorded != "replaced":
			return "Talos's kube-proxy was deleted while Talos's side still renders it"
		}

		return ""
	})
	if !strings.Contains(out, "succeeded: kube-proxy switched from enabled to replaced") {
		t.Fatalf("the switch to replaced:\n%s", out)
	}

	if f, err := read(); err != nil || f.kpr != "true" || f.recorded != "replaced" || f.proxy {
		t.Fatalf("after the switch to replaced: %+v %v", f, err)
	}

	for _, o := range [][]string{{"serviceaccount", "-n", "kube-system", "kube-proxy"}, {"clusterrolebinding", "kube-proxy"}} {
		if out, err := w.kubectl(ctx, append([]string{"get"}, o...)...); err == nil || !strings.Contains(out, "NotFound") {
			t.Fatalf("%v is left after the switch: %v\n%s", o, err, out)
		}
	}

	inv, err := w.kubectl(ctx, "get", "configmap", "-n", "kube-system", "talos-bootstrap-manifests-inventory", "-o", "jsonpath={.data}")
	if err != nil {
		t.Fatal(err)
	}

	if strings.Contains(inv, "kube-proxy") {
		t.Fatalf("Talos's inventory still records kube-proxy: %s", inv)
	}
}
