package installer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pollInterval is how often a wait looks again.
const pollInterval = time.Second

// deploymentProgress says whether a Deployment has rolled out and is
// available, as `kubectl rollout status` judges it: the Deployment
// controller saw the current generation, every replica runs the current
// template, no old replica is left, and every replica is available.
func deploymentProgress(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}

	st := d.Status

	switch {
	case st.ObservedGeneration < d.Generation:
		return false, fmt.Sprintf("the Deployment controller has not seen generation %d yet", d.Generation)
	case st.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d of %d replicas run the new template", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas are still there", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < want:
		return false, fmt.Sprintf("%d of %d replicas available", st.AvailableReplicas, want)
	}

	return true, ""
}

// waitDeployment waits until the Deployment name is available; on timeout
// the error says why, from its pods. Each read has the caller's context, not
// the wait's deadline, so the last thing seen is the Deployment's state and
// not the deadline cutting a read short.
func (in *Installer) waitDeployment(ctx context.Context, name string, timeout time.Duration) error {
	var (
		last string
		dep  *appsv1.Deployment
	)

	deadline := time.Now().Add(timeout)

	for {
		d := &appsv1.Deployment{}
		if err := in.c.Get(ctx, client.ObjectKey{Namespace: in.o.Namespace, Name: name}, d); err != nil {
			last = err.Error()
		} else {
			dep = d

			ok, why := deploymentProgress(d)
			if ok {
				return nil
			}

			last = why

			if loop := in.crashLoop(ctx, d); loop != "" {
				return fmt.Errorf("the Deployment %s will not become available: %s", name, loop)
			}
		}

		if time.Now().After(deadline) {
			break
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}

	msg := fmt.Sprintf("Deployment %s did not become available within %s: %s", name, timeout, last)

	if dep != nil {
		if pods := in.podProblems(ctx, dep); pods != "" {
			msg += "; " + pods
		}
	}

	return errors.New(msg)
}

// podProblems describes the Deployment's pods that are not ready: not
// scheduled (the scheduler's message), a container waiting (its reason and
// message, such as ImagePullBackOff) or terminated with an exit code.
func (in *Installer) podProblems(ctx context.Context, d *appsv1.Deployment) string {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return ""
	}

	pods := &corev1.PodList{}
	if err := in.c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return "its pods cannot be read: " + err.Error()
	}

	var out []string

	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || podReady(p) {
			continue
		}

		if why := podProblem(p); why != "" {
			out = append(out, "pod "+p.Name+" "+why)
		}

		if len(out) == 3 {
			break
		}
	}

	return strings.Join(out, "; ")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func podProblem(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return fmt.Sprintf("is %s, not scheduled: %s", p.Status.Phase, oneLine(c.Message))
		}
	}

	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			return fmt.Sprintf("container %s is waiting: %s %s", cs.Name, cs.State.Waiting.Reason, oneLine(cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			return fmt.Sprintf("container %s exited with code %d (%s)", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		case !cs.Ready:
			return fmt.Sprintf("container %s is not ready (restarts: %d)", cs.Name, cs.RestartCount)
		}
	}

	return "is " + string(p.Status.Phase) + ", not ready"
}

func oneLine(s string) string {
	return strings.TrimSpace(strings.ReplaceAll(s, "\n", " "))
}

// waitDeploymentStarted waits until the Deployment name is available, or
// rolled out (as deploymentProgress judges it, availability aside) with each
// of its pods running every container of the current template, not all of
// them Ready: what can be waited for of a Deployment that is not Ready by
// design yet (ichor-ui before the namespace has a TalosCluster). Pods that
// are Ready are waited for until the Deployment counts them available. It
// says whether the Deployment is available.
func (in *Installer) waitDeploymentStarted(ctx context.Context, name string, timeout time.Duration) (bool, error) {
	var (
		last string
		dep  *appsv1.Deployment
	)

	deadline := time.Now().Add(timeout)

	for {
		d := &appsv1.Deployment{}
		if err := in.c.Get(ctx, client.ObjectKey{Namespace: in.o.Namespace, Name: name}, d); err != nil {
			last = err.Error()
		} else {
			dep = d

			ok, why := deploymentProgress(d)
			if loop := in.crashLoop(ctx, d); !ok && loop != "" {
				return false, fmt.Errorf("the Deployment %s will not roll out: %s", name, loop)
			}

			switch {
			case ok:
				return true, nil
			case !strings.HasSuffix(why, " available"):
				last = why
			default:
				running, allReady, err := in.podsRunning(ctx, d)

				switch {
				case err != nil:
					last = err.Error()
				case running && !allReady:
					return false, nil
				default:
					last = why
				}
			}
		}

		if time.Now().After(deadline) {
			break
		}

		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(pollInterval):
		}
	}

	msg := fmt.Sprintf("Deployment %s did not become available within %s, nor roll out with its containers running: %s", name, timeout, last)

	if dep != nil {
		if pods := in.podProblems(ctx, dep); pods != "" {
			msg += "; " + pods
		}
	}

	return false, errors.New(msg)
}

// crashLoopRestarts is how often a container of the Deployment's current
// template must have restarted, and be backing off, before a wait gives up
// on it: a release whose controller exits at start is rolled back in about
// half a minute (the kubelet's back-off: 0, 10, 20 s) rather than at the
// wait's timeout, while a container that fails once or twice as it starts
// (the API server briefly away) is still waited for.
const crashLoopRestarts = 3

// revisionAnnotation is the Deployment controller's revision number, on a
// Deployment and on the ReplicaSet of each of its templates.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// crashLoop describes a pod of the Deployment's current template (its
// newest ReplicaSet, by the Deployment controller's revision) whose
// container is in CrashLoopBackOff after crashLoopRestarts restarts; ""
// when there is none, or the current template's ReplicaSet is not known yet.
// Pods of the previous template are not looked at: they are what runs.
func (in *Installer) crashLoop(ctx context.Context, d *appsv1.Deployment) string {
	rev := d.Annotations[revisionAnnotation]
	if rev == "" || d.Status.ObservedGeneration < d.Generation {
		return ""
	}

	sets := &appsv1.ReplicaSetList{}
	if err := in.c.List(ctx, sets, client.InNamespace(d.Namespace)); err != nil {
		return ""
	}

	hash := ""

	for i := range sets.Items {
		rs := &sets.Items[i]
		if metav1.IsControlledBy(rs, d) && rs.Annotations[revisionAnnotation] == rev {
			hash = rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		}
	}

	if hash == "" {
		return ""
	}

	pods := &corev1.PodList{}
	if err := in.c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabels{appsv1.DefaultDeploymentUniqueLabelKey: hash}); err != nil {
		return ""
	}

	for i := range pods.Items {
		if why := podCrashLoop(&pods.Items[i]); why != "" {
			return why
		}
	}

	return ""
}

// podCrashLoop describes p's first container in CrashLoopBackOff after
// crashLoopRestarts restarts; "" when there is none or p is going away.
func podCrashLoop(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return ""
	}

	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.RestartCount < crashLoopRestarts {
			continue
		}

		last := ""
		if t := cs.LastTerminationState.Terminated; t != nil {
			last = fmt.Sprintf(", last exit code %d (%s)", t.ExitCode, t.Reason)
		}

		return fmt.Sprintf("pod %s of its new template crash-loops: container %s restarted %d times%s; `kubectl logs -n %s %s -c %s --previous` shows why",
			p.Name, cs.Name, cs.RestartCount, last, p.Namespace, p.Name, cs.Name)
	}

	return ""
}

// podsRunning says whether as many of the Deployment's pods as it has
// replicas run every container (started), and whether all of those are Ready.
func (in *Installer) podsRunning(ctx context.Context, d *appsv1.Deployment) (bool, bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return false, false, err
	}

	pods := &corev1.PodList{}
	if err := in.c.List(ctx, pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return false, false, fmt.Errorf("its pods cannot be read: %w", err)
	}

	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}

	running, ready := int32(0), int32(0)

	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) < len(d.Spec.Template.Spec.Containers) {
			continue
		}

		started := true

		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil || cs.Started == nil || !*cs.Started {
				started = false
			}
		}

		if started {
			running++

			if podReady(p) {
				ready++
			}
		}
	}

	return running >= want, ready >= running, nil
}
