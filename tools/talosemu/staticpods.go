package talosemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/protobuf/types/known/emptypb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The control plane's static pods. On Talos kube-apiserver, kube-controller-manager and
// kube-scheduler are kubelet static pods named after the component in kube-system, labelled
// k8s-app=<component>, tier=control-plane
// (t:internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go); the kubelet
// creates a mirror pod "<component>-<node>" for each, and machined reports each static pod's
// status, read from the kubelet, as StaticPodStatus "kube-system/<component>-<node>" (k8s
// namespace), its spec the pod's status (t:…/k8s/kubelet_static_pod.go, refreshPodStatus).
// The emulator runs the components as processes (kube.go); while they run it reports the
// StaticPodStatus of each, Running and Ready with the configured image, and the kubelet
// simulation keeps the mirror pods (with the kubelet's identity) Ready. Once the processes
// stop the StaticPodStatus resources are removed (Talos keeps them with a not-ready status
// until the kubelet stops reporting); the mirror pods stay and turn NotReady with their Node.

type staticPod struct {
	component, image string
	cpu, memory      string // default requests (t:…/k8s/internal/k8stemplates apiserver.go, controller-manager.go, scheduler.go)
}

// staticPods are the control plane's static pods of m's running config.
func (m *Machine) staticPods() []staticPod {
	cfg := m.activeConfig()
	if cfg == nil || cfg.Machine() == nil || !cfg.Machine().Type().IsControlPlane() || cfg.K8sAPIServerConfig() == nil {
		return nil
	}

	pods := []staticPod{{component: k8s.APIServerID, image: cfg.K8sAPIServerConfig().Image(), cpu: "200m", memory: "512Mi"}}

	if cm := cfg.K8sControllerManagerConfig(); cm != nil && cm.Enabled() {
		pods = append(pods, staticPod{component: k8s.ControllerManagerID, image: cm.Image(), cpu: "50m", memory: "256Mi"})
	}

	if sc := cfg.K8sSchedulerConfig(); sc != nil && sc.Enabled() {
		pods = append(pods, staticPod{component: k8s.SchedulerID, image: sc.Image(), cpu: "10m", memory: "64Mi"})
	}

	// while the processes run, the images they were started with (a new image in the config
	// shows once they restart with it)
	m.etcdMu.Lock()
	if m.kube != nil {
		for i := range pods {
			if img := m.kube.images[pods[i].component]; img != "" {
				pods[i].image = img
			}
		}
	}
	m.etcdMu.Unlock()

	return pods
}

// staticPodStatus is the status the kubelet reports for a running, ready static pod.
func (m *Machine) staticPodStatus(p staticPod, started time.Time) corev1.PodStatus {
	at := metav1.NewTime(started.UTC().Truncate(time.Second))
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: at}
	}

	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond("PodReadyToStartContainers"), cond(corev1.PodInitialized), cond(corev1.PodReady),
			cond(corev1.ContainersReady), cond(corev1.PodScheduled),
		},
		HostIP:    m.IP(),
		HostIPs:   []corev1.HostIP{{IP: m.IP()}},
		PodIP:     m.IP(),
		PodIPs:    []corev1.PodIP{{IP: m.IP()}},
		StartTime: &at,
		QOSClass:  corev1.PodQOSBurstable,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:    p.component,
			Image:   p.image,
			ImageID: p.image + "@sha256:" + seed(p.image, "image-digest"),
			Ready:   true,
			Started: new(true),
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}},
		}},
	}
}

// setStaticPodStatuses writes (running) or removes the StaticPodStatus resources.
func (m *Machine) setStaticPodStatuses(running bool, started time.Time) {
	ctx := context.Background()
	node := m.nodeName()
	want := map[string]corev1.PodStatus{}

	if running {
		for _, p := range m.staticPods() {
			want["kube-system/"+p.component+"-"+node] = m.staticPodStatus(p, started)
		}
	}

	existing, err := safe.StateListAll[*k8s.StaticPodStatus](ctx, m.st)
	if err != nil {
		return
	}

	for r := range existing.All() {
		if _, ok := want[r.Metadata().ID()]; !ok {
			_ = destroyIfExists(ctx, m.st, r.Metadata())
		}
	}

	for id, st := range want {
		b, err := json.Marshal(st)
		if err != nil {
			continue
		}

		var spec map[string]any
		if json.Unmarshal(b, &spec) != nil {
			continue
		}

		_ = put(ctx, m.st, k8s.NewStaticPodStatus(k8s.NamespaceName, id), func(r *k8s.StaticPodStatus) { r.TypedSpec().PodStatus = spec })
	}
}

// kubeStarted is when this machine's control plane processes started; zero when they do not
// run.
func (m *Machine) kubeStarted() time.Time {
	m.etcdMu.Lock()
	defer m.etcdMu.Unlock()

	if m.kube == nil {
		return time.Time{}
	}

	return m.kube.started
}

// syncMirrorPods keeps the mirror pods of the running static pods, Ready, with the kubelet's
// identity (NodeRestriction lets a node create mirror pods bound to itself and update their
// status).
func (m *Machine) syncMirrorPods(ctx context.Context, c *kubernetes.Clientset, nodeName string) error {
	started := m.kubeStarted()
	if started.IsZero() {
		return nil
	}

	node, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}

	pods := c.CoreV1().Pods("kube-system")

	// the kubelet sees its pods through a list restricted to its Node (the Node authorizer
	// refuses a get of a pod not bound to it yet)
	list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return err
	}

	have := map[string]*corev1.Pod{}
	for i := range list.Items {
		have[list.Items[i].Name] = &list.Items[i]
	}

	for _, p := range m.staticPods() {
		name := p.component + "-" + nodeName
		sum := sha256.Sum256([]byte(nodeName + "\x00" + p.component + "\x00" + p.image))
		hash := hex.EncodeToString(sum[:16])

		pod, found := have[name]
		if found && pod.Annotations["kubernetes.io/config.hash"] != hash {
			// a new image: the kubelet replaces the mirror pod
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}

			found = false
		}

		var err error

		if !found {
			pod, err = pods.Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: name, Namespace: "kube-system",
					Labels: map[string]string{"k8s-app": p.component, "tier": "control-plane"},
					Annotations: map[string]string{
						"kubernetes.io/config.mirror": hash, "kubernetes.io/config.hash": hash,
						"kubernetes.io/config.source": "http", "kubernetes.io/config.seen": started.UTC().Format(time.RFC3339Nano),
					},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: node.UID, Controller: new(true)}},
				},
				Spec: corev1.PodSpec{
					NodeName: nodeName, HostNetwork: true, PriorityClassName: "system-cluster-critical",
					Containers: []corev1.Container{{
						Name: p.component, Image: p.image, Command: []string{"/usr/local/bin/" + p.component},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: apiresource.MustParse(p.cpu), corev1.ResourceMemory: apiresource.MustParse(p.memory),
						}},
					}},
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			}, metav1.CreateOptions{})
		}

		if err != nil {
			return err
		}

		if pod.Status.PodIP == "" {
			m.world.logf("machine %s: mirror pod kube-system/%s", m.Name(), name)
		}

		if !podIsReady(pod) || pod.Status.PodIP == "" {
			pod.Status = m.staticPodStatus(p, started)
			if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}

	return nil
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

// memoryKiB is the emulated machine's memory (the 8 GiB memory module).
const memoryKiB = 8 << 20

// Memory answers /proc/meminfo's numbers for an 8 GiB machine
// (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Memory).
func (s *apiServer) Memory(context.Context, *emptypb.Empty) (*machine.MemoryResponse, error) {
	return &machine.MemoryResponse{Messages: []*machine.Memory{{
		Meminfo: &machine.MemInfo{
			Memtotal: memoryKiB, Memfree: memoryKiB / 2, Memavailable: memoryKiB * 3 / 4,
			Buffers: 1 << 16, Cached: memoryKiB / 8, Swapcached: 0, Active: memoryKiB / 8, Inactive: memoryKiB / 16,
			Hugepagesize: 2048, Directmap4K: 1 << 18,
		},
	}}}, nil
}
