package cni_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/installer/internal/cni"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestCNIApplyUsage: bad usage exits 2 with a line naming what was wrong
// and the usage; a request Apply refuses exits 1 with one line on stderr;
// a good one exits 0 and says what it did on stdout.
func TestCNIApplyUsage(t *testing.T) {
	dir := t.TempDir()
	good := writeRequest(t, dir, "good.json", base)
	owned := writeRequest(t, dir, "owned.json", cilium.Request{UserValues: map[string]any{"routingMode": "native"}})

	notJSON := filepath.Join(dir, "bad.json")
	testenv.Must(t, os.WriteFile(notJSON, []byte(`{"version": "v1.20.2", "values": {}}`), 0o600))

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no subcommand", nil, cni.ExitUsage, "no subcommand; the only one is apply"},
		{"unknown subcommand", []string{"install"}, cni.ExitUsage, `unknown subcommand "install"`},
		{"no request", []string{"apply"}, cni.ExitUsage, "--request FILE is required"},
		{"unknown flag", []string{"apply", "--values", "x"}, cni.ExitUsage, "flag provided but not defined: -values"},
		{"extra argument", []string{"apply", "--request", good, "now"}, cni.ExitUsage, `unexpected argument "now"`},
		{"missing file", []string{"apply", "--request", filepath.Join(dir, "none.json")}, cni.ExitUsage, "--request: open"},
		{"unknown field", []string{"apply", "--request", notJSON}, cni.ExitUsage, `unknown field "values"`},
		{"zero timeout", []string{"apply", "--request", good, "--timeout", "0s"}, cni.ExitUsage, "--timeout 0s must be positive"},
		{"bad kubeconfig", []string{"apply", "--request", good, "--kubeconfig", filepath.Join(dir, "none")}, cni.ExitUsage, "--kubeconfig"},
		{"owned key", []string{"apply", "--request", owned, "--kubeconfig", adminKubeconfig}, cni.ExitFail, `Ichor-owned key(s) "routingMode"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer

			code := cni.Main(t.Context(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q", code, stderr.String(), tc.code, tc.stderr)
			}

			switch code {
			case cni.ExitUsage:
				if !strings.Contains(stderr.String(), "usage: ichor-installer cni apply --request FILE") {
					t.Errorf("stderr %q does not show the usage", stderr.String())
				}
			case cni.ExitFail:
				if strings.Count(strings.TrimSuffix(stderr.String(), "\n"), "\n") != 0 {
					t.Errorf("stderr %q is not one line", stderr.String())
				}
			}
		})
	}

	t.Run("apply", func(t *testing.T) {
		released(t)
		apply(t, base)

		var stdout, stderr bytes.Buffer

		code := cni.Main(t.Context(), []string{"apply", "--request", good, "--kubeconfig", adminKubeconfig, "--timeout", "3m"}, &stdout, &stderr)
		if code != cni.ExitOK || !strings.Contains(stdout.String(), ": unchanged, revision ") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and unchanged", code, stdout.String(), stderr.String())
		}
	})
}

// TestJobRunsInTheWorld: the ichor-cni Job, as the controller creates it,
// runs `ichor-installer cni apply` in the world (the pod runner runs the
// installer image as this package's build of ichor-installer, with the
// ServiceAccount's token, the host's network and the request ConfigMap
// mounted), and the release ends as the request says.
func TestJobRunsInTheWorld(t *testing.T) {
	ctx := t.Context()

	released(t)

	req := base
	req.UserValues = map[string]any{"podAnnotations": map[string]any{"ichor.test/upgrade": "job"}}

	rendered, err := cilium.Render(ctx, req.Options())
	testenv.Must(t, err)

	sa, crb := cilium.JobObjects()
	if _, err := clientset.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	if _, err := clientset.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	cm, err := cilium.RequestConfigMap("ichor-cni-test", req)
	testenv.Must(t, err)

	_, err = clientset.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	testenv.Must(t, err)

	job := cilium.Job("ichor-cni-test", installerImage, cm.Name, 4*time.Minute)
	_, err = clientset.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{})
	testenv.Must(t, err)

	var done *batchv1.Job

	testenv.EventuallyOK(t, 8*time.Minute, "the ichor-cni Job finished", func() (bool, string) {
		j, err := clientset.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				done = j

				return true, ""
			}
		}

		return false, "running"
	})

	log := jobLog(t, job.Name)
	t.Logf("Job log:\n%s", log)

	if done.Status.Succeeded != 1 {
		t.Fatalf("the Job failed: %+v", done.Status.Conditions)
	}

	if !strings.Contains(log, "upgrading release kube-system/cilium") || !strings.Contains(log, ": upgraded, revision ") {
		t.Errorf("the Job's log does not tell the upgrade")
	}

	state, err := cilium.Deployed(ctx, admin)
	testenv.Must(t, err)

	if state == nil || state.Status != "deployed" || state.ValuesSHA256 != cilium.ValuesSHA256(rendered.Values) {
		t.Fatalf("Deployed = %+v, want deployed with values %s", state, cilium.ValuesSHA256(rendered.Values))
	}
}

func jobLog(t *testing.T, job string) string {
	t.Helper()

	pods, err := clientset.CoreV1().Pods(cilium.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	testenv.Must(t, err)

	if len(pods.Items) == 0 {
		return "(no pod)"
	}

	if !pods.Items[0].Spec.HostNetwork {
		t.Errorf("the Job's pod is not on the host's network")
	}

	raw, err := clientset.CoreV1().Pods(cilium.Namespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		return "(log: " + err.Error() + ")"
	}

	return string(raw)
}

func writeRequest(t *testing.T, dir, name string, req cilium.Request) string {
	t.Helper()

	data, err := json.Marshal(req)
	testenv.Must(t, err)

	p := filepath.Join(dir, name)
	testenv.Must(t, os.WriteFile(p, data, 0o600))

	return p
}
