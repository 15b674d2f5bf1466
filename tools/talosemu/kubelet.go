package talosemu

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Kubelet simulation: lease heartbeat 5 s by default (Options.KubeletHeartbeat;
// kube-controller-manager runs with a node monitor grace period of four heartbeats, at
// least 20 s, so a powered-off machine's Node turns NotReady within ~20 s), the Node's
// status posted every two heartbeats.
const leaseRenew = 5 * time.Second

// nodeMonitorGrace is kube-controller-manager's node-monitor-grace-period for the world's
// heartbeat.
func (w *World) nodeMonitorGrace() time.Duration {
	return max(20*time.Second, 4*w.heartbeat)
}

// nodeName is the Kubernetes node name Talos derives from the hostname
// (t:internal/app/machined/pkg/controllers/k8s/nodename.go: lower-cased hostname).
func (m *Machine) nodeName() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return strings.ToLower(m.hostnameLocked())
}

// kubeletService registers this machine's Node and keeps it Ready while the machine runs, with
// the kubelet's own identity (system:node:<name>). The pods of Ichor's images bound to the Node
// run as local processes (podrunner.go, with Options.PodBinDir); kwok plays the lifecycle of
// the other pods bound to the Node while this service runs (kwok.go).
func (m *Machine) kubeletService(ctx context.Context) {
	if !m.world.kubernetes {
		return
	}

	var (
		k       *kubelets
		kIssuer []byte
		err     error
		lastErr string
	)

	logOnce := func(what string, err error) {
		if msg := what + err.Error(); msg != lastErr {
			m.world.logf("machine %s: %s: %v", m.Name(), what, err)
			lastErr = msg
		}
	}

	for ctx.Err() == nil {
		// one client for every try, while the issuing Kubernetes CA holds: a
		// new one per try left a connection behind each time (until its
		// transport's idle timeout), many while an API server under load let
		// registrations time out
		if now := kubeCACert(m.activeConfig()); k != nil && !bytes.Equal(now, kIssuer) {
			k = nil
		}

		if k == nil {
			kIssuer = kubeCACert(m.activeConfig())
			k, err = m.kubeletClients()
		}

		if k != nil {
			err = m.registerNode(ctx, k.requests)
		}

		if err == nil {
			break
		}

		logOnce("kubelet", err)
		sleepCtx(ctx, 2*time.Second)
	}

	if ctx.Err() != nil {
		return
	}

	m.kubeletUp.Store(true)
	m.world.pokeKwok()
	m.setKubePrismStatus(true)

	// the kubelet API and the pods of Ichor's images (podrunner.go)
	stopPods := m.startPodRunner(ctx, k)
	c := k.requests

	defer func() {
		stopPods()
		m.kubeletUp.Store(false)
		m.world.pokeKwok()
		m.setKubePrismStatus(false)
	}()

	name := m.nodeName()
	lastStatus := time.Now()
	applied := false
	version := m.kubeletVersion()
	issuer := kubeCACert(m.activeConfig())

	for ctx.Err() == nil {
		// A new issuing Kubernetes CA (a CA rotation's stage, applied live):
		// Talos gives the kubelet a client certificate of that CA, which it
		// keeps through the stage that drops the old one, so its Lease and
		// status go on; the pods it runs keep their client.
		if now := kubeCACert(m.activeConfig()); !bytes.Equal(now, issuer) {
			if nc, err := m.kubeletClient(); err != nil {
				logOnce("kubelet client of the new Kubernetes CA", err)
			} else {
				c, issuer = nc, now
			}
		}

		m.renewLease(ctx, c, name)

		// a new kubelet image restarts the kubelet, which posts its status at once (kubeversions.go)
		if v := m.kubeletVersion(); time.Since(lastStatus) >= 2*m.world.heartbeat || v != version {
			version = v

			if err := m.updateNodeStatus(ctx, c, name); err == nil {
				lastStatus = time.Now()
			}
		}

		if !applied {
			if err := m.applyNode(ctx, c); err != nil {
				logOnce("node labels and taints", err)
			} else {
				applied = true
			}
		}

		if err := m.syncMirrorPods(ctx, c, name); err != nil {
			logOnce("mirror pods", err)
		}

		sleepCtx(ctx, m.world.heartbeat)
	}
}

func (m *Machine) nodeLabelsAndTaints() (map[string]string, []corev1.Taint) {
	cfg := m.activeConfig()
	name := m.nodeName()

	labels := map[string]string{
		corev1.LabelHostname:   name,
		corev1.LabelOSStable:   osLinux,
		corev1.LabelArchStable: archAMD64,
	}

	var taints []corev1.Taint

	if cfg != nil && cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() {
		// t:internal/app/machined/pkg/controllers/k8s/node_label_spec.go, node_taint_spec.go
		labels[constants.LabelNodeRoleControlPlane] = ""

		schedule := false
		if raw := cfg.RawV1Alpha1(); raw != nil && raw.ClusterConfig != nil {
			schedule = raw.ClusterConfig.ScheduleOnControlPlanes()
		}

		if !schedule {
			taints = append(taints, corev1.Taint{Key: constants.LabelNodeRoleControlPlane, Effect: corev1.TaintEffectNoSchedule})
		}
	}

	if cfg != nil && cfg.K8sNodeConfig() != nil {
		for k, v := range cfg.K8sNodeConfig().Labels() {
			labels[k] = v
		}

		for k, v := range cfg.K8sNodeConfig().Taints() {
			val, eff, ok := strings.Cut(v, ":")
			if !ok {
				val, eff = "", v
			}

			t := corev1.Taint{Key: k, Value: val, Effect: corev1.TaintEffect(eff)}

			// the generated control plane config carries the role taint itself
			dup := false

			for _, have := range taints {
				if have.Key == t.Key && have.Effect == t.Effect {
					dup = true
				}
			}

			if !dup {
				taints = append(taints, t)
			}
		}
	}

	return labels, taints
}

// registerNode creates the Node as the kubelet registers it: the labels a kubelet may set and
// the taints of the config (Talos registers with them,
// t:internal/app/machined/pkg/controllers/k8s/kubelet_spec.go RegisterWithTaints), then posts
// its status.
func (m *Machine) registerNode(ctx context.Context, c *kubernetes.Clientset) error {
	name := m.nodeName()
	_, taints := m.nodeLabelsAndTaints()

	_, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		labels := map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: osLinux, corev1.LabelArchStable: archAMD64}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}

		_, err = c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	}

	if err != nil {
		return err
	}

	return m.updateNodeStatus(ctx, c, name)
}

// applyNode sets the Node's labels (role, config) and taints and uncordons a Node Talos
// cordoned, as machined's NodeApplyController does with nodeApplyClient
// (t:internal/app/machined/pkg/controllers/k8s/node_apply.go; after a reboot,
// t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go UncordonNode). On
// a worker NodeRestriction refuses labels in the kubernetes.io domains and any taint change,
// as it does on Talos.
func (m *Machine) applyNode(ctx context.Context, kubelet *kubernetes.Clientset) error {
	c, err := m.nodeApplyClient(kubelet)
	if err != nil {
		return err
	}

	labels, taints := m.nodeLabelsAndTaints()

	node, err := c.CoreV1().Nodes().Get(ctx, m.nodeName(), metav1.GetOptions{})
	if err != nil {
		return err
	}

	changed := false

	if node.Annotations[constants.AnnotationCordonedKey] == constants.AnnotationCordonedValue {
		delete(node.Annotations, constants.AnnotationCordonedKey)

		node.Spec.Unschedulable = false
		changed = true
	}

	for k, v := range labels {
		if cur, ok := node.Labels[k]; !ok || cur != v {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}

			node.Labels[k] = v
			changed = true
		}
	}

	for _, t := range taints {
		if !slices.ContainsFunc(node.Spec.Taints, func(h corev1.Taint) bool { return h.MatchTaint(&t) }) {
			node.Spec.Taints = append(node.Spec.Taints, t)
			changed = true
		}
	}

	if !changed {
		return nil
	}

	_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})

	return err
}

func (m *Machine) updateNodeStatus(ctx context.Context, c *kubernetes.Clientset, name string) error {
	node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}

	now := metav1.Now()

	version := m.kubeletVersion()
	if v, err := c.Discovery().ServerVersion(); err == nil && version == "" {
		version = v.GitVersion
	}

	m.mu.Lock()
	talosVersion, _ := m.runningVersionLocked()
	bootID := m.p.BootID
	uuid := m.p.Hardware.UUID
	m.mu.Unlock()

	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}

	node.Status.Capacity, node.Status.Allocatable = capacity, capacity
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: m.IP()}, {Type: corev1.NodeHostName, Address: name}}
	node.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: uuid, SystemUUID: uuid, BootID: bootID,
		KernelVersion: constants.DefaultKernelVersion, OSImage: "Talos (" + talosVersion + ")",
		ContainerRuntimeVersion: "containerd://" + constants.DefaultContainerdVersion,
		KubeletVersion:          version, OperatingSystem: osLinux, Architecture: archAMD64,
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250

	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
	}

	if m.world.networkNeedsCNI {
		has, err := cniRunsOn(ctx, c, name)
		if err != nil {
			return err
		}

		if !has {
			ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "KubeletNotReady", networkNotReady
		}
	}

	conds := []corev1.NodeCondition{ready}

	for t, reason := range map[corev1.NodeConditionType]string{
		corev1.NodeMemoryPressure: "KubeletHasSufficientMemory",
		corev1.NodeDiskPressure:   "KubeletHasNoDiskPressure",
		corev1.NodePIDPressure:    "KubeletHasSufficientPID",
	} {
		conds = append(conds, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now})
	}

	for _, old := range node.Status.Conditions {
		for i := range conds {
			if conds[i].Type == old.Type && conds[i].Status == old.Status {
				conds[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}

	node.Status.Conditions = conds

	_, err = c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})

	return err
}

// networkNotReady is the Ready condition's message of a kubelet whose container runtime has
// no CNI configuration (containerd's CRI status, as kubelet posts it).
const networkNotReady = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady " +
	"message:Network plugin returns error: cni plugin not initialized"

// cniPodLabels select the agent pods of the CNIs a Talos cluster runs: Cilium's, flannel's
// (Talos's own, and the upstream manifest's) and Calico's. A Ready one on the Node stands for
// the CNI configuration it writes to the host, which is what a real kubelet waits for.
var cniPodLabels = []string{"k8s-app=cilium", "k8s-app=flannel", "app=flannel", "k8s-app=calico-node"}

// cniRunsOn reports whether a Ready CNI agent pod runs on the Node (the kubelet's node
// authorizer lets it list pods by spec.nodeName).
func cniRunsOn(ctx context.Context, c *kubernetes.Clientset, node string) (bool, error) {
	for _, sel := range cniPodLabels {
		pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			LabelSelector: sel, FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil {
			return false, err
		}

		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
		}
	}

	return false, nil
}

func (m *Machine) renewLease(ctx context.Context, c *kubernetes.Clientset, name string) {
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NowMicro()
	dur := int32(min(max(40*time.Second, 4*m.world.heartbeat), time.Hour) / time.Second)

	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, _ = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{})

		return
	}

	if err != nil {
		return
	}

	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &name, &dur, &now
	_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
}

// cordonAndDrain cordons the node and evicts its pods (not DaemonSet pods, not mirror pods),
// waiting until they are gone, as Talos does before an upgrade and a graceful reset
// (t:pkg/kubernetes/kubernetes.go CordonAndDrain, Cordon marks the node with
// talos.dev/cordoned so that the next boot uncordons it). The cordon goes through machined's
// node client (nodeApplyClient), the evictions through the kubelet's identity, as Talos drains
// with the kubelet kubeconfig
// (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go CordonAndDrainNode).
// Evictions honour PodDisruptionBudgets: a refused one (429) is retried.
func (m *Machine) cordonAndDrain(ctx context.Context) {
	if !m.world.kubernetes {
		return
	}

	c, err := m.kubeletClient()
	if err != nil {
		return
	}

	nc, err := m.nodeApplyClient(c)
	if err != nil {
		return
	}

	name := m.nodeName()

	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	if err := cordon(dctx, nc, name); err != nil {
		m.world.logf("machine %s: cordon: %v", m.Name(), err)

		return
	}

	for dctx.Err() == nil {
		pods, err := c.CoreV1().Pods("").List(dctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			sleepCtx(dctx, time.Second)

			continue
		}

		left := 0

		for i := range pods.Items {
			p := &pods.Items[i]

			if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
				continue
			}

			if owner := metav1.GetControllerOf(p); owner != nil && owner.Kind == "DaemonSet" {
				continue
			}

			left++

			if p.DeletionTimestamp == nil {
				err := c.PolicyV1().Evictions(p.Namespace).Evict(dctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
				if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsTooManyRequests(err) {
					m.world.logf("machine %s: evicting %s/%s: %v", m.Name(), p.Namespace, p.Name, err)
				}
			}
		}

		if left == 0 {
			return
		}

		sleepCtx(dctx, time.Second)
	}
}

// cordon marks the Node unschedulable with Talos's annotation, retrying on conflicts.
func cordon(ctx context.Context, c *kubernetes.Clientset, name string) error {
	for {
		node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}

		if node.Spec.Unschedulable {
			return nil
		}

		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}

		node.Annotations[constants.AnnotationCordonedKey] = constants.AnnotationCordonedValue
		node.Spec.Unschedulable = true

		_, err = c.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}

// Kubeconfig streams the admin kubeconfig as a .tar.gz holding one file `kubeconfig`
// (t:…/v1alpha1_server.go Kubeconfig; m:client Kubeconfig unpacks it).
func (s *apiServer) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	if err := checkControlPlane(srv.Context(), s.m.st, "kubeconfig"); err != nil {
		return err
	}

	b, err := adminKubeconfigTarGz(s.m.activeConfig())
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}

	return srv.Send(&common.Data{Bytes: b})
}

// setKubePrismStatus writes KubePrism's health (KubePrismStatuses
// "k8s-loadbalancer" in the k8s namespace, host localhost:<port>; m:resources/k8s/kubeprism.go)
// when the configuration turns KubePrism on: healthy while the kubelet reaches the API
// server (Talos reports whether an upstream API server answers through it), and
// removed when KubePrism is off.
func (m *Machine) setKubePrismStatus(healthy bool) {
	ctx := context.Background()
	id := k8s.KubePrismStatusesID

	cfg := m.activeConfig()

	var kp talosconfig.K8sKubePrismConfig
	if cfg != nil {
		kp = cfg.K8sKubePrismConfig()
	}

	if kp == nil {
		_ = m.st.Destroy(ctx, k8s.NewKubePrismStatuses(k8s.NamespaceName, id).Metadata())

		return
	}

	host := net.JoinHostPort("localhost", strconv.Itoa(kp.Port()))

	_ = put(ctx, m.st, k8s.NewKubePrismStatuses(k8s.NamespaceName, id), func(r *k8s.KubePrismStatuses) {
		r.TypedSpec().Host, r.TypedSpec().Healthy = host, healthy
	})
}
