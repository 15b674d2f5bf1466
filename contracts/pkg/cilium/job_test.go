package cilium

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestJob: the ichor-cni Job runs the given image in kube-system as
// ichor-cni with the host's network, on any node whatever its taints, once,
// with the request ConfigMap mounted read-only where its arguments read it,
// and a deadline one margin past the apply timeout.
func TestJob(t *testing.T) {
	const image = "ghcr.io/maeshinshin/ichor-installer:v0.3.0"

	job := Job("ichor-cni-abc", image, "ichor-cni-abc", 7*time.Minute)
	pod := job.Spec.Template.Spec

	if job.Namespace != "kube-system" || job.Name != "ichor-cni-abc" {
		t.Errorf("Job %s/%s, want kube-system/ichor-cni-abc", job.Namespace, job.Name)
	}

	if pod.ServiceAccountName != "ichor-cni" || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v: want ichor-cni with its token", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}

	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %s: want the host's network with ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}

	if !slices.Equal(pod.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
		t.Errorf("tolerations %+v, want every taint tolerated", pod.Tolerations)
	}

	if pod.RestartPolicy != corev1.RestartPolicyNever || job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 {
		t.Errorf("restartPolicy %s, backoffLimit %v: want one run", pod.RestartPolicy, job.Spec.BackoffLimit)
	}

	if d := job.Spec.ActiveDeadlineSeconds; d == nil || *d != 8*60 {
		t.Errorf("activeDeadlineSeconds %v, want 480 (timeout + 60 s)", d)
	}

	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}

	c := pod.Containers[0]

	// The image's entrypoint is ichor-installer (install.InstallerJob sets
	// only Args too); talosemu's pod runner prepends its binary the same way.
	want := []string{"cni", "apply", "--request", "/etc/ichor-cni/request.json", "--timeout", "7m0s"}
	if c.Image != image || len(c.Command) != 0 || !slices.Equal(c.Args, want) {
		t.Errorf("container image %s command %q args %q, want %s, no command, args %q", c.Image, c.Command, c.Args, image, want)
	}

	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "request" || c.VolumeMounts[0].MountPath != "/etc/ichor-cni" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("volume mounts %+v, want request read-only at /etc/ichor-cni", c.VolumeMounts)
	}

	if len(pod.Volumes) != 1 || pod.Volumes[0].Name != "request" || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != "ichor-cni-abc" {
		t.Errorf("volumes %+v, want the ConfigMap ichor-cni-abc as request", pod.Volumes)
	}

	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v, want no privilege escalation and a read-only root", sc)
	}

	for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
		if labels["app.kubernetes.io/name"] != "ichor-cni" || labels["app.kubernetes.io/managed-by"] != "ichor" {
			t.Errorf("labels %v, want app.kubernetes.io/name ichor-cni, managed-by ichor", labels)
		}
	}
}

// TestJobObjects: the ServiceAccount ichor-cni in kube-system, bound to
// cluster-admin (Helm creates Cilium's ClusterRoles).
func TestJobObjects(t *testing.T) {
	sa, crb := JobObjects()

	if sa.Namespace != "kube-system" || sa.Name != "ichor-cni" {
		t.Errorf("ServiceAccount %s/%s, want kube-system/ichor-cni", sa.Namespace, sa.Name)
	}

	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "cluster-admin" || len(crb.Subjects) != 1 ||
		crb.Subjects[0].Kind != "ServiceAccount" || crb.Subjects[0].Namespace != "kube-system" || crb.Subjects[0].Name != "ichor-cni" {
		t.Errorf("ClusterRoleBinding %+v, want kube-system/ichor-cni bound to cluster-admin", crb)
	}
}

// TestRequestConfigMap: the request travels as JSON under request.json and
// decodes to itself.
func TestRequestConfigMap(t *testing.T) {
	req := Request{Version: "v1.19.3", KubernetesVersion: "1.36.1", UserValues: map[string]any{"debug": map[string]any{"enabled": true}}}
	req.Choices.Tunnel, req.Choices.Nodes = "geneve", 3

	cm, err := RequestConfigMap("ichor-cni-abc", req)
	if err != nil {
		t.Fatal(err)
	}

	if cm.Namespace != "kube-system" || cm.Name != "ichor-cni-abc" {
		t.Errorf("ConfigMap %s/%s, want kube-system/ichor-cni-abc", cm.Namespace, cm.Name)
	}

	got, err := DecodeRequest([]byte(cm.Data["request.json"]))
	if err != nil {
		t.Fatal(err)
	}

	if !reflect.DeepEqual(got, req) {
		t.Errorf("decoded %+v, want %+v", got, req)
	}

	if _, err := DecodeRequest([]byte(`{"values": {}}`)); err == nil {
		t.Error("DecodeRequest accepted an unknown field")
	}
}

// TestValuesSHA256: the hash does not depend on map order nor on whether the
// values were read back from JSON (Helm's storage: numbers as float64), and
// changes with any value.
func TestValuesSHA256(t *testing.T) {
	values := map[string]any{"operator": map[string]any{"replicas": 1}, "ipam": map[string]any{"mode": "kubernetes"}, "list": []any{"a", 2}}

	data, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}

	var back map[string]any
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}

	if ValuesSHA256(values) != ValuesSHA256(back) {
		t.Error("the hash of values read back from JSON differs")
	}

	if ValuesSHA256(nil) != ValuesSHA256(map[string]any{}) {
		t.Error("nil and empty values hash differently")
	}

	back["operator"].(map[string]any)["replicas"] = 2
	if ValuesSHA256(values) == ValuesSHA256(back) {
		t.Error("a changed value hashes the same")
	}
}
