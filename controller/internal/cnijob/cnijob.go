// Package cnijob runs the ichor-cni Job, the one way Ichor changes its
// Cilium Helm release (architecture, "Cilium"): the installer image's
// `ichor-installer cni apply` in kube-system, with a request in a ConfigMap
// of the same name. The hand-over controller (values, hand-over) and the cni
// operation (chart upgrades) share it; what a Job did is read from Helm's
// own release record (cilium.Deployed), never from its exit code alone.
package cnijob

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

const (
	// OperationLabel on a Job names the TalosOperation that runs it; the
	// hand-over controller leaves such Jobs to their operation.
	OperationLabel = "ichor.maesh.dev/operation"
	// Selector selects every ichor-cni Job (cilium.Job's labels).
	Selector = "app.kubernetes.io/name=" + cilium.JobAppName
	// HandoverSelector selects the hand-over controller's Jobs.
	HandoverSelector = Selector + ",!" + OperationLabel
)

// Request is what a Job is asked to apply: the chart of the release (or,
// before there is one, the chart of the Cilium that runs, which the hand-over
// must not change), the cluster's Kubernetes version, tunnel and kube-proxy
// mode, the Node count and the user's layer of values.
func Request(c *ichorv1alpha1.TalosCluster, ds *appsv1.DaemonSet, deployed *cilium.ReleaseState, nodes int) (cilium.Request, error) {
	v := release.DefaultCiliumVersion

	switch {
	case deployed != nil && deployed.Version != "":
		v = deployed.Version
	default:
		if running := cni.Detect([]appsv1.DaemonSet{*ds}).CiliumVersion; running != "" {
			v = running
		}
	}

	// An adopted Cilium of a version Ichor does not embed is taken over with
	// the embedded chart of its minor: the person accepted that difference
	// (`ichor adopt --accept-cilium-diff`) before the cluster was written.
	if deployed == nil && cilium.TakesOver(c) {
		chart, err := cilium.TakeoverChart(v)
		if err != nil {
			return cilium.Request{}, err
		}

		v = chart
	}

	if embedded := cilium.Versions(); !slices.Contains(embedded, v) {
		return cilium.Request{}, fmt.Errorf("the Cilium that runs is %s, a chart this build of Ichor does not embed (it has %s): "+
			"Ichor takes Cilium over only with the chart that runs, so that nothing restarts; run an Ichor whose charts include %s",
			v, strings.Join(embedded, ", "), v)
	}

	var user map[string]any

	if c.Spec.CNI.Cilium != nil && c.Spec.CNI.Cilium.Values != nil && len(c.Spec.CNI.Cilium.Values.Raw) > 0 {
		if err := json.Unmarshal(c.Spec.CNI.Cilium.Values.Raw, &user); err != nil {
			return cilium.Request{}, fmt.Errorf("spec.cni.cilium.values is not an object: %w", err)
		}
	}

	return cilium.Request{
		Version: v, KubernetesVersion: c.Spec.KubernetesVersion,
		Choices:    ciliumvalues.Choices{Tunnel: c.Spec.CNI.Tunnel, KubeProxy: c.Spec.CNI.KubeProxy, Nodes: nodes},
		UserValues: user,
	}, nil
}

// ValuesHash is the hash of a request's effective values, as Helm's record
// of the release keeps it (cilium.ValuesSHA256).
func ValuesHash(req cilium.Request) (string, error) {
	values, err := ciliumvalues.Effective(req.UserValues, req.Choices)
	if err != nil {
		return "", fmt.Errorf("the Cilium values cannot be used: %w", err)
	}

	return cilium.ValuesSHA256(values), nil
}

// Applied reports whether Helm's record says the release is deployed with
// the request's chart and values.
func Applied(deployed *cilium.ReleaseState, req cilium.Request, valuesHash string) bool {
	return deployed != nil && deployed.Status == "deployed" && deployed.Version == req.Version && deployed.ValuesSHA256 == valuesHash
}

// Describe says what Helm's record holds, for a message.
func Describe(d *cilium.ReleaseState) string {
	if d == nil {
		return "there is no release"
	}

	return fmt.Sprintf("revision %d is %s with chart %s", d.Revision, d.Status, d.Version)
}

// Create writes the Job's ServiceAccount and binding, its request and the
// Job name, with the extra labels and annotations. Each write tolerates an
// object that exists already, so a create cut short is finished by the next.
func Create(ctx context.Context, k kubernetes.Interface, image string, timeout time.Duration, req cilium.Request,
	name string, labels, annotations map[string]string,
) error {
	sa, crb := cilium.JobObjects()

	if _, err := k.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}

	if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", crb.Name, err)
	}

	cm, err := cilium.RequestConfigMap(name, req)
	if err != nil {
		return err
	}

	for k, v := range labels {
		cm.Labels[k] = v
	}

	if _, err := k.CoreV1().ConfigMaps(cilium.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ConfigMap %s/%s: %w", cilium.Namespace, name, err)
	}

	job := cilium.Job(name, image, name, timeout)
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}

	for k, v := range labels {
		job.Labels[k] = v
		job.Spec.Template.Labels[k] = v
	}

	for k, v := range annotations {
		job.Annotations[k] = v
	}

	if _, err := k.BatchV1().Jobs(cilium.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Job %s/%s: %w", cilium.Namespace, name, err)
	}

	return nil
}

// Delete removes a Job (its pods in the background) and its request.
func Delete(ctx context.Context, k kubernetes.Interface, name string) error {
	bg := metav1.DeletePropagationBackground

	if err := k.BatchV1().Jobs(cilium.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Job %s/%s: %w", cilium.Namespace, name, err)
	}

	if err := k.CoreV1().ConfigMaps(cilium.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ConfigMap %s/%s: %w", cilium.Namespace, name, err)
	}

	return nil
}

// Phase is how far a Job is.
type Phase int

// The phases of a Job.
const (
	Running Phase = iota
	Succeeded
	Failed
)

// State is the Job's phase and, for a failed one, why.
func State(j *batchv1.Job) (Phase, string) {
	for _, cond := range j.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}

		switch cond.Type {
		case batchv1.JobComplete:
			return Succeeded, ""
		case batchv1.JobFailed:
			return Failed, fmt.Sprintf("%s: %s", cond.Reason, cond.Message)
		}
	}

	return Running, ""
}

// Ended is when the Job ended (its creation, when it has not).
func Ended(j *batchv1.Job) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}

	for _, cond := range j.Status.Conditions {
		if cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobComplete) {
			return cond.LastTransitionTime.Time
		}
	}

	return j.CreationTimestamp.Time
}
