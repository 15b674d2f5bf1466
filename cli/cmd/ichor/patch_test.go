package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

var rolesOnce sync.Once

// userKubeconfig installs the built-in user roles (once) and returns a
// kubeconfig that authenticates as user in group.
func userKubeconfig(t *testing.T, user, group string) string {
	t.Helper()
	ctx := context.Background()
	rolesOnce.Do(func() {
		err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ichor-system"}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		must(t, env.ApplyDir(ctx, "kustomize/base/rbac"))
	})
	cfg, err := env.UserConfig(user, group)
	must(t, err)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	kc.CurrentContext = "test"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, clientcmd.WriteToFile(*kc, file))
	return file
}

func as(kubeconfig string) invocation {
	return invocation{env: []string{"KUBECONFIG=" + kubeconfig}}
}

func getPatch(t *testing.T, ns, name string) (*ichorv1alpha1.TalosConfigPatch, error) {
	t.Helper()
	p := &ichorv1alpha1.TalosConfigPatch{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p)
	return p, err
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(f, []byte(text), 0o600))
	return f
}

// TestPatchCLI: `ichor patch list|get|create|edit|delete` and `ichor config
// diff --with` (the impact on every machine): a write prints the machines,
// their changed paths and apply modes first; a patch machinery refuses or
// that leaves the typed schema is refused naming the field; $EDITOR edits
// are checked on save; the user's own RBAC decides (a viewer writes
// nothing) and a privileged document is refused for an operator with the
// verb named, while the operator's plain patch goes through.
func TestPatchCLI(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "patchcli")
	renderFixture(t, ns)
	w := approved(ns, "w-1", ichorv1alpha1.RoleWorker)
	createMachine(t, w)
	pending := newMachine(ns, "new-1", "prod")
	createMachine(t, pending)

	// create with typed flags: the impact first, then the write.
	r := mustSucceed(t, ichor(t, "patch", "create", "tuning", "-n", ns, "--sysctl", "net.core.somaxconn=65535", "--yes"))
	for _, want := range []string{"Creating TalosConfigPatch tuning", "cp-1", "w-1", "no-reboot", `added SysctlConfig:params["net.core.somaxconn"]`} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("create must print %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "new-1") {
		t.Fatalf("a machine without a role has no configuration to preview:\n%s", r.stdout)
	}
	p, err := getPatch(t, ns, "tuning")
	must(t, err)
	if p.Spec.ClusterName != "prod" || p.Spec.Layer != ichorv1alpha1.LayerCluster || p.Spec.Documents[0].SysctlConfig.Params["net.core.somaxconn"] != "65535" {
		t.Fatalf("the stored patch: %+v", p.Spec)
	}

	// list and get, for people and as data.
	r = mustSucceed(t, ichor(t, "patch", "list", "-n", ns))
	if !strings.Contains(r.stdout, "tuning") || !strings.Contains(r.stdout, "SysctlConfig") || !strings.Contains(r.stdout, "every machine") {
		t.Fatalf("patch list:\n%s", r.stdout)
	}
	var items []ichorv1alpha1.TalosConfigPatch
	must(t, json.Unmarshal([]byte(mustSucceed(t, ichor(t, "patch", "list", "-n", ns, "-o", "json")).stdout), &items))
	if len(items) != 1 || items[0].Name != "tuning" {
		t.Fatalf("patch list -o json: %+v", items)
	}
	r = mustSucceed(t, ichor(t, "patch", "get", "tuning", "-n", ns))
	if !strings.Contains(r.stdout, "net.core.somaxconn") || !strings.Contains(r.stdout, "Layer:") {
		t.Fatalf("patch get:\n%s", r.stdout)
	}
	asYAML := mustSucceed(t, ichor(t, "patch", "get", "tuning", "-n", ns, "-o", "yaml")).stdout

	// config diff --with, no machine: a kube-apiserver setting waits for a
	// rollout on the control plane; the file of the existing patch changes nothing.
	api := writeFile(t, "api.yaml", `apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosConfigPatch
metadata:
  name: api-sans
spec:
  clusterName: prod
  layer: role
  target:
    role: controlplane
  documents:
  - kubeAPIServerConfig:
      certExtraSANs: [api.example.com]
`)
	r = mustSucceed(t, ichor(t, "config", "diff", "-n", ns, "--with", api))
	if !strings.Contains(r.stdout, "kube-apiserver-restart") || !strings.Contains(r.stdout, "waits for `ichor config apply`") ||
		strings.Contains(r.stdout, "w-1") {
		t.Fatalf("config diff --with must show the control plane waiting for a rollout, and not the worker:\n%s", r.stdout)
	}
	var imps []struct {
		Machines []struct {
			Machine         string `json:"machine"`
			Mode            string `json:"mode"`
			WaitsForRollout bool   `json:"waitsForRollout"`
		} `json:"machines"`
	}
	must(t, json.Unmarshal([]byte(mustSucceed(t, ichor(t, "config", "diff", "-n", ns, "--with", api, "-o", "json")).stdout), &imps))
	if len(imps) != 1 || len(imps[0].Machines) != 1 || imps[0].Machines[0].Mode != "kube-apiserver-restart" || !imps[0].Machines[0].WaitsForRollout {
		t.Fatalf("config diff -o json: %+v", imps)
	}
	r = mustSucceed(t, ichor(t, "config", "diff", "-n", ns, "--with", writeFile(t, "same.yaml", asYAML)))
	if !strings.Contains(r.stdout, "Changing TalosConfigPatch tuning") || strings.Contains(r.stdout, "no-reboot") {
		t.Fatalf("the stored patch itself changes nothing:\n%s", r.stdout)
	}

	// Machinery refuses a VLAN without its parent: refused by field, nothing written.
	vlan := `apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosConfigPatch
spec:
  clusterName: prod
  layer: machine
  target:
    machineName: w-1
  documents:
  - vlanConfig:
      name: eth0.10
      vlanID: 10
`
	mustFail(t, ichor(t, "patch", "create", "vlan", "-n", ns, "--from-file", writeFile(t, "vlan.yaml", vlan), "--yes"), "parent must be specified", "nothing was written")
	if _, err := getPatch(t, ns, "vlan"); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused patch was written: %v", err)
	}
	// Its allowed neighbour, with the parent.
	r = mustSucceed(t, ichor(t, "patch", "create", "vlan", "-n", ns, "--from-file", writeFile(t, "vlan.yaml", vlan+"      parent: eth0\n"), "--yes"))
	if !strings.Contains(r.stdout, "w-1") || strings.Contains(r.stdout, "cp-1") {
		t.Fatalf("the machine-layer patch targets w-1 alone:\n%s", r.stdout)
	}
	// A field outside the typed schema (a secret one) is refused by name.
	secret := `apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosConfigPatch
spec:
  clusterName: prod
  layer: cluster
  documents:
  - registryTLSConfig:
      name: r.example.com
      clientIdentity:
        cert: x
        key: y
`
	mustFail(t, ichor(t, "patch", "create", "tls", "-n", ns, "--from-file", writeFile(t, "tls.yaml", secret), "--yes"), `"key"`, "not a typed TalosConfigPatch")

	// edit through $EDITOR: the change is previewed and written.
	r = mustSucceed(t, ichorWith(t, invocation{env: []string{"EDITOR=sed -i s/65535/1024/"}}, "patch", "edit", "tuning", "-n", ns, "--yes"))
	if !strings.Contains(r.stdout, `changed SysctlConfig:params["net.core.somaxconn"]`) {
		t.Fatalf("edit must preview the change:\n%s", r.stdout)
	}
	p, err = getPatch(t, ns, "tuning")
	must(t, err)
	if p.Spec.Documents[0].SysctlConfig.Params["net.core.somaxconn"] != "1024" {
		t.Fatalf("the edit was not written: %+v", p.Spec)
	}
	// An edit that leaves the schema is checked on save, reopened with the
	// error, and stops when saved again unchanged; nothing is written.
	r = mustFail(t, ichorWith(t, invocation{env: []string{"EDITOR=sed -i s/params:/paramz:/"}}, "patch", "edit", "tuning", "-n", ns, "--yes"),
		`unknown field "paramz"`, "was not changed")
	if !strings.Contains(r.stderr, "error:") {
		t.Fatalf("the error must be shown before the editor reopens:\n%s", r.stderr)
	}
	p2, err := getPatch(t, ns, "tuning")
	must(t, err)
	if p2.ResourceVersion != p.ResourceVersion {
		t.Fatal("a refused edit changed the patch")
	}

	// The user's own RBAC: a viewer writes nothing.
	viewerKC := userKubeconfig(t, "ichor:vera", "ichor:viewer")
	mustSucceed(t, ichorWith(t, as(viewerKC), "patch", "list", "-n", ns))
	mustFail(t, ichorWith(t, as(viewerKC), "patch", "create", "v", "-n", ns, "--sysctl", "vm.swappiness=1", "--yes"), "forbidden")
	mustFail(t, ichorWith(t, as(viewerKC), "patch", "delete", "tuning", "-n", ns, "--yes"), "forbidden")

	// An operator: a privileged document is refused with the verb named…
	operatorKC := userKubeconfig(t, "ichor:olivia", "ichor:operator")
	roots := `apiVersion: ichor.maesh.dev/v1alpha1
kind: TalosConfigPatch
spec:
  clusterName: prod
  layer: cluster
  documents:
  - trustedRootsConfig:
      name: corp
      certificates: "-----BEGIN CERTIFICATE-----"
`
	r = mustFail(t, ichorWith(t, as(operatorKC), "patch", "create", "roots", "-n", ns, "--from-file", writeFile(t, "roots.yaml", roots), "--yes"),
		"`update` on `talosconfigpatches/privileged`", "nothing was written")
	if _, err := getPatch(t, ns, "roots"); !apierrors.IsNotFound(err) {
		t.Fatalf("the operator's privileged patch was written: %v", err)
	}
	// …and a plain one goes through, previewed without reading the secrets bundle.
	mustSucceed(t, ichorWith(t, as(operatorKC), "patch", "create", "swap", "-n", ns, "--layer", "role", "--role", "worker",
		"--sysctl", "vm.swappiness=10", "--yes"))
	// delete: previewed (the removed paths), then gone.
	r = mustSucceed(t, ichorWith(t, as(operatorKC), "patch", "delete", "swap", "-n", ns, "--yes"))
	if !strings.Contains(r.stdout, `removed SysctlConfig:params["vm.swappiness"]`) {
		t.Fatalf("delete must preview the removed paths:\n%s", r.stdout)
	}
	if _, err := getPatch(t, ns, "swap"); !apierrors.IsNotFound(err) {
		t.Fatalf("the patch was not deleted: %v", err)
	}
	_ = ctx
}
