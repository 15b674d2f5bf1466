package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// impersonating writes a copy of the world's admin kubeconfig whose user
// impersonates user in groups (kubeconfig's as / as-groups), as a member of
// a built-in role would connect.
func (w *world) impersonating(t *testing.T, user string, groups ...string) string {
	t.Helper()

	cfg, err := clientcmd.LoadFromFile(w.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	for _, a := range cfg.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = user, groups
	}

	p := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}

	return p
}

// talosctl runs the real talosctl (the Taskfile's $TALOSCTL) with talosconfig tc.
func talosctl(ctx context.Context, t *testing.T, tc string, args ...string) (string, error) {
	t.Helper()

	bin := os.Getenv("TALOSCTL")
	if bin == "" {
		t.Fatal("$TALOSCTL is not set: run the tests through `go tool task test`, which builds talosctl and names it")
	}

	cmd := exec.CommandContext(ctx, bin, append([]string{"--talosconfig", tc}, args...)...) //nolint:gosec // the test's own talosctl

	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()

	return out.String(), err
}

// TestReaderTalosconfig: `ichor cluster talosconfig`, run as a member of
// ichor:operator, writes an os:reader talosconfig (0600) of the running
// control planes; the real talosctl reads a node with it and is refused a
// reboot; the download is recorded as a Warning Event naming the operator
// on the TalosCluster, and the controller's Issued Event names them too
// (the in-cluster webhook stamped the request). A viewer is refused, with
// nothing written; a duration over twelve hours is refused before anything
// is asked.
func TestReaderTalosconfig(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir := t.TempDir()
	file := filepath.Join(dir, "talosconfig")
	asOperator := w.impersonating(t, "e2e-operator", "ichor:operator", "system:authenticated")
	asViewer := w.impersonating(t, "e2e-viewer", "ichor:viewer", "system:authenticated")

	out, err := w.ichor(ctx, "--kubeconfig", asViewer, "-n", icNamespace, "cluster", "talosconfig", cluster, "-f", file)
	if err == nil || !strings.Contains(out, "talosclusters/talosconfig-reader") {
		t.Fatalf("a viewer's talosconfig: %v\n%s", err, out)
	}

	out, err = w.ichor(ctx, "--kubeconfig", asOperator, "-n", icNamespace, "cluster", "talosconfig", cluster, "-f", file, "--duration", "13h")
	if err == nil || !strings.Contains(out, "lasts 1m to 12h") {
		t.Fatalf("a 13h talosconfig: %v\n%s", err, out)
	}

	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("a refused talosconfig left %s: %v", file, err)
	}

	out = w.mustIchor(t, ctx, "--kubeconfig", asOperator, "-n", icNamespace, "cluster", "talosconfig", cluster, "-f", file, "--duration", "2h")
	if !strings.Contains(out, "wrote an os:reader talosconfig of cluster "+cluster) {
		t.Fatalf("ichor cluster talosconfig said: %s", out)
	}

	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the talosconfig file: %v, %v; want mode 0600", st, err)
	}

	ms, err := w.talosMachines(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var node string

	for _, m := range ms {
		if m.Spec.Role == "controlplane" && m.Spec.Address != "" && m.Metadata.DeletionTimestamp == nil && node == "" {
			node = m.Spec.Address
		}
	}

	if node == "" {
		t.Fatalf("no control plane with an address: %s", describeTM(ms))
	}

	if out, err := talosctl(ctx, t, file, "--nodes", node, "version"); err != nil || !strings.Contains(out, "Server:") {
		t.Fatalf("talosctl version with the reader talosconfig: %v\n%s", err, out)
	}

	if out, err := talosctl(ctx, t, file, "--nodes", node, "get", "members"); err != nil {
		t.Fatalf("talosctl get members with the reader talosconfig: %v\n%s", err, out)
	}

	out, err = talosctl(ctx, t, file, "--nodes", node, "reboot", "--wait=false")
	if err == nil || !strings.Contains(out, "PermissionDenied") {
		t.Fatalf("talosctl reboot with the reader talosconfig: %v\n%s; want PermissionDenied", err, out)
	}

	// The Warning Event on the TalosCluster names the operator; the
	// controller's Issued Event on the request names them too.
	var events struct {
		Items []struct {
			Type, Reason, Message, Note string
			InvolvedObject              struct{ Kind, Name string } `json:"involvedObject"`
		} `json:"items"`
	}

	raw, err := w.kubectl(ctx, "get", "events", "-n", icNamespace, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}

	if err := json.Unmarshal([]byte(raw), &events); err != nil {
		t.Fatal(err)
	}

	var download, issued bool

	for _, e := range events.Items {
		download = download || (e.InvolvedObject.Kind == "TalosCluster" && e.InvolvedObject.Name == cluster && e.Type == "Warning" &&
			strings.HasPrefix(e.Message, "e2e-operator downloads an os:reader talosconfig of cluster "+cluster))
		issued = issued || (e.InvolvedObject.Kind == "TalosCredentialRequest" && e.Reason == "Issued" &&
			strings.Contains(e.Message, "talosconfig-reader) for TalosCluster "+cluster+" to e2e-operator"))
	}

	if !download || !issued {
		var msgs []string
		for _, e := range events.Items {
			if slices.Contains([]string{"TalosCluster", "TalosCredentialRequest"}, e.InvolvedObject.Kind) {
				msgs = append(msgs, e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+": "+e.Message)
			}
		}

		t.Fatalf("download Event %v, Issued Event naming the operator %v; the Events: %s", download, issued, strings.Join(msgs, "\n"))
	}
}
