package netpol

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../../.."

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()

	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}

	objs, err := parse(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}

	return objs
}

func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()

	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}

	return out
}

// portArg finds the port of a listen flag's value (:8443, 9443).
var portArg = regexp.MustCompile(`^--[a-z-]+=(?:[^=:]*:)?(\d{2,5})$`)

// TestFlowsMatchTheManifests holds Flows to the Deployments and Services of
// kustomize/base: every port a container of Ichor's declares (and every port
// its flags listen on) is the destination of a flow, under its name and
// number; every flow to Ichor's pods names such a port; the probes are
// flows from the host; the Services' target ports are flows; and the
// policies' selectors are the pods' labels.
func TestFlowsMatchTheManifests(t *testing.T) {
	flows := Flows(ns, Options{MetricsNamespace: "monitoring"})
	policies := Policies(ns, Options{MetricsNamespace: "monitoring"})

	// A flow to Ichor's pod by the port's name.
	flowTo := func(app, portName string, from Peer) (Flow, bool) {
		for _, f := range flows {
			if f.To.Entity == "" && f.To.Namespace == ns && f.To.Labels[AppLabel] == app && f.PortName == portName &&
				(from.Entity == "" && from.Namespace == "" || reflect.DeepEqual(f.From, from)) {
				return f, true
			}
		}

		return Flow{}, false
	}

	deployments := map[string]string{"kustomize/base/manager/deployment.yaml": ControllerPolicy, "kustomize/base/ui/deployment.yaml": UIPolicy}
	containerPorts := map[string]map[string]int32{}

	for path, app := range deployments {
		objs := readObjects(t, path)
		if len(objs) != 1 {
			t.Fatalf("%s: want one Deployment, got %d objects", path, len(objs))
		}

		d := typed[appsv1.Deployment](t, objs[0])
		if got := d.Spec.Template.Labels[AppLabel]; got != app {
			t.Fatalf("%s: the pods' %s is %q; the policies select %q", path, AppLabel, got, app)
		}

		ports := map[string]int32{}
		containerPorts[app] = ports

		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort

				f, ok := flowTo(app, p.Name, Peer{})
				if !ok {
					t.Errorf("%s: container %s declares port %s (%d) and no flow reaches it", path, c.Name, p.Name, p.ContainerPort)

					continue
				}

				if f.Port != int(p.ContainerPort) || f.Protocol != string(p.Protocol) {
					t.Errorf("%s: port %s is %d/%s; the flows say %d/%s", path, p.Name, p.ContainerPort, p.Protocol, f.Port, f.Protocol)
				}
			}

			for _, arg := range c.Args {
				m := portArg.FindStringSubmatch(arg)
				if m == nil {
					continue
				}

				n, _ := strconv.Atoi(m[1])
				if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == n }) {
					t.Errorf("%s: container %s listens on %d (%s), which it does not declare", path, c.Name, n, arg)
				}
			}

			for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if probe == nil {
					continue
				}

				if probe.HTTPGet == nil || probe.HTTPGet.Port.Type != intstr.String {
					t.Errorf("%s: a probe of %s is not an httpGet on a named port; the test reads only those", path, c.Name)

					continue
				}

				f, ok := flowTo(app, probe.HTTPGet.Port.StrVal, Entity(EntityHost))
				if !ok {
					t.Errorf("%s: the kubelet probes port %s and no flow from the host reaches it", path, probe.HTTPGet.Port.StrVal)

					continue
				}

				if _, allowed, err := Allows(policies, f); err != nil || !allowed {
					t.Errorf("%s: the probe's flow %s is not allowed (%v)", path, f, err)
				}
			}
		}
	}

	for _, f := range flows {
		if f.To.Entity != "" || f.To.Namespace != ns {
			if f.PortName != "" {
				t.Errorf("%s names port %s of a peer that is not Ichor's", f, f.PortName)
			}

			continue
		}

		ports, ok := containerPorts[f.To.Labels[AppLabel]]
		if !ok {
			t.Errorf("%s: no Deployment of kustomize/base runs %s", f, f.To)

			continue
		}

		if n, ok := ports[f.PortName]; !ok || int(n) != f.Port {
			t.Errorf("%s: port %q is %d in the Deployment", f, f.PortName, n)
		}
	}

	// The Services' target ports: the API server reaches the webhooks through
	// ichor-webhook, the issuer through ichor-ui's oidc port.
	services := map[string]Peer{"ichor-webhook": Entity(EntityKubeAPIServer), "ichor-ui": {}, "ichor-controller-metrics": {}, "ichor-ui-metrics": {}}
	seen := 0

	for _, path := range []string{"kustomize/base/manager/service.yaml", "kustomize/base/ui/service.yaml"} {
		for _, o := range readObjects(t, path) {
			from, ok := services[o.GetName()]
			if !ok {
				t.Errorf("%s: Service %s is new: say which flows reach it", path, o.GetName())

				continue
			}

			seen++
			svc := typed[corev1.Service](t, o)
			app := svc.Spec.Selector[AppLabel]

			for _, p := range svc.Spec.Ports {
				if p.TargetPort.Type != intstr.String {
					t.Errorf("Service %s: port %s targets a number; name the container port", svc.Name, p.Name)

					continue
				}

				f, ok := flowTo(app, p.TargetPort.StrVal, from)
				if !ok {
					t.Errorf("Service %s: no flow from %v reaches %s's port %s", svc.Name, from, app, p.TargetPort.StrVal)

					continue
				}

				if _, allowed, err := Allows(policies, f); err != nil || !allowed {
					t.Errorf("Service %s: %s is not allowed (%v)", svc.Name, f, err)
				}
			}
		}
	}

	if seen != len(services) {
		t.Errorf("found %d of the Services %v", seen, services)
	}

	// The installer Job's pods carry the label its policy selects.
	job := install.InstallerJob(ns, "ichor-install-test", "installer:test")
	if got := job.Spec.Template.Labels[AppLabel]; got != InstallerPolicy {
		t.Errorf("the installer Job's pods are %s=%q; the policy selects %q", AppLabel, got, InstallerPolicy)
	}
}

// kustomizeNamespace is the namespace a kustomization.yaml sets.
func kustomizeNamespace(t *testing.T, dir string) string {
	t.Helper()

	data, err := os.ReadFile(filepath.Join(repoRoot, dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}

	if !slices.Equal(k.Resources, []string{"policies.yaml"}) {
		t.Fatalf("%s: resources %v; the test reads policies.yaml only", dir, k.Resources)
	}

	return k.Namespace
}

// kustomizePolicies reads the policies as kustomize builds them (its only
// transformation here is the namespace); with metrics, metrics/ too.
func kustomizePolicies(t *testing.T, metrics bool) []*unstructured.Unstructured {
	t.Helper()

	dirs := []string{"kustomize/optional/cilium-network-policy"}
	if metrics {
		dirs = append(dirs, "kustomize/optional/cilium-network-policy/metrics")
	}

	var out []*unstructured.Unstructured

	for _, dir := range dirs {
		namespace := kustomizeNamespace(t, dir)
		for _, o := range readObjects(t, filepath.Join(dir, "policies.yaml")) {
			o.SetNamespace(namespace)
			out = append(out, o)
		}
	}

	return out
}

// chartPolicies renders charts/ichor with networkPolicy.cilium set to values
// in namespace and returns its CiliumNetworkPolicies.
func chartPolicies(t *testing.T, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()

	ch, err := loader.Load(filepath.Join(repoRoot, "charts/ichor"))
	if err != nil {
		t.Fatal(err)
	}

	vals, err := chartutil.ToRenderValues(ch, map[string]any{"networkPolicy": map[string]any{"cilium": values}},
		chartutil.ReleaseOptions{Name: "ichor", Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}

	rendered, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatal(err)
	}

	var out []*unstructured.Unstructured

	for _, file := range slices.Sorted(func(yield func(string) bool) {
		for k := range rendered {
			if !yield(k) {
				return
			}
		}
	}) {
		if !strings.Contains(file, "/templates/ciliumnetworkpolicy-") {
			continue
		}

		objs, err := parse([]byte(rendered[file]))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}

		out = append(out, objs...)
	}

	return out
}

// samePolicies fails unless got and want hold the same objects, by name.
func samePolicies(t *testing.T, what string, got, want []*unstructured.Unstructured) {
	t.Helper()

	byName := func(objs []*unstructured.Unstructured) map[string]string {
		out := map[string]string{}

		for _, o := range objs {
			// Through JSON and back, so that numbers and empty maps compare alike.
			raw, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}

			out[o.GetName()] = string(raw)
		}

		return out
	}

	g, w := byName(got), byName(want)
	for name, text := range w {
		if g[name] != text {
			t.Errorf("%s: %s differs from netpol.Policies:\n--- got\n%s\n--- want\n%s", what, name, g[name], text)
		}
	}

	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("%s: %s is not among netpol.Policies", what, name)
		}
	}
}

// TestPoliciesMatchKustomizeAndChart holds the three places the policy set
// lives in together: kustomize's source, the chart's templates and the set
// this package embeds (which the installer applies).
func TestPoliciesMatchKustomizeAndChart(t *testing.T) {
	samePolicies(t, "kustomize", kustomizePolicies(t, false), Policies(ns, Options{}))
	// metrics/ names the placeholder namespace.
	samePolicies(t, "kustomize with metrics/", kustomizePolicies(t, true), Policies(ns, Options{MetricsNamespace: metricsPlaceholder}))

	for _, c := range []struct {
		namespace string
		opts      Options
	}{
		{ns, Options{}},
		{"tenant-ichor", Options{}},
		{"tenant-ichor", Options{MetricsNamespace: "observability"}},
	} {
		what := fmt.Sprintf("the chart in %s with metricsNamespace %q", c.namespace, c.opts.MetricsNamespace)
		samePolicies(t, what, chartPolicies(t, c.namespace, map[string]any{"enabled": true, "metricsNamespace": c.opts.MetricsNamespace}),
			Policies(c.namespace, c.opts))
	}

	if got := chartPolicies(t, ns, map[string]any{"metricsNamespace": "observability"}); len(got) != 0 {
		t.Errorf("networkPolicy.cilium.enabled off renders %d policies", len(got))
	}
}
