package talosemu_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// podApp is the image whose pods the pod runner runs in TestPodRunner: its repository ends in
// ichor-ui, so the test's build of testdata/podapp, named ichor-ui, is its binary.
const podApp = "ghcr.io/maeshinshin/ichor-ui:test"

// TestPodRunner runs pods of an Ichor image as processes on a 1+1 cluster: the pod is Ready
// only once its readiness probe answers; its log (`kubectl logs`) shows the mounted
// ConfigMap, its ServiceAccount identity and RBAC, and its loopback address; `kubectl
// port-forward` reaches it; the API server calls its admission webhook through the Service's
// endpoints; a killed process restarts with restartCount 1; Job pods end with the process's
// exit code; deletion, eviction and a power-off stop the process; a pod of another image is
// still kwok's; World.Close leaves no process behind.
//
//nolint:gocyclo,cyclop,maintidx
func TestPodRunner(t *testing.T) {
	assets := kubeAssets(t)

	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl not in %s: run `go tool task assets` (or set KUBEBUILDER_ASSETS)", assets)
	}

	bin := t.TempDir()

	build := exec.CommandContext(t.Context(), "go", "build", "-o", filepath.Join(bin, "ichor-ui"), "./testdata/podapp") //nolint:gosec // the test's own program
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/podapp: %v\n%s", err, out)
	}

	opt := testOptions()
	opt.Kubernetes, opt.KubeAssets, opt.PodBinDir = true, assets, bin
	opt.PodSubnet = fmt.Sprintf("127.%d.254.0/24", subnetOctet)

	spec := testSpec(2)
	spec.Machines[0].Name, spec.Machines[1].Name = "cp-1", "worker-1"

	dir := t.TempDir()

	w, err := talosemu.Start(t.Context(), spec, dir, opt)
	if err != nil {
		t.Fatal(err)
	}

	closed := false

	t.Cleanup(func() {
		if !closed {
			w.Close()
		}
	})

	ms := w.Machines()
	c := newRealCluster(t, ms[0].IP(), nil)
	c.provisionAll(t, ms[:1], ms[1:])

	a := c.admin(t, ms[0].IP())
	if _, err := a.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	kc, err := a.Kubeconfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	kcPath := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}

	kube := kubeClient(t, kc)
	waitNodes(t, kube, 2, nodeReady, "2 Ready nodes")

	// no pod of Ichor's images on the worker yet: its kubelet API does not listen (a socket
	// per node that runs none made a world of 5,000 nodes run out of file descriptors);
	// KubectlLogs below reaches it once the runner runs a pod there
	if conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(t.Context(), "tcp", net.JoinHostPort(ms[1].IP(), "10250")); err == nil {
		_ = conn.Close()

		t.Fatal("the worker's kubelet API listens before the runner takes a pod")
	}

	worker := strings.ToLower(hostnameOf(t, c.admin(t, ms[1].IP())))
	ctx := t.Context()
	pods := kube.CoreV1().Pods("default")

	setUpPodApp(t, kube)

	t.Run("OtherImagesStayKwoks", func(t *testing.T) {
		p := appPod("sim", worker)
		p.Spec.Containers[0].Image = "registry.k8s.io/pause:3.10"
		// Not a backend of the podapp Service: kwok's Ready pod would be one of the
		// webhook's endpoints, at an address no process serves.
		p.Labels = map[string]string{"app": "podapp-sim"}

		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		waitPod(t, kube, "sim", "Ready (kwok)", func(p *corev1.Pod) bool { return podReady(*p) })

		if pids := podPIDs(t, "sim"); len(pids) != 0 {
			t.Fatalf("a pause pod runs processes %v", pids)
		}
	})

	var appPID int

	t.Run("ReadyOnlyOnceTheProbeAnswers", func(t *testing.T) {
		if _, err := pods.Create(ctx, appPod("app", worker), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		waitPod(t, kube, "app", "the container running", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})

		// the probe ran and was refused (the gate is closed): the pod is not Ready
		waitLog(t, kubectl, kcPath, "app", "podapp: readyz: closed")

		p, err := pods.Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		if podReady(*p) || p.Status.ContainerStatuses[0].Ready {
			t.Fatalf("the pod is Ready while its readiness probe fails: %+v", p.Status)
		}

		if _, err := kube.CoreV1().ConfigMaps("default").Update(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "podapp-gate"}, Data: map[string]string{"open": "yes"},
		}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		p = waitPod(t, kube, "app", "Ready", func(p *corev1.Pod) bool { return podReady(*p) })

		node, err := kube.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}

		_, cidr, err := net.ParseCIDR(node.Spec.PodCIDR)
		if err != nil {
			t.Fatal(err)
		}

		if ip := net.ParseIP(p.Status.PodIP); ip == nil || !cidr.Contains(ip) || p.Status.HostIP != ms[1].IP() {
			t.Fatalf("pod address %q (node podCIDR %s), host %q (node %s)", p.Status.PodIP, cidr, p.Status.HostIP, ms[1].IP())
		}

		pids := podPIDs(t, "app")
		if len(pids) != 1 {
			t.Fatalf("processes of pod app: %v", pids)
		}

		appPID = pids[0]
	})

	t.Run("KubectlLogs", func(t *testing.T) {
		out := runKubectl(t, kubectl, kcPath, "logs", "app")

		for _, want := range []string{
			"podapp: config=hello from a ConfigMap",
			// the token is the ServiceAccount's, and RBAC is the ServiceAccount's
			"podapp: user=system:serviceaccount:default:podapp",
			"podapp: secrets forbidden=true",
			// the wildcard listen address became the pod's loopback address
			fmt.Sprintf("listen=127.%d.254.", subnetOctet),
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("kubectl logs lacks %q:\n%s", want, out)
			}
		}

		if !regexp.MustCompile(fmt.Sprintf(`ip=127\.%d\.254\.\d+ `, subnetOctet)).MatchString(out) {
			t.Fatalf("POD_IP (downward API status.podIP) is not the loopback address:\n%s", out)
		}
	})

	t.Run("KubectlPortForward", func(t *testing.T) {
		got := portForwardGet(t, kubectl, kcPath, "app", "/hello")
		if got != "hello from app" {
			t.Fatalf("GET /hello through kubectl port-forward: %q", got)
		}
	})

	t.Run("WebhookThroughServiceEndpoints", func(t *testing.T) {
		// the API server resolves the Service to the pod's address and reaches it through the
		// egress proxy
		cms := kube.CoreV1().ConfigMaps("default")
		labelled := func(name string) *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"podapp-webhook": "on"}}}
		}

		testenv.EventuallyOK(t, 60*time.Second, "the webhook refuses refuse-me", func() (bool, string) {
			_, err := cms.Create(ctx, labelled("refuse-me"), metav1.CreateOptions{})
			if err == nil {
				_ = cms.Delete(ctx, "refuse-me", metav1.DeleteOptions{})

				return false, "created"
			}

			return strings.Contains(err.Error(), "podapp says no"), err.Error()
		})

		if _, err := cms.Create(ctx, labelled("allow-me"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the webhook refused allow-me: %v", err)
		}
	})

	t.Run("FlowsSeen", func(t *testing.T) {
		// the emulator records the pod's flows where they happen (flows.go): the API
		// server's webhook call through the egress proxy, the kubelet's probe, and the
		// pod's own connection to the API server on the control plane's address
		testenv.EventuallyOK(t, 30*time.Second, "the app pod's flows", func() (bool, string) {
			var webhook, probe, api bool

			for _, f := range w.Flows() {
				if f.Namespace != "default" || f.Pod != "app" || f.Node != worker {
					continue
				}

				switch {
				case f.Inbound && f.Port == 9443 && f.Peer == talosemu.PeerKubeAPIServer:
					webhook = true
				case f.Inbound && f.Port == 8080 && f.Peer == talosemu.PeerKubelet:
					probe = true
				case !f.Inbound && f.Port == 6443 && f.Peer == ms[0].IP() && f.PeerMachine == ms[0].Name() && f.PeerControlPlane:
					api = true
				}
			}

			return webhook && probe && api, fmt.Sprintf("webhook %t, probe %t, API server %t: %+v", webhook, probe, api, w.Flows())
		})
	})

	t.Run("KilledProcessRestarts", func(t *testing.T) {
		if err := syscall.Kill(appPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}

		p := waitPod(t, kube, "app", "restarted and Ready", func(p *corev1.Pod) bool {
			s := p.Status.ContainerStatuses

			return len(s) == 1 && s[0].RestartCount == 1 && s[0].State.Running != nil && podReady(*p)
		})

		last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
		if last == nil || last.ExitCode != 137 || last.Reason != "Error" {
			t.Fatalf("last state %+v, want exit code 137 (SIGKILL), reason Error", last)
		}

		if pids := podPIDs(t, "app"); len(pids) != 1 || pids[0] == appPID {
			t.Fatalf("processes of pod app after the kill: %v (killed %d)", pids, appPID)
		}

		if out := runKubectl(t, kubectl, kcPath, "logs", "app", "--previous"); !strings.Contains(out, "podapp: started pod=app") {
			t.Fatalf("kubectl logs --previous:\n%s", out)
		}
	})

	t.Run("JobPodsEndWithTheExitCode", func(t *testing.T) {
		fail := appPod("fail", worker)
		fail.Spec.RestartPolicy = corev1.RestartPolicyNever
		fail.Spec.Containers[0].Env = append(fail.Spec.Containers[0].Env, corev1.EnvVar{Name: "EXIT_CODE", Value: "3"})

		if _, err := pods.Create(ctx, fail, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		p := waitPod(t, kube, "fail", "phase Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })

		term := p.Status.ContainerStatuses[0].State.Terminated
		if term == nil || term.ExitCode != 3 || term.Reason != "Error" || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("container status %+v, want terminated with exit code 3 and no restart", p.Status.ContainerStatuses[0])
		}

		if out := runKubectl(t, kubectl, kcPath, "logs", "fail"); !strings.Contains(out, "podapp: exiting with 3") {
			t.Fatalf("kubectl logs of the ended pod:\n%s", out)
		}

		// a Job: its pod succeeds, the Job completes
		tmpl := appPod("", worker)
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		tmpl.Spec.Containers[0].Env = append(tmpl.Spec.Containers[0].Env, corev1.EnvVar{Name: "EXIT_CODE", Value: "0"})
		tmpl.Spec.Containers[0].ReadinessProbe, tmpl.Spec.Containers[0].LivenessProbe = nil, nil
		tmpl.Labels = map[string]string{"app": "podapp-job"}

		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "podapp-job"},
			Spec: batchv1.JobSpec{
				BackoffLimit: new(int32(0)),
				Template:     corev1.PodTemplateSpec{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec},
			},
		}

		if _, err := kube.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		testenv.EventuallyOK(t, 90*time.Second, "the Job complete", func() (bool, string) {
			j, err := kube.BatchV1().Jobs("default").Get(ctx, "podapp-job", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}

			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					return true, ""
				}
			}

			return false, fmt.Sprintf("%+v", j.Status)
		})

		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app=podapp-job"})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("Job pods: %v, %v", list, err)
		}

		jp := list.Items[0]
		if jp.Status.Phase != corev1.PodSucceeded || jp.Status.ContainerStatuses[0].State.Terminated == nil || jp.Status.ContainerStatuses[0].State.Terminated.ExitCode != 0 {
			t.Fatalf("Job pod status: %+v", jp.Status)
		}
	})

	t.Run("DeletionStopsTheProcess", func(t *testing.T) {
		pids := podPIDs(t, "app")

		if err := pods.Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		waitGone(t, kube, "app")

		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err == nil {
				t.Fatalf("process %d of the deleted pod still runs", pid)
			}
		}
	})

	t.Run("EvictionStopsTheProcess", func(t *testing.T) {
		p := appPod("evicted", worker)
		p.Spec.Containers[0].ReadinessProbe = nil

		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		waitPod(t, kube, "evicted", "Ready", func(p *corev1.Pod) bool { return podReady(*p) })

		pids := podPIDs(t, "evicted")
		if len(pids) != 1 {
			t.Fatalf("processes of pod evicted: %v", pids)
		}

		// what kubectl drain does
		if err := pods.EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "evicted", Namespace: "default"}}); err != nil {
			t.Fatal(err)
		}

		waitGone(t, kube, "evicted")

		if err := syscall.Kill(pids[0], 0); err == nil {
			t.Fatalf("process %d of the evicted pod still runs", pids[0])
		}
	})

	t.Run("PowerOffStopsPowerOnRestarts", func(t *testing.T) {
		p := appPod("survivor", worker)
		p.Spec.Containers[0].ReadinessProbe = nil

		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		waitPod(t, kube, "survivor", "Ready", func(p *corev1.Pod) bool { return podReady(*p) })

		pids := podPIDs(t, "survivor")
		if len(pids) != 1 {
			t.Fatalf("processes of pod survivor: %v", pids)
		}

		if err := ms[1].PowerOff(); err != nil {
			t.Fatal(err)
		}

		if err := syscall.Kill(pids[0], 0); err == nil {
			t.Fatalf("process %d still runs on a powered-off machine", pids[0])
		}

		if err := ms[1].PowerOn(); err != nil {
			t.Fatal(err)
		}

		// the kubelet starts the pod's container again, as after a node reboot
		got := waitPod(t, kube, "survivor", "running again with restartCount 1", func(p *corev1.Pod) bool {
			s := p.Status.ContainerStatuses

			return len(s) == 1 && s[0].RestartCount == 1 && s[0].State.Running != nil
		})

		if last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.Reason != "Unknown" || last.ExitCode != 255 {
			t.Fatalf("last state after the power-off: %+v", last)
		}

		if pids := podPIDs(t, "survivor"); len(pids) != 1 {
			t.Fatalf("processes of pod survivor after power-on: %v", pids)
		}
	})

	t.Run("CloseLeavesNoProcess", func(t *testing.T) {
		w.Close()

		closed = true

		for pid, name := range childProcs(t) {
			if name == "ichor-ui" {
				t.Fatalf("process %d (%s) left after World.Close", pid, name)
			}
		}
	})
}

// setUpPodApp creates what the podapp pods use: their ServiceAccount with a Role reading the
// gate ConfigMap only, the ConfigMaps, the webhook's serving certificate, Service and
// ValidatingWebhookConfiguration.
func setUpPodApp(t *testing.T, kube *kubernetes.Clientset) {
	t.Helper()

	ctx := t.Context()
	ns := "default"

	caPEM, crtPEM, keyPEM := webhookCert(t, "podapp.default.svc")

	objs := []func() error{
		func() error {
			_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "podapp"}}, metav1.CreateOptions{})

			return err
		},
		func() error {
			_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp"},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"podapp-gate"}, Verbs: []string{"get"}}},
			}, metav1.CreateOptions{})

			return err
		},
		func() error {
			_, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "podapp"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "podapp", Namespace: ns}},
			}, metav1.CreateOptions{})

			return err
		},
		func() error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp-config"}, Data: map[string]string{"greeting": "hello from a ConfigMap"},
			}, metav1.CreateOptions{})

			return err
		},
		func() error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp-gate"}, Data: map[string]string{"open": "no"},
			}, metav1.CreateOptions{})

			return err
		},
		func() error {
			_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp-tls"}, Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{"tls.crt": crtPEM, "tls.key": keyPEM},
			}, metav1.CreateOptions{})

			return err
		},
		func() error {
			_, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp"},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{"app": "podapp"},
					Ports:    []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromString("webhook")}},
				},
			}, metav1.CreateOptions{})

			return err
		},
		func() error {
			fail := admissionregistrationv1.Fail
			none := admissionregistrationv1.SideEffectClassNone
			_, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "podapp"},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{
					Name: "podapp.example.com",
					ClientConfig: admissionregistrationv1.WebhookClientConfig{
						Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "podapp", Path: new("/validate")},
						CABundle: caPEM,
					},
					Rules: []admissionregistrationv1.RuleWithOperations{{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					}},
					ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"podapp-webhook": "on"}},
					FailurePolicy:           &fail,
					SideEffects:             &none,
					AdmissionReviewVersions: []string{"v1"},
					TimeoutSeconds:          new(int32(10)),
				}},
			}, metav1.CreateOptions{})

			return err
		},
	}

	for _, create := range objs {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}

	// the ServiceAccount's token volume needs the namespace's kube-root-ca.crt
	testenv.EventuallyOK(t, 60*time.Second, "kube-root-ca.crt published", func() (bool, string) {
		_, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})

		return err == nil, fmt.Sprint(err)
	})
}

// appPod is a podapp pod on node: probes on its HTTP port, the ConfigMap and the webhook
// certificate mounted, its addresses as wildcards.
func appPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "podapp"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: node},
			ServiceAccountName:            "podapp",
			TerminationGracePeriodSeconds: new(int64(10)),
			Containers: []corev1.Container{{
				Name:  "app",
				Image: podApp,
				Args:  []string{"--listen=:8080", "--config=/etc/podapp/greeting", "--webhook-listen=:9443", "--tls-dir=/etc/podapp-tls"},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
				},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "webhook", ContainerPort: 9443}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 2, FailureThreshold: 5,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/podapp", ReadOnly: true},
					{Name: "tls", MountPath: "/etc/podapp-tls", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "podapp-config"}}}},
				{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "podapp-tls"}}}, //nolint:gosec // a Secret's name
			},
		},
	}
}

// waitPod waits until the pod matches and returns it.
func waitPod(t *testing.T, kube *kubernetes.Clientset, name, what string, match func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()

	var got *corev1.Pod

	testenv.EventuallyOK(t, 120*time.Second, "pod "+name+" "+what, func() (bool, string) {
		p, err := kube.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		got = p

		return match(p), fmt.Sprintf("phase %s, conditions %+v, containers %+v", p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
	})

	return got
}

func waitGone(t *testing.T, kube *kubernetes.Clientset, name string) {
	t.Helper()

	testenv.EventuallyOK(t, 90*time.Second, "pod "+name+" deleted", func() (bool, string) {
		p, err := kube.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}

		if err != nil {
			return false, err.Error()
		}

		return false, fmt.Sprintf("phase %s, deletion %v", p.Status.Phase, p.DeletionTimestamp)
	})
}

// podPIDs are this test process's children that run the podapp binary for the pod (HOSTNAME
// is the pod's name in a container's environment).
func podPIDs(t *testing.T, pod string) []int {
	t.Helper()

	var out []int

	for pid, name := range childProcs(t) {
		if name != "ichor-ui" {
			continue
		}

		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}

		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "HOSTNAME="+pod {
				out = append(out, pid)
			}
		}
	}

	return out
}

func runKubectl(t *testing.T, kubectl, kubeconfig string, args ...string) string {
	t.Helper()

	cmd := exec.CommandContext(t.Context(), kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", "default"}, args...)...) //nolint:gosec // the test's kubectl

	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	return string(out)
}

// waitLog waits until `kubectl logs pod` shows want.
func waitLog(t *testing.T, kubectl, kubeconfig, pod, want string) {
	t.Helper()

	testenv.EventuallyOK(t, 60*time.Second, "kubectl logs "+pod+" shows "+want, func() (bool, string) {
		out, err := exec.CommandContext(t.Context(), kubectl, "--kubeconfig", kubeconfig, "-n", "default", "logs", pod).CombinedOutput() //nolint:gosec // the test's kubectl
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, out)
		}

		return strings.Contains(string(out), want), string(out)
	})
}

// portForwardGet runs `kubectl port-forward pod :8080` and GETs path through it.
func portForwardGet(t *testing.T, kubectl, kubeconfig, pod, path string) string {
	t.Helper()

	cmd := exec.CommandContext(t.Context(), kubectl, "--kubeconfig", kubeconfig, "-n", "default", "port-forward", "pod/"+pod, ":8080") //nolint:gosec // the test's kubectl

	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}

	var stderr strings.Builder
	cmd.Stderr = &stderr

	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()

	// "Forwarding from 127.0.0.1:NNNNN -> 8080"
	local := make(chan string, 1)

	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`).FindStringSubmatch(sc.Text()); m != nil {
				local <- m[1]

				break
			}
		}

		_, _ = io.Copy(io.Discard, stdout)
	}()

	var addr string

	select {
	case addr = <-local:
	case <-time.After(60 * time.Second):
		t.Fatalf("kubectl port-forward did not start: %s", stderr.String())
	}

	var body string

	testenv.EventuallyOK(t, 30*time.Second, "GET "+path+" through the port-forward", func() (bool, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return false, err.Error()
		}

		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error() + "; kubectl: " + stderr.String()
		}
		defer resp.Body.Close() //nolint:errcheck

		b, _ := io.ReadAll(resp.Body)
		body = string(b)

		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s; kubectl: %s", resp.Status, body, stderr.String())
	})

	return body
}

// webhookCert makes a CA and a serving certificate for dnsName (PEM: CA, certificate, key).
func webhookCert(t *testing.T, dnsName string) (caPEM, crtPEM, keyPEM []byte) {
	t.Helper()

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	caTmpl := &stdx509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "podapp-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: stdx509.KeyUsageCertSign,
	}

	caDER, err := stdx509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &stdx509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: stdx509.KeyUsageDigitalSignature, ExtKeyUsage: []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth},
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}

	keyDER, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
