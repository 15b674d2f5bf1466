package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubectlAs runs the test's kubectl with kubeconfig kc, whose exec plugin
// is the world's `ichor` (on PATH, as a user installs it).
func (w *world) kubectlAs(ctx context.Context, kc string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv(assetsEnv), "kubectl"), args...) //nolint:gosec // the test's own kubectl
	cmd.Env = append(slices.Clone(w.env), "PATH="+w.bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kc)

	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}

	return out.String(), nil
}

// TestKubectlAsIchorUser: spec.authentication.ichorUsers makes the
// cluster's real kube-apiserver trust ichor-ui's issuer, as the controller
// publishes it (status.issuer: the discovery document on ichor-ui's
// ClusterIP, port 8444, and the Ichor CA); `ichor config apply` rolls it out
// to the control planes. Then kubectl, with the kubeconfig `ichor auth
// kubeconfig` writes and its exec plugin's token from a sign-in, is the
// Ichor user `ichor:vera` in the group of their role: the viewer may list
// TalosMachines and is refused their deletion by RBAC.
func TestKubectlAsIchorUser(t *testing.T) {
	w := scenario(t)
	ui := startedUI(t, w)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	user := w.createUser(t, ctx, "vera", "viewer")

	var ii struct {
		Status struct {
			Issuer *struct {
				URL          string `json:"url"`
				DiscoveryURL string `json:"discoveryURL"`
			} `json:"issuer"`
		} `json:"status"`
	}

	deadline := time.Now().Add(3 * time.Minute)

	for {
		if err := w.kubeJSON(ctx, &ii, "get", "ichorinstallation", "ichor"); err != nil {
			t.Fatal(err)
		}

		if is := ii.Status.Issuer; is != nil && is.URL == ui.url && strings.HasSuffix(is.DiscoveryURL, ":8444/.well-known/openid-configuration") {
			break
		}

		if time.Now().After(deadline) {
			var lines []string

			for pod, log := range w.podLogs(t) {
				if strings.HasPrefix(pod, "ichor-controller") {
					for l := range strings.Lines(log) {
						if strings.Contains(l, "serving") || strings.Contains(l, "issuer") {
							lines = append(lines, pod+": "+strings.TrimSpace(l))
						}
					}
				}
			}

			t.Fatalf("the controller published no issuer in the IchorInstallation's status: %+v; its serving CA keeper said:\n%s", ii.Status.Issuer, strings.Join(lines, "\n"))
		}

		time.Sleep(2 * time.Second)
	}

	if out, err := w.kubectl(ctx, "patch", "taloscluster", "-n", icNamespace, cluster, "--type=merge", "-p", `{"spec":{"authentication":{"ichorUsers":true}}}`); err != nil {
		t.Fatalf("setting spec.authentication.ichorUsers: %v\n%s", err, out)
	}

	// The control planes' render changes: each waits for a rollout.
	deadline = time.Now().Add(2 * time.Minute)

	for {
		out, err := w.kubectl(ctx, "get", "talosmachines", "-n", icNamespace, "-o",
			`jsonpath={range .items[?(@.spec.role=="controlplane")]}{.metadata.name}={.status.conditions[?(@.type=="APIServerRestartRequired")].status}{"\n"}{end}`)
		if err != nil {
			t.Fatal(err)
		}

		if strings.Contains(out, "=True") && !strings.Contains(out, "=False") && !strings.Contains(out, "=\n") {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("the control planes do not wait for a kube-apiserver restart after ichorUsers was set:\n%s", out)
		}

		time.Sleep(2 * time.Second)
	}

	// The world runs one kube-apiserver for all its control planes (on the
	// first, subnet .1): roll out that control plane only, and put the
	// others back afterwards (they never run the change).
	w.rollOutAPIServerMachine(t, ctx)
	t.Cleanup(func() {
		if out, err := w.kubectl(context.Background(), "patch", "taloscluster", "-n", icNamespace, cluster, "--type=merge", "-p", `{"spec":{"authentication":null}}`); err != nil {
			t.Errorf("taking spec.authentication away: %v\n%s", err, out)

			return
		}

		w.rollOutAPIServerMachine(t, context.Background())
	})

	// The user's kubeconfig and a sign-in.
	kcFile, args, caFile := w.userKubeconfig(t, ctx, ui)
	w.authToken(t, ctx, args, browser(t, caFile, user))

	// The kube-apiserver may still be fetching the issuer's keys after its
	// restart: the first answers can be Unauthorized.
	var (
		who string
		err error
	)

	deadline = time.Now().Add(2 * time.Minute)

	for {
		who, err = w.kubectlAs(ctx, kcFile, "auth", "whoami", "-o", "json")
		if err == nil {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("kubectl as the Ichor user: %v", err)
		}

		time.Sleep(3 * time.Second)
	}

	var review struct {
		Status struct {
			UserInfo struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"userInfo"`
		} `json:"status"`
	}

	if err := json.Unmarshal([]byte(who), &review); err != nil {
		t.Fatalf("kubectl auth whoami: %v\n%s", err, who)
	}

	if u := review.Status.UserInfo; u.Username != "ichor:vera" || !slices.Contains(u.Groups, "ichor:viewer") {
		t.Fatalf("the kube-apiserver makes %+v of the token, want ichor:vera in ichor:viewer", u)
	}

	list, err := w.kubectlAs(ctx, kcFile, "get", "talosmachines", "-n", icNamespace, "-o", "name")
	if err != nil || !strings.Contains(list, "talosmachine") {
		t.Fatalf("the viewer listing TalosMachines: %v\n%s", err, list)
	}

	first := strings.TrimSpace(strings.SplitN(list, "\n", 2)[0])

	refused, err := w.kubectlAs(ctx, kcFile, "delete", first, "-n", icNamespace, "--dry-run=server")
	if err == nil || !strings.Contains(refused, `User "ichor:vera" cannot delete resource "talosmachines"`) {
		t.Fatalf("the viewer deleting %s: %v\n%s", first, err, refused)
	}
}

// rollOutAPIServerMachine rolls the pending changes out to the control
// plane that runs the world's kube-apiserver, picked by a label the test sets.
func (w *world) rollOutAPIServerMachine(t *testing.T, ctx context.Context) {
	t.Helper()

	host := strings.TrimSuffix(subnet, "0/24") + "1"

	out, err := w.kubectl(ctx, "get", "talosmachines", "-n", icNamespace, "-o", `jsonpath={range .items[*]}{.metadata.name}={.spec.address}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}

	name := ""

	for l := range strings.Lines(out) {
		if n, addr, ok := strings.Cut(strings.TrimSpace(l), "="); ok && addr == host {
			name = n
		}
	}

	if name == "" {
		t.Fatalf("no TalosMachine at %s:\n%s", host, out)
	}

	if out, err := w.kubectl(ctx, "label", "--overwrite", "talosmachine", "-n", icNamespace, name, "e2e.ichor.dev/runs-apiserver=true"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	out = w.mustIchor(t, ctx, "config", "apply", "--cluster", cluster, "--selector", "e2e.ichor.dev/runs-apiserver=true", "--yes", "--wait")
	t.Logf("`ichor config apply`:\n%s", out)
}
