package cilium

import (
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ichor-cni Job: the installer image running `ichor-installer cni apply`
// in kube-system, which hands Cilium over from Talos's inline manifest to the
// Helm release and upgrades it later.
const (
	// JobServiceAccount is the ServiceAccount (in kube-system) the Job runs
	// as, and the name of its ClusterRoleBinding.
	JobServiceAccount = "ichor-cni"
	// JobAppName is the app.kubernetes.io/name label of the Job's objects.
	JobAppName = "ichor-cni"
	// RequestKey is the key of the Request's JSON in the Job's ConfigMap.
	RequestKey = "request.json"
	// RequestDir is where the ConfigMap is mounted in the Job's container.
	RequestDir = "/etc/ichor-cni"
	// JobDeadlineMargin is added to the apply timeout for the Job's
	// activeDeadlineSeconds: the start of the process, reading the release,
	// a rollback's start.
	JobDeadlineMargin = 60 * time.Second
)

// jobLabels are the labels of every object of the Job.
func jobLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": JobAppName, "app.kubernetes.io/managed-by": "ichor"}
}

// JobObjects are what the Job needs before it can run: its ServiceAccount in
// kube-system and a ClusterRoleBinding of it to cluster-admin. cluster-admin,
// because Helm installs whatever the chart holds: Cilium's chart creates
// ClusterRoles and ClusterRoleBindings, and granting a role needs every
// permission it grants or the escalate and bind verbs (RBAC's escalation
// check), which amounts to cluster-admin for Cilium's rules; CRDs, webhooks
// and Namespaces-wide objects follow with later chart versions.
func JobObjects() (sa *corev1.ServiceAccount, crb *rbacv1.ClusterRoleBinding) {
	sa = &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: JobServiceAccount, Labels: jobLabels()},
	}
	crb = &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: JobServiceAccount, Labels: jobLabels()},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: JobServiceAccount}},
	}
	return sa, crb
}

// RequestConfigMap is the ConfigMap name in kube-system holding req as JSON
// under RequestKey, which Job mounts.
func RequestConfigMap(name string, req Request) (*corev1.ConfigMap, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode the Cilium request: %w", err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, Labels: jobLabels()},
		Data:       map[string]string{RequestKey: string(data)},
	}, nil
}

// JobArgs are the arguments of the Job's container: the image's entrypoint
// is ichor-installer (as for install.InstallerJob, which sets only Args), so
// the process is `ichor-installer cni apply --request <file> --timeout <d>`.
func JobArgs(timeout time.Duration) []string {
	return []string{"cni", "apply", "--request", RequestDir + "/" + RequestKey, "--timeout", timeout.String()}
}

// Job is the Job name in kube-system that runs image (Ichor's installer
// image) to apply the Request in the ConfigMap configMap, waiting up to
// timeout. It runs once (backoffLimit 0: a failed run is reported, the
// controller decides about another), as the ServiceAccount ichor-cni
// (JobObjects), with the host's network: while Cilium is handed over there
// may be no pod network, and the API server is reached through the node's.
// It tolerates every taint, so it runs on a control plane even when every
// node is tainted (not-ready nodes included: Cilium may be down).
// kube-system is not under the restricted Pod Security Standard, but the
// container keeps its rules where hostNetwork allows: non-root, no
// privilege escalation, no capabilities, read-only root file system,
// RuntimeDefault seccomp.
func Job(name, image, configMap string, timeout time.Duration) *batchv1.Job {
	labels := jobLabels()
	deadline := int64((timeout + JobDeadlineMargin) / time.Second)
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            new(int32(0)),
			ActiveDeadlineSeconds:   &deadline,
			TTLSecondsAfterFinished: new(int32(24 * 3600)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:           JobServiceAccount,
					AutomountServiceAccountToken: new(true),
					RestartPolicy:                corev1.RestartPolicyNever,
					HostNetwork:                  true,
					DNSPolicy:                    corev1.DNSClusterFirstWithHostNet,
					PriorityClassName:            "system-cluster-critical",
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   new(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name:  "cni",
						Image: image,
						Args:  JobArgs(timeout),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: new(false),
							ReadOnlyRootFilesystem:   new(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "request", MountPath: RequestDir, ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{
						Name:         "request",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}},
					}},
				},
			},
		},
	}
}
