package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// JobDeadline bounds an installer Job: its waits (CRDs, two Deployments, the
// post-checks, a rollback) with room to spare.
const JobDeadline = 30 * time.Minute

// JobLogLines is how many of a failed Job's last log lines are reported.
const JobLogLines = 80

var notName = regexp.MustCompile(`[^a-z0-9-]+`)

// JobName is the installer Job of a version: ichor-install-<version>, a DNS
// label (v0.3.0-rc.1 → ichor-install-v0-3-0-rc-1).
func JobName(version string) string {
	n := "ichor-install-" + strings.Trim(notName.ReplaceAllString(strings.ToLower(ReleaseVersion(version)), "-"), "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}

	return n
}

// InstallerJob is the Job that runs the installer image in namespace as
// the ServiceAccount ichor-installer (whose RBAC the manifest defines and
// the installer applies first). It runs once (a failed install rolls back
// by itself; retrying is a person's decision), tolerates control-plane
// nodes, and meets the restricted Pod Security Standard Ichor's namespace
// enforces. The finished Job is kept for a day, so its log can be read.
func InstallerJob(namespace, name, image string, args ...string) *batchv1.Job {
	labels := map[string]string{"app.kubernetes.io/name": InstallerName, "app.kubernetes.io/part-of": "ichor"}
	deadline := int64(JobDeadline / time.Second)

	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            new(int32(0)),
			ActiveDeadlineSeconds:   &deadline,
			TTLSecondsAfterFinished: new(int32(24 * 3600)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: InstallerName,
					RestartPolicy:      corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   new(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:  "installer",
						Image: image,
						Args:  append([]string{"--namespace=" + namespace}, args...),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: new(false),
							ReadOnlyRootFilesystem:   new(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// JobResult is how an installer Job ended.
type JobResult struct {
	// Succeeded says the Job completed.
	Succeeded bool
	// Reason is the Job's Failed condition (reason and message) when it failed.
	Reason string
	// Log is the last JobLogLines lines of its pod's log when it failed, or
	// why the log cannot be read.
	Log string
}

// WaitJob waits up to timeout for the Job namespace/name to complete or
// fail, telling progress each new state of its pod; a failed Job's result
// carries its pod's log.
func WaitJob(ctx context.Context, c client.Client, cs kubernetes.Interface, namespace, name string, timeout time.Duration, progress func(string)) (JobResult, error) {
	var (
		res  JobResult
		last string
	)

	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		job := &batchv1.Job{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, job); err != nil {
			if apierrors.IsNotFound(err) {
				return false, fmt.Errorf("the installer Job %s/%s was deleted", namespace, name)
			}

			// A transient read error; the timeout bounds the wait.
			return false, nil
		}

		for _, cond := range job.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				continue
			}

			switch cond.Type {
			case batchv1.JobComplete:
				res.Succeeded = true

				return true, nil
			case batchv1.JobFailed:
				res.Reason = strings.TrimSpace(cond.Reason + ": " + cond.Message)

				return true, nil
			}
		}

		if state := podState(ctx, c, namespace, name); state != last && state != "" {
			last = state
			progress(state)
		}

		return false, nil
	})
	if err != nil {
		if wait.Interrupted(err) {
			return res, fmt.Errorf("the installer Job %s/%s did not finish within %s (last: %s); follow it with `kubectl logs -n %s job/%s -f`",
				namespace, name, timeout, last, namespace, name)
		}

		return res, err
	}

	if !res.Succeeded {
		res.Log = JobLog(ctx, c, cs, namespace, name)
	}

	return res, nil
}

// podState says what the Job's newest pod is doing.
func podState(ctx context.Context, c client.Client, namespace, job string) string {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: job}); err != nil || len(pods.Items) == 0 {
		return "waiting for the Job's pod"
	}

	p := newest(pods.Items)

	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
			return fmt.Sprintf("pod %s is not scheduled: %s", p.Name, cond.Message)
		}
	}

	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			return fmt.Sprintf("pod %s: %s %s", p.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
	}

	return fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
}

func newest(pods []corev1.Pod) *corev1.Pod {
	n := &pods[0]
	for i := range pods {
		if pods[i].CreationTimestamp.After(n.CreationTimestamp.Time) {
			n = &pods[i]
		}
	}

	return n
}

// JobLog returns the last JobLogLines lines of the Job's newest pod's log,
// or a line that says why it cannot be read. c lists the Job's pods (the
// controller passes its uncached reader: it does not watch pods).
func JobLog(ctx context.Context, c client.Reader, cs kubernetes.Interface, namespace, job string) string {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: job}); err != nil {
		return "(the Job's pods cannot be listed: " + err.Error() + ")"
	}

	if len(pods.Items) == 0 {
		return "(the Job has no pod: it never ran)"
	}

	p := newest(pods.Items)
	lines := int64(JobLogLines)

	raw, err := cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(the log of pod %s cannot be read: %v)", p.Name, err)
	}

	return string(bytes.TrimRight(raw, "\n"))
}

// ErrNotInstalled means an installer Job completed but the IchorInstallation
// does not report its version installed.
var ErrNotInstalled = errors.New("the installer Job completed, but Ichor does not report the version installed")

// CheckInstalled confirms, after a completed Job, that the IchorInstallation
// reports version installed.
func CheckInstalled(ctx context.Context, c client.Reader, version string) error {
	ii := &ichorv1alpha1.IchorInstallation{}
	if err := c.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); err != nil {
		return fmt.Errorf("%w: reading IchorInstallation %s: %w", ErrNotInstalled, ichorv1alpha1.IchorInstallationName, err)
	}

	if got, want := ii.Status.InstalledVersion, ReleaseVersion(version); got != want {
		return fmt.Errorf("%w: IchorInstallation %s reports %q, not %s", ErrNotInstalled, ii.Name, got, want)
	}

	return nil
}
