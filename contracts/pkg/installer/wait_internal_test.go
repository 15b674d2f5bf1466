package installer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodCrashLoop: a container backing off after crashLoopRestarts restarts
// is a crash loop, named with its last exit code and the way to its log; one
// that restarted fewer times, one waiting for another reason, and a pod going
// away are not.
func TestPodCrashLoop(t *testing.T) {
	pod := func(reason string, restarts int32) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "ichor-controller-abc", Namespace: "ichor-system"},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
				Name: "manager", RestartCount: restarts,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}},
			}}},
		}
	}

	got := podCrashLoop(pod("CrashLoopBackOff", crashLoopRestarts))
	for _, want := range []string{"pod ichor-controller-abc of its new template crash-loops", "container manager restarted 3 times",
		"last exit code 2 (Error)", "kubectl logs -n ichor-system ichor-controller-abc -c manager --previous"} {
		if !strings.Contains(got, want) {
			t.Errorf("podCrashLoop = %q, want it to say %q", got, want)
		}
	}

	going := pod("CrashLoopBackOff", 9)
	going.DeletionTimestamp = &metav1.Time{}

	for name, p := range map[string]*corev1.Pod{
		"fewer restarts": pod("CrashLoopBackOff", crashLoopRestarts-1),
		"pulling":        pod("ImagePullBackOff", 9),
		"going away":     going,
	} {
		if got := podCrashLoop(p); got != "" {
			t.Errorf("%s: podCrashLoop = %q, want no crash loop", name, got)
		}
	}
}
