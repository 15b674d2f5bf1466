package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

const repoRoot = "../.."

// manifests parses every rendered document into objects keyed by kind/name.
func manifests(t *testing.T, rendered map[string]string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for file, text := range rendered {
		for _, doc := range strings.Split(text, "\n---\n") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s does not render to YAML: %v\n%s", file, err, doc)
			}
			if obj == nil {
				continue
			}
			meta, _ := obj["metadata"].(map[string]any)
			out[obj["kind"].(string)+"/"+meta["name"].(string)] = obj
		}
	}
	return out
}

func TestCommittedChartIsCurrent(t *testing.T) {
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare(filepath.Join(repoRoot, chartDir), files); err != nil {
		t.Fatal(err)
	}
}

// The policy set contracts/pkg/netpol embeds is kustomize's build of today.
func TestEmbeddedPolicySetIsCurrent(t *testing.T) {
	files, err := NetpolFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s is stale (%v); run `go tool task generate`", path, err)
		}
	}
}

func TestHelmLintPasses(t *testing.T) {
	result := lint.All(filepath.Join(repoRoot, chartDir), nil, namespace, false)
	for _, m := range result.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m.Error())
		}
	}
	if err := Lint(filepath.Join(repoRoot, chartDir)); err != nil {
		t.Fatal(err)
	}
}

// A broken chart fails Lint: the check is not vacuous.
func TestLintRefusesABrokenChart(t *testing.T) {
	dir := t.TempDir()
	files, err := Generate(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	files["templates/broken.yaml"] = []byte("kind: ConfigMap\nmetadata:\n  name: {{ .Values.nope.missing }\n")
	if err := Write(dir, files); err != nil {
		t.Fatal(err)
	}
	if err := Lint(dir); err == nil {
		t.Fatal("a template that does not parse must fail the lint")
	}
}

func TestRendersWithDefaults(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	dep := objs["Deployment/ichor-controller"]
	if dep == nil {
		t.Fatalf("no controller Deployment among %d objects", len(objs))
	}
	spec := dep["spec"].(map[string]any)
	if spec["replicas"] != float64(2) {
		t.Errorf("replicas: %v", spec["replicas"])
	}
	if dep["metadata"].(map[string]any)["namespace"] != namespace {
		t.Errorf("namespace: %v", dep["metadata"])
	}
	container := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if container["image"] != "ghcr.io/maeshinshin/ichor-controller:v0.0.0-dev" {
		t.Errorf("image: %v", container["image"])
	}
	if objs["PodDisruptionBudget/ichor-controller"] == nil {
		t.Error("two replicas need a PodDisruptionBudget")
	}
	// The chart's controller records the install as Helm's; the install
	// manifest's (the installer's and `ichor init`'s) does not.
	if args := strs(container["args"]); !slices.Contains(args, "--deployment-manager=helm") {
		t.Errorf("the chart's controller runs without --deployment-manager=helm: %v", args)
	}
	install, err := InstallManifest(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(install), "--deployment-manager") {
		t.Error("the install manifest's controller has --deployment-manager: the installer records its own installs")
	}
	if objs["CiliumNetworkPolicy/ichor-default-deny"] != nil {
		t.Error("network policies are off by default")
	}
	for _, role := range []string{"ichor-viewer", "ichor-operator", "ichor-admin", "ichor-machine-reclaimer", "ichor-ca-rotation-credentials"} {
		if objs["ClusterRole/"+role] == nil {
			t.Errorf("no ClusterRole %s", role)
		}
	}
	if objs["ValidatingWebhookConfiguration/ichor-validating-webhook"] == nil {
		t.Error("no webhook configuration")
	}
	if _, err := os.Stat(filepath.Join(repoRoot, chartDir, "crds", "talosclusters.ichor.maesh.dev.yaml")); err != nil {
		t.Errorf("the CRDs ship in crds/: %v", err)
	}
}

func TestValuesChangeTheRender(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), map[string]any{
		"controller":    map[string]any{"replicas": 1, "image": map[string]any{"repository": "registry.example/ichor", "tag": "v9.9.9"}},
		"networkPolicy": map[string]any{"cilium": map[string]any{"enabled": true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	spec := objs["Deployment/ichor-controller"]["spec"].(map[string]any)
	if spec["replicas"] != float64(1) {
		t.Errorf("replicas: %v", spec["replicas"])
	}
	if objs["PodDisruptionBudget/ichor-controller"] != nil {
		t.Error("one replica must have no PodDisruptionBudget, or a drain never finishes")
	}
	container := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if container["image"] != "registry.example/ichor:v9.9.9" {
		t.Errorf("image: %v", container["image"])
	}
	for _, p := range []string{"ichor-default-deny", "ichor-controller", "ichor-ui", "ichor-installer"} {
		if objs["CiliumNetworkPolicy/"+p] == nil {
			t.Errorf("networkPolicy.cilium.enabled must render %s", p)
		}
	}
	for _, p := range []string{"ichor-controller-metrics", "ichor-ui-metrics"} {
		if objs["CiliumNetworkPolicy/"+p] != nil {
			t.Errorf("%s without networkPolicy.cilium.metricsNamespace: /metrics must stay closed", p)
		}
	}
}

// networkPolicy.cilium.metricsNamespace opens /metrics to that namespace's
// pods, and to no other.
func TestMetricsNamespaceOpensMetrics(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), map[string]any{
		"networkPolicy": map[string]any{"cilium": map[string]any{"enabled": true, "metricsNamespace": "observability"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	for p, port := range map[string]string{"ichor-controller-metrics": "8080", "ichor-ui-metrics": "8445"} {
		pol := objs["CiliumNetworkPolicy/"+p]
		if pol == nil {
			t.Fatalf("metricsNamespace must render %s", p)
		}
		raw, err := json.Marshal(pol["spec"])
		if err != nil {
			t.Fatal(err)
		}
		want := `"ingress":[{"fromEndpoints":[{"matchLabels":{"k8s:io.kubernetes.pod.namespace":"observability"}}],"toPorts":[{"ports":[{"port":"` + port + `","protocol":"TCP"}]}]}]`
		if !strings.Contains(string(raw), want) {
			t.Errorf("%s: %s, want %s", p, raw, want)
		}
	}
	rendered, err = Render(filepath.Join(repoRoot, chartDir), map[string]any{
		"networkPolicy": map[string]any{"cilium": map[string]any{"metricsNamespace": "observability"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if objs := manifests(t, rendered); objs["CiliumNetworkPolicy/ichor-controller-metrics"] != nil {
		t.Error("metricsNamespace renders policies while networkPolicy.cilium.enabled is off")
	}
}

// uiContainer returns the ichor-ui container and pod spec of a render.
func uiContainer(t *testing.T, objs map[string]map[string]any) (map[string]any, map[string]any) {
	t.Helper()
	dep := objs["Deployment/ichor-ui"]
	if dep == nil {
		t.Fatalf("no ichor-ui Deployment among %d objects", len(objs))
	}
	pod := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	return pod["containers"].([]any)[0].(map[string]any), pod
}

func strs(v any) []string {
	out := make([]string, 0, len(v.([]any)))
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestUIRendersWithDefaults(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	c, pod := uiContainer(t, objs)
	if r := objs["Deployment/ichor-ui"]["spec"].(map[string]any)["replicas"]; r != float64(2) {
		t.Errorf("ichor-ui replicas: %v", r)
	}
	if c["image"] != "ghcr.io/maeshinshin/ichor-ui:v0.0.0-dev" || c["imagePullPolicy"] != "IfNotPresent" {
		t.Errorf("image: %v %v", c["image"], c["imagePullPolicy"])
	}
	args := strings.Join(strs(c["args"]), " ")
	for _, want := range []string{"--listen=:8443", "--issuer-listen=:8444", "--serving-cert-file=/etc/ichor-ui/serving/tls.crt"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	for _, unwanted := range []string{"--ichor-users", "--tls-cert-file", "--oidc-issuer-url", "--issuer="} {
		if strings.Contains(args, unwanted) {
			t.Errorf("default args %q hold %s", args, unwanted)
		}
	}
	var secrets []string
	for _, v := range pod["volumes"].([]any) {
		if s, ok := v.(map[string]any)["secret"].(map[string]any); ok {
			secrets = append(secrets, s["secretName"].(string))
		}
	}
	if n := len(pod["volumes"].([]any)); n != 2 || !slices.Equal(secrets, []string{"ichor-ui-tls", "ichor-ui-signing-key"}) {
		t.Errorf("want only the ichor-ui-tls and ichor-ui-signing-key volumes by default, got %d: %v", n, secrets)
	}
	if !strings.Contains(args, "--signing-key-file=/etc/ichor-ui/signing/signing.key") {
		t.Errorf("args %q lack the shared signing key", args)
	}
	if objs["PodDisruptionBudget/ichor-ui"] == nil {
		t.Error("two ichor-ui replicas need a PodDisruptionBudget")
	}
	svc := objs["Service/ichor-ui"]
	if svc == nil {
		t.Fatal("no Service ichor-ui")
	}
	ports := svc["spec"].(map[string]any)["ports"].([]any)
	if len(ports) != 2 || ports[0].(map[string]any)["port"] != float64(8443) || ports[1].(map[string]any)["port"] != float64(8444) {
		t.Errorf("Service ports: %v, want 8443 (first) and 8444", ports)
	}
}

// TestUIValuesChangeTheRender: with sign-in on (Ichor's users and an
// external provider) the chart renders the two replicas asked for, with
// their PodDisruptionBudget and the shared signing key, and wires the
// provider's client secret and CA.
func TestUIValuesChangeTheRender(t *testing.T) {
	rendered, err := Render(filepath.Join(repoRoot, chartDir), map[string]any{"ichorUI": map[string]any{
		"replicas": 2,
		"image":    map[string]any{"repository": "registry.example/ui", "tag": "v9.9.9", "pullPolicy": "Always"},
		"tls":      map[string]any{"secretName": "my-cert"},
		"oidc": map[string]any{"issuerURL": "https://idp.example.com", "clientID": "ichor",
			"clientSecretName": "idp-client", "caConfigMapName": "idp-ca"},
		"users": map[string]any{"enabled": true, "externalURL": "https://ichor.example.com"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, rendered)
	c, pod := uiContainer(t, objs)
	if r := objs["Deployment/ichor-ui"]["spec"].(map[string]any)["replicas"]; r != float64(2) {
		t.Errorf("replicas with sign-in on: %v, want the 2 asked for", r)
	}
	if objs["PodDisruptionBudget/ichor-ui"] == nil {
		t.Error("two ichor-ui replicas with sign-in on need a PodDisruptionBudget")
	}
	mounts := map[string]string{}
	for _, m := range c["volumeMounts"].([]any) {
		mounts[m.(map[string]any)["name"].(string)] = m.(map[string]any)["mountPath"].(string)
	}
	sources := map[string]string{}
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if s, ok := v["secret"].(map[string]any); ok {
			sources[v["name"].(string)] = "secret/" + s["secretName"].(string)
		}
		if cm, ok := v["configMap"].(map[string]any); ok {
			sources[v["name"].(string)] = "configmap/" + cm["name"].(string)
		}
	}
	for vol, want := range map[string][2]string{
		"signing-key": {"secret/ichor-ui-signing-key", "/etc/ichor-ui/signing"},
		"oidc-client": {"secret/idp-client", "/etc/ichor-ui/oidc-client"},
		"oidc-ca":     {"configmap/idp-ca", "/etc/ichor-ui/oidc-ca"},
	} {
		if sources[vol] != want[0] || mounts[vol] != want[1] {
			t.Errorf("volume %s: %q mounted at %q, want %q at %q", vol, sources[vol], mounts[vol], want[0], want[1])
		}
	}
	if c["image"] != "registry.example/ui:v9.9.9" || c["imagePullPolicy"] != "Always" {
		t.Errorf("image: %v %v", c["image"], c["imagePullPolicy"])
	}
	args := strings.Join(strs(c["args"]), " ")
	for _, want := range []string{"--issuer=https://ichor.example.com", "--ichor-users", "--oidc-issuer-url=https://idp.example.com",
		"--oidc-client-id=ichor", "--tls-cert-file=/etc/ichor-ui/tls/tls.crt", "--tls-key-file=/etc/ichor-ui/tls/tls.key",
		"--signing-key-file=/etc/ichor-ui/signing/signing.key",
		"--oidc-client-secret-file=/etc/ichor-ui/oidc-client/client-secret", "--oidc-ca-file=/etc/ichor-ui/oidc-ca/ca.crt"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	found := false
	for _, v := range pod["volumes"].([]any) {
		if s, ok := v.(map[string]any)["secret"].(map[string]any); ok && s["secretName"] == "my-cert" {
			found = true
		}
	}
	mounted := false
	for _, m := range c["volumeMounts"].([]any) {
		if m.(map[string]any)["mountPath"] == "/etc/ichor-ui/tls" {
			mounted = true
		}
	}
	if !found || !mounted {
		t.Errorf("the operator's Secret is not mounted: volume %v, mount %v", found, mounted)
	}
}

func TestUIUsersNeedAnExternalURL(t *testing.T) {
	for name, ui := range map[string]map[string]any{
		"users": {"users": map[string]any{"enabled": true}},
		"oidc":  {"oidc": map[string]any{"issuerURL": "https://idp.example.com", "clientID": "ichor"}},
	} {
		_, err := Render(filepath.Join(repoRoot, chartDir), map[string]any{"ichorUI": ui})
		if err == nil || !strings.Contains(err.Error(), "ichorUI.users.externalURL") {
			t.Errorf("%s without externalURL: %v, want an error naming ichorUI.users.externalURL", name, err)
		}
	}
	_, err := Render(filepath.Join(repoRoot, chartDir), map[string]any{"ichorUI": map[string]any{
		"users": map[string]any{"externalURL": "https://ichor.example.com"},
		"oidc":  map[string]any{"issuerURL": "https://idp.example.com"},
	}})
	if err == nil || !strings.Contains(err.Error(), "ichorUI.oidc.clientID") {
		t.Errorf("an external provider without clientID: %v, want an error naming ichorUI.oidc.clientID", err)
	}
}

// renderIn renders the chart into release namespace ns.
func renderIn(t *testing.T, ns string, values map[string]any) map[string]map[string]any {
	t.Helper()
	ch, err := loader.Load(filepath.Join(repoRoot, chartDir))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: "ichor", Namespace: ns, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	return manifests(t, out)
}

// The admission policy that limits ichor-ui's Secrets matches ichor-ui's
// ServiceAccount in the release's namespace, and its credential-request
// rights are a Role there, not a ClusterRole.
func TestUIPolicyAndRolesFollowTheReleaseNamespace(t *testing.T) {
	objs := renderIn(t, "tools-ichor", nil)
	vap := objs["ValidatingAdmissionPolicy/ichor-ui-foreign-talosconfig-only"]
	conds := vap["spec"].(map[string]any)["matchConditions"].([]any)
	expr := conds[0].(map[string]any)["expression"].(string)
	if !strings.Contains(expr, "'system:serviceaccount:tools-ichor:ichor-ui'") || strings.Contains(expr, "ichor-system") {
		t.Errorf("the admission policy matches %q, want ichor-ui of the release namespace tools-ichor", expr)
	}
	role := objs["Role/ichor-ui-credential-requests"]
	if role == nil || role["metadata"].(map[string]any)["namespace"] != "tools-ichor" {
		t.Fatalf("ichor-ui's credential requests need a Role in the release namespace: %v", role)
	}
	for _, r := range objs["ClusterRole/ichor-ui"]["rules"].([]any) {
		for _, res := range strs(r.(map[string]any)["resources"]) {
			if res == "taloscredentialrequests" {
				t.Errorf("the ClusterRole ichor-ui still grants %v on taloscredentialrequests", r)
			}
		}
	}
}

// ichorUI.impersonation.users become the controller's --impersonate-user flags.
func TestImpersonationUsersReachTheController(t *testing.T) {
	objs := renderIn(t, namespace, map[string]any{"ichorUI": map[string]any{
		"impersonation": map[string]any{"users": []any{"oidc:alice", "oidc:bob"}},
	}})
	spec := objs["Deployment/ichor-controller"]["spec"].(map[string]any)
	c := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	args := strings.Join(strs(c["args"]), " ")
	for _, want := range []string{"--impersonate-user=oidc:alice", "--impersonate-user=oidc:bob"} {
		if !strings.Contains(args, want) {
			t.Errorf("controller args %q lack %s", args, want)
		}
	}
	objs = renderIn(t, namespace, nil)
	spec = objs["Deployment/ichor-controller"]["spec"].(map[string]any)
	c = spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	if args := strings.Join(strs(c["args"]), " "); strings.Contains(args, "--impersonate-user") {
		t.Errorf("default controller args %q name users", args)
	}
}

// monitoringValues turns every monitoring part on, with labels.
var monitoringValues = map[string]any{"monitoring": map[string]any{
	"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
	"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
	"dashboards":     map[string]any{"enabled": true, "namespace": "grafana"},
}}

var monitoringObjects = []string{
	"ServiceMonitor/ichor-controller", "ServiceMonitor/ichor-ui", "PrometheusRule/ichor",
	"ConfigMap/ichor-dashboard-overview", "ConfigMap/ichor-dashboard-operations", "ConfigMap/ichor-dashboard-backups",
}

func TestMonitoringIsOffByDefault(t *testing.T) {
	objs := renderIn(t, namespace, nil)
	for _, o := range monitoringObjects {
		if objs[o] != nil {
			t.Errorf("%s renders by default; monitoring is off unless asked for", o)
		}
	}
	// The metrics Services and the reader role are always there.
	for _, o := range []string{"Service/ichor-controller-metrics", "Service/ichor-ui-metrics", "ClusterRole/ichor-metrics-reader"} {
		if objs[o] == nil {
			t.Errorf("no %s", o)
		}
	}
}

func TestMonitoringRenders(t *testing.T) {
	objs := renderIn(t, "ops", monitoringValues)
	for _, o := range monitoringObjects {
		obj := objs[o]
		if obj == nil {
			t.Fatalf("monitoring enabled does not render %s", o)
		}
		meta := obj["metadata"].(map[string]any)
		wantNS := "ops"
		if strings.HasPrefix(o, "ConfigMap/") {
			wantNS = "grafana"
			if meta["labels"].(map[string]any)["grafana_dashboard"] != "1" {
				t.Errorf("%s lacks the sidecar's label grafana_dashboard: \"1\": %v", o, meta["labels"])
			}
		} else if meta["labels"].(map[string]any)["release"] != "kube-prometheus-stack" {
			t.Errorf("%s lacks the value's label: %v", o, meta["labels"])
		}
		if meta["namespace"] != wantNS {
			t.Errorf("%s is in namespace %v, want %s", o, meta["namespace"], wantNS)
		}
	}
	sm := objs["ServiceMonitor/ichor-ui"]["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if sn := sm["tlsConfig"].(map[string]any)["serverName"]; sn != "ichor-ui.ops.svc" {
		t.Errorf("ichor-ui's ServiceMonitor verifies %v, want the Service's name in the release namespace", sn)
	}
	// Prometheus's own templates survive Helm's.
	var found bool
	for _, g := range objs["PrometheusRule/ichor"]["spec"].(map[string]any)["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			if r["alert"] == "IchorEtcdBackupStale" {
				found = strings.Contains(r["annotations"].(map[string]any)["summary"].(string), "{{ $labels.backup }}")
			}
		}
	}
	if !found {
		t.Error("the IchorEtcdBackupStale summary lost its {{ $labels.backup }}")
	}
	dash := objs["ConfigMap/ichor-dashboard-backups"]["data"].(map[string]any)["ichor-backups.json"].(string)
	if !strings.Contains(dash, `"legendFormat": "{{backup}}"`) {
		t.Error("the backups dashboard lost its {{backup}} legends")
	}
	var parsed map[string]any
	if err := json.Unmarshal([]byte(dash), &parsed); err != nil || parsed["uid"] != "ichor-backups" {
		t.Errorf("the backups dashboard does not render to its JSON: %v", err)
	}
	// Each part alone.
	objs = renderIn(t, namespace, map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}})
	if objs["PrometheusRule/ichor"] == nil || objs["ServiceMonitor/ichor-controller"] != nil || objs["ConfigMap/ichor-dashboard-overview"] != nil {
		t.Error("prometheusRule.enabled alone must render the rule only")
	}
}
