package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// secretStrings are the values of a bundle that must never be printed, in the
// forms they could appear in: as they are and base64-encoded (as a machine
// configuration carries keys).
func secretStrings(b *secrets.Bundle) []string {
	raw := []string{
		string(b.Certs.OS.Key), string(b.Certs.K8s.Key), string(b.Certs.Etcd.Key), string(b.Certs.K8sAggregator.Key),
		string(b.Certs.K8sServiceAccount.Key), b.Secrets.BootstrapToken, b.Secrets.SecretboxEncryptionSecret,
		b.Secrets.AESCBCEncryptionSecret, b.TrustdInfo.Token, b.Cluster.Secret,
	}
	var out []string
	for _, s := range raw {
		if s == "" {
			continue
		}
		out = append(out, s, base64.StdEncoding.EncodeToString([]byte(s)))
		// A PEM key's body line is distinctive on its own.
		for _, line := range strings.Split(s, "\n") {
			if len(line) > 40 && !strings.HasPrefix(line, "-----") {
				out = append(out, line)
			}
		}
	}
	return out
}

func assertNoSecrets(t *testing.T, what, text string, secretValues []string) {
	t.Helper()
	for _, s := range secretValues {
		if strings.Contains(text, s) {
			t.Fatalf("%s prints a secret of the bundle (%d bytes)", what, len(s))
		}
	}
}

// renderFixture creates a cluster with its bundle Secret and an approved control plane.
func renderFixture(t *testing.T, ns string) *secrets.Bundle {
	t.Helper()
	ctx := context.Background()
	c := newCluster(ns, "prod")
	b, err := bundle.Generate(secrets.NewClock(), c.Spec.VersionContract)
	must(t, err)
	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	must(t, err)
	must(t, k8s.Create(ctx, sec))
	must(t, k8s.Create(ctx, c))
	m := approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane)
	m.Spec.Hostname = "cp-1"
	m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{WWID: "naa.5000c500a0b1c2d3"}
	createMachine(t, m)
	return b
}

func TestConfigEffectiveMasksSecrets(t *testing.T) {
	ns := namespace(t, "effective")
	b := renderFixture(t, ns)
	sv := secretStrings(b)
	if len(sv) < 10 {
		t.Fatalf("the fixture bundle has too few secrets to check: %d", len(sv))
	}

	table := mustSucceed(t, ichor(t, "config", "effective", "cp-1", "-n", ns))
	assertNoSecrets(t, "config effective", table.all(), sv)
	if !strings.Contains(table.stdout, "PATH") || !strings.Contains(table.stdout, "system (") || !strings.Contains(table.stdout, "******") {
		t.Fatalf("the table must show paths, origins and masked secrets:\n%.2000s", table.stdout)
	}
	for _, l := range strings.Split(table.stdout, "\n") {
		if strings.Contains(l, "hostname") && strings.Contains(l, "cp-1") && !strings.Contains(l, "machine") {
			t.Fatalf("the hostname comes from the machine layer: %q", l)
		}
	}

	for _, format := range []string{"json", "yaml"} {
		r := mustSucceed(t, ichor(t, "config", "effective", "cp-1", "-n", ns, "-o", format))
		assertNoSecrets(t, "config effective -o "+format, r.all(), sv)
	}
	var doc struct {
		Hash   string `json:"hash"`
		Values []struct {
			Path  string `json:"path"`
			Layer string `json:"layer"`
		} `json:"values"`
	}
	js := mustSucceed(t, ichor(t, "config", "effective", "cp-1", "-n", ns, "-o", "json", "--layer", "system"))
	must(t, json.Unmarshal([]byte(js.stdout), &doc))
	if !strings.HasPrefix(doc.Hash, "sha256:") || len(doc.Values) == 0 {
		t.Fatalf("-o json: %s", js.stdout)
	}
	for _, v := range doc.Values {
		if v.Layer != "system" {
			t.Fatalf("--layer system printed a value of %s: %s", v.Layer, v.Path)
		}
	}

	// A pending machine has no role: the error says what to do, and --role previews.
	createMachine(t, newMachine(ns, "m-pending", "prod"))
	mustFail(t, ichor(t, "config", "effective", "m-pending", "-n", ns), "has no role yet", "--role")
	prev := mustSucceed(t, ichor(t, "config", "effective", "m-pending", "-n", ns, "--role", "worker"))
	assertNoSecrets(t, "config effective --role", prev.all(), sv)

	// A missing bundle Secret says where the recovery copy is.
	c := newCluster(ns, "lost")
	must(t, k8s.Create(context.Background(), c))
	lm := newMachine(ns, "lost-2", "lost")
	lm.Spec.Role = ichorv1alpha1.RoleWorker
	createMachine(t, lm)
	mustFail(t, ichor(t, "config", "effective", "lost-2", "-n", ns), "lost-secrets", "does not exist", "~/.ichor/clusters/lost/secrets.yaml.age")
}

const sysctlPatch = `apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosConfigPatch
metadata:
  name: tuning
spec:
  clusterName: prod
  layer: cluster
  documents:
  - sysctlConfig:
      params:
        net.core.somaxconn: "65535"
`

func TestConfigDiff(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "diff")
	b := renderFixture(t, ns)
	sv := secretStrings(b)

	// Without --with: the render of now against the recorded hashes.
	r := mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns))
	assertNoSecrets(t, "config diff", r.all(), sv)
	if !strings.Contains(r.stdout, "Controller rendered:") || !strings.Contains(r.stdout, "nothing yet") {
		t.Fatalf("config diff without --with:\n%s", r.stdout)
	}
	var rep struct {
		RenderedNow string `json:"renderedNow"`
	}
	js := mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns, "-o", "json"))
	must(t, json.Unmarshal([]byte(js.stdout), &rep))
	m := getMachine(t, ns, "cp-1")
	m.Status.RenderedConfigHash = rep.RenderedNow
	m.Status.AppliedConfigHash = "sha256:0000"
	must(t, k8s.Status().Update(ctx, m))
	r = mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns))
	if !strings.Contains(r.stdout, "Controller rendered:   the same") || !strings.Contains(r.stdout, "sha256:0000 (differs") {
		t.Fatalf("config diff must compare with the recorded hashes:\n%s", r.stdout)
	}

	// With --with: value by value.
	file := filepath.Join(t.TempDir(), "tuning.yaml")
	must(t, os.WriteFile(file, []byte(sysctlPatch), 0o600))
	r = mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns, "--with", file))
	assertNoSecrets(t, "config diff --with", r.all(), sv)
	found := false
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "added") && strings.Contains(l, "SysctlConfig") && strings.Contains(l, "65535") && strings.Contains(l, "cluster (tuning)") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the diff must show the added sysctl from the cluster layer:\n%s", r.stdout)
	}
	var d struct {
		HashBefore, HashAfter string
		Changes               []struct{ Change, Path string }
	}
	js = mustSucceed(t, ichor(t, "config", "diff", "cp-1", "-n", ns, "--with", file, "-o", "json"))
	must(t, json.Unmarshal([]byte(js.stdout), &d))
	if d.HashBefore == d.HashAfter || len(d.Changes) == 0 {
		t.Fatalf("the diff must change the hash: %s", js.stdout)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	must(t, os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o600))
	mustFail(t, ichor(t, "config", "diff", "cp-1", "-n", ns, "--with", bad), `"ConfigMap"`, "only TalosConfigPatch")
}
