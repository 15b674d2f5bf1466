package install_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// podSpec is the pod template of a Deployment of the install manifest.
func podSpec(t *testing.T, name string) *corev1.PodSpec {
	t.Helper()

	objs, err := install.Objects()
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == name {
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				t.Fatal(err)
			}

			return &d.Spec.Template.Spec
		}
	}

	t.Fatalf("no Deployment %s", name)

	return nil
}

func node(name string, taints ...corev1.Taint) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{Taints: taints}}
}

var (
	controlPlane = corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	dedicated    = corev1.Taint{Key: "example.com/dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	unreachable  = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}
)

func TestSchedulableNodes(t *testing.T) {
	for _, name := range []string{install.ControllerName, install.UIName} {
		pod := podSpec(t, name)

		cordoned := node("w-3")
		cordoned.Spec.Unschedulable = true
		cordoned.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}

		for _, tc := range []struct {
			what  string
			nodes []corev1.Node
			want  int
		}{
			{"no node", nil, 0},
			// Ichor's pods tolerate the control-plane taint: a control-plane-only cluster runs them.
			{"one tainted control plane", []corev1.Node{node("cp-1", controlPlane)}, 1},
			{"three control planes", []corev1.Node{node("cp-1", controlPlane), node("cp-2", controlPlane), node("cp-3", controlPlane)}, 3},
			// A taint Ichor does not tolerate takes the node out.
			{"a dedicated worker", []corev1.Node{node("cp-1", controlPlane), node("w-1", dedicated)}, 1},
			// Cordoned and unreachable nodes still count: a drain or a reboot passes.
			{"a cordoned and an unreachable worker", []corev1.Node{node("cp-1", controlPlane), cordoned, node("w-2", unreachable)}, 3},
		} {
			if got := install.SchedulableNodes(tc.nodes, pod); got != tc.want {
				t.Errorf("%s, %s: %d schedulable nodes, want %d", name, tc.what, got, tc.want)
			}
		}
	}

	// A nodeSelector counts only the nodes it matches.
	pod := podSpec(t, install.ControllerName)
	pod.NodeSelector = map[string]string{"kubernetes.io/hostname": "w-1"}

	if got := install.SchedulableNodes([]corev1.Node{node("cp-1"), node("w-1")}, pod); got != 1 {
		t.Errorf("with a nodeSelector: %d", got)
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		nodes  int
		single bool
		want   install.Availability
		text   string
	}{
		{0, false, install.Availability{SchedulableNodes: 0, Replicas: 1}, "0 schedulable nodes: 1 replica, no PodDisruptionBudget"},
		{1, false, install.Availability{SchedulableNodes: 1, Replicas: 1}, "1 schedulable node: 1 replica, no PodDisruptionBudget"},
		{2, false, install.Availability{SchedulableNodes: 2, Replicas: 2, PDB: true}, "2 schedulable nodes: 2 replicas with a PodDisruptionBudget"},
		{5, false, install.Availability{SchedulableNodes: 5, Replicas: 2, PDB: true}, "5 schedulable nodes: 2 replicas with a PodDisruptionBudget"},
		{5, true, install.Availability{SchedulableNodes: 5, Replicas: 1}, "5 schedulable nodes: 1 replica, no PodDisruptionBudget"},
	} {
		got := install.Decide(tc.nodes, tc.single)
		if got != tc.want || got.String() != tc.text || got.HighlyAvailable() != (tc.want.Replicas == 2) {
			t.Errorf("Decide(%d, %v) = %+v %q, want %+v %q", tc.nodes, tc.single, got, got.String(), tc.want, tc.text)
		}
	}

	ui := podSpec(t, install.UIName)
	if install.MustStaySingle(ui) {
		t.Fatal("the manifest's ichor-ui is no issuer, yet it must stay single")
	}

	ui.Containers[0].Args = append(ui.Containers[0].Args, "--issuer=https://ichor.example.com")
	if install.MustStaySingle(ui) {
		t.Fatal("the manifest's ichor-ui as an issuer, with the shared signing key, must stay single")
	}

	// Without the shared key each replica would sign with a key of its own.
	ui.Containers[0].Args = slices.DeleteFunc(ui.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--signing-key-file=") })
	if !install.MustStaySingle(ui) {
		t.Fatal("ichor-ui as an issuer without --signing-key-file may run two replicas")
	}
}

func TestStepsAndImage(t *testing.T) {
	objs, err := install.Objects()
	if err != nil {
		t.Fatal(err)
	}

	got := map[string]install.Step{}
	for _, o := range objs {
		got[o.GetKind()+"/"+o.GetName()] = install.StepOf(o)
	}

	for key, want := range map[string]install.Step{
		"Namespace/ichor-system":                                      install.StepInstallerRBAC,
		"ServiceAccount/ichor-installer":                              install.StepInstallerRBAC,
		"ClusterRole/ichor-installer":                                 install.StepInstallerRBAC,
		"RoleBinding/ichor-installer":                                 install.StepInstallerRBAC,
		"CustomResourceDefinition/talosmachines.ichor.maesh.dev":      install.StepCRDs,
		"ClusterRole/ichor-controller":                                install.StepController,
		"Deployment/ichor-controller":                                 install.StepController,
		"ValidatingWebhookConfiguration/ichor-validating-webhook":     install.StepController,
		"PodDisruptionBudget/ichor-controller":                        install.StepController,
		"Deployment/ichor-ui":                                         install.StepUI,
		"ClusterRole/ichor-ui-impersonate-users":                      install.StepUI,
		"ValidatingAdmissionPolicy/ichor-ui-foreign-talosconfig-only": install.StepUI,
		"PodDisruptionBudget/ichor-ui":                                install.StepUI,
	} {
		if s, ok := got[key]; !ok || s != want {
			t.Errorf("%s: step %v (present %v), want %v", key, s, ok, want)
		}
	}

	for v, want := range map[string]string{
		"v0.3.0":              install.InstallerRepository + ":v0.3.0",
		"v0.3.0-rc.1+abc1234": install.InstallerRepository + ":v0.3.0-rc.1",
		"v0.0.0-dev+abc1234":  install.InstallerRepository + ":latest",
		"v0.0.0-dev":          install.InstallerRepository + ":latest",
	} {
		if got := install.InstallerImage(v); got != want {
			t.Errorf("InstallerImage(%s) = %s, want %s", v, got, want)
		}
	}
}

func TestJobName(t *testing.T) {
	for v, want := range map[string]string{
		"v0.3.0":              "ichor-install-v0-3-0",
		"v0.3.0-rc.1+abc1234": "ichor-install-v0-3-0-rc-1",
		"v0.0.0-dev+abc1234":  "ichor-install-v0-0-0-dev",
	} {
		if got := install.JobName(v); got != want {
			t.Errorf("JobName(%s) = %s, want %s", v, got, want)
		}
	}

	job := install.InstallerJob("ichor-test", install.JobName("v0.3.0"), install.InstallerImage("v0.3.0"), "--wait-timeout=2m")
	c := job.Spec.Template.Spec.Containers[0]

	if job.Namespace != "ichor-test" || job.Spec.Template.Spec.ServiceAccountName != install.InstallerName || *job.Spec.BackoffLimit != 0 ||
		c.Image != "ghcr.io/maeshinshin/ichor-installer:v0.3.0" || strings.Join(c.Args, " ") != "--namespace=ichor-test --wait-timeout=2m" {
		t.Fatalf("the Job: %+v", job)
	}
}
