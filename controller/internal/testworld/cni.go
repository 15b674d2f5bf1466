package testworld

import (
	"context"
	"io"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// CNIRequest reads the request an ichor-cni Job carries, from its ConfigMap.
func CNIRequest(t testing.TB, k kubernetes.Interface, job *batchv1.Job) cilium.Request {
	t.Helper()

	var cmName string

	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}

	cm, err := k.CoreV1().ConfigMaps(cilium.Namespace).Get(context.Background(), cmName, metav1.GetOptions{})
	testenv.Must(t, err)

	req, err := cilium.DecodeRequest([]byte(cm.Data[cilium.RequestKey]))
	testenv.Must(t, err)

	return req
}

// ApplyAsTheCNIJob does what an ichor-cni Job's `ichor-installer cni apply`
// does (kwok plays the Job's pod, which runs nothing): the Job's request,
// applied with the Helm SDK and the cluster's admin credentials cfg.
func ApplyAsTheCNIJob(t testing.TB, cfg *rest.Config, k kubernetes.Interface, job *batchv1.Job) *cilium.Applied {
	t.Helper()

	req := CNIRequest(t, k, job)

	applied, err := cilium.Apply(context.Background(), cfg, req, 3*time.Minute, io.Discard)
	if err != nil {
		t.Fatalf("applying the request of %s: %v", job.Name, err)
	}

	return applied
}
