package cnistatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/controller/internal/controller/lifecycle"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func cluster(t *testing.T, namespace, name string) *ichorv1alpha1.TalosCluster {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, c))

	return c
}

// daemonSet is a DaemonSet of one container; mutate sets what a CNI's
// agent would carry (labels, host paths).
func daemonSet(namespace, name, image string, labels map[string]string, hostPaths ...string) *appsv1.DaemonSet {
	sel := map[string]string{"test/ds": name}
	tmpl := map[string]string{"test/ds": name}

	for k, v := range labels {
		tmpl[k] = v
	}

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: tmpl},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: image}}},
			},
		},
	}

	for i, p := range hostPaths {
		ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{
			Name: fmt.Sprintf("host-%d", i), VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p}},
		})
	}

	return ds
}

// waitDetected waits until status.cni.detected of the test cluster is want.
func waitDetected(t *testing.T, want string) *ichorv1alpha1.TalosCluster {
	t.Helper()

	var c *ichorv1alpha1.TalosCluster

	testenv.EventuallyOK(t, waitTimeout, "status.cni.detected "+want, func() (bool, string) {
		c = cluster(t, ns, clusterName)

		return c.Status.CNI.Detected == want, "detected " + c.Status.CNI.Detected
	})

	return c
}

// swap deletes what the previous step created in the workload cluster and
// creates ds, so that the cluster runs exactly one candidate CNI.
func swap(t *testing.T, k kubernetes.Interface, old, ds *appsv1.DaemonSet) {
	t.Helper()

	ctx := context.Background()

	if old != nil {
		err := k.AppsV1().DaemonSets(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}

		testenv.EventuallyOK(t, waitTimeout, "DaemonSet "+old.Name+" gone", func() (bool, string) {
			_, err := k.AppsV1().DaemonSets(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})

			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}

	if ds != nil {
		_, err := k.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{})
		testenv.Must(t, err)
	}
}

// TestCNIDetected: status.cni.detected follows what runs in the cluster's
// own Kubernetes (the emulated control plane's real kube-apiserver),
// read through the admin kubeconfig a control plane hands out: nothing at
// first (Ichor's render runs no CNI of Talos's, and no Cilium was
// installed), then Cilium (and the agent's version in
// status.cni.ciliumVersion), Flannel, Calico in its operator's namespace,
// an unnamed CNI by its host CNI directory, and nothing again.
func TestCNIDetected(t *testing.T) {
	ctx := context.Background()
	k := adminClient(t)

	c := waitDetected(t, "none")
	if c.Status.CNI.CiliumVersion != "" {
		t.Errorf("no Cilium runs, yet status.cni.ciliumVersion is %q", c.Status.CNI.CiliumVersion)
	}

	cilium := daemonSet("kube-system", "cilium", "quay.io/cilium/cilium:v1.19.3@sha256:7d1e0ad9c0b6b4f6d5d8b1b8c2f0f1e4a1f3f7c8d9e0a1b2c3d4e5f60718293a",
		map[string]string{"k8s-app": "cilium"}, "/etc/cni/net.d", "/opt/cni/bin")
	cilium.Spec.Template.Spec.Containers[0].Name = "cilium-agent"
	swap(t, k, nil, cilium)

	c = waitDetected(t, "cilium")
	if c.Status.CNI.CiliumVersion != "v1.19.3" {
		t.Errorf("status.cni.ciliumVersion = %q; want the agent's v1.19.3", c.Status.CNI.CiliumVersion)
	}

	kubeProxyConsistency(t, k, c)

	flannel := daemonSet("kube-system", "kube-flannel", "ghcr.io/siderolabs/flannel:v0.27.4", map[string]string{"k8s-app": "flannel"}, "/etc/cni/net.d")
	swap(t, k, cilium, flannel)
	waitDetected(t, "flannel")

	testenv.EventuallyOK(t, waitTimeout, "no KubeProxyConsistent without Cilium", func() (bool, string) {
		cond := apimeta.FindStatusCondition(cluster(t, ns, clusterName).Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition)

		return cond == nil, fmt.Sprintf("%+v", cond)
	})

	_, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "calico-system"}}, metav1.CreateOptions{})
	testenv.Must(t, err)

	calico := daemonSet("calico-system", "calico-node", "quay.io/calico/node:v3.31.0", map[string]string{"k8s-app": "calico-node"}, "/etc/cni/net.d")
	swap(t, k, flannel, calico)
	waitDetected(t, "calico")

	weave := daemonSet("kube-system", "weave-net", "weaveworks/weave-kube:2.8.1", nil, "/etc/cni/net.d")
	swap(t, k, calico, weave)
	c = waitDetected(t, "other")

	// The Cilium that ran stays recorded while another CNI runs: it is the
	// last one Ichor saw, not a guess.
	if c.Status.CNI.CiliumVersion != "v1.19.3" {
		t.Errorf("status.cni.ciliumVersion = %q after Cilium went; want v1.19.3 kept", c.Status.CNI.CiliumVersion)
	}

	swap(t, k, weave, nil)
	waitDetected(t, "none")

	if cond := apimeta.FindStatusCondition(cluster(t, ns, clusterName).Status.Conditions, ichorv1alpha1.CNIUnsupportedCondition); cond != nil {
		t.Errorf("a cilium cluster has a CNIUnsupported condition: %+v", cond)
	}
}

// TestCNIUnsupported: a cluster stored with the unmanaged preset but no
// adoption annotation (this suite runs no webhook, as when the object was
// written while it was away) gets CNIUnsupported=True saying what was found
// and the way out, and no controller acts on it: its approved control
// plane, a machine in maintenance, is sent nothing while the lifecycle
// reconciler counts its skips. Once the annotation makes the preset one
// Ichor manages, the condition goes and the same machine is configured at
// once: what held it was the halt.
func TestCNIUnsupported(t *testing.T) {
	ctx := context.Background()
	const other, name = "unsupported", "legacy"

	em, err := world.Machine("cp-x")
	testenv.Must(t, err)

	testenv.Must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}))

	c := testenv.TalosCluster(other, name)
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: em.IP()}
	c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged}
	c.Spec.ControlPlane.Schedulable = new(true)

	sec, err := bundle.Secret(other, c.Spec.SecretsBundleRef, theBun)
	testenv.Must(t, err)
	testenv.Must(t, k8s.Create(ctx, sec))

	testenv.Must(t, k8s.Create(ctx, c))

	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "cp-x", Labels: map[string]string{ichorv1alpha1.ClusterLabel: name}},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: name,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: em.UUID(), Serial: "SER-cp-x"},
			Address:     em.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        ichorv1alpha1.RoleControlPlane,
			Hostname:    "cp-x",
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}
	testenv.Must(t, k8s.Create(ctx, tm))
	testenv.UpdateStatus(t, k8s, tm, func(m *ichorv1alpha1.TalosMachine) {
		m.Status.Stage = ichorv1alpha1.StageMaintenance
		m.Status.MaintenanceFingerprint = em.MaintenanceFingerprint()
	})

	var cond *metav1.Condition

	testenv.EventuallyOK(t, waitTimeout, "CNIUnsupported=True", func() (bool, string) {
		cond = apimeta.FindStatusCondition(cluster(t, other, name).Status.Conditions, ichorv1alpha1.CNIUnsupportedCondition)

		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", cond)
	})

	for _, w := range []string{`spec.cni.preset is "unmanaged"`, ichorv1alpha1.AdoptedAnnotation, "changes nothing", "no render, no apply, no operation",
		"set the annotation " + ichorv1alpha1.AdoptedAnnotation + " back", ichorv1alpha1.AllowDeleteAnnotation, "spec.cni.preset: cilium"} {
		if !strings.Contains(cond.Message, w) {
			t.Errorf("the CNIUnsupported message %q does not say %q", cond.Message, w)
		}
	}

	// The lifecycle reconciler looked at the machine as it is now (an
	// annotation, which wakes it, written after its maintenance status;
	// skipped) and sent it nothing.
	skips := reconcile.PausedSkips(lifecycle.ControllerName)

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(tm), cur); err != nil {
			return err
		}

		cur.Annotations = map[string]string{"test/touched": "yes"}

		return k8s.Update(ctx, cur)
	}))
	testenv.EventuallyOK(t, waitTimeout, "the lifecycle reconciler skips the machine", func() (bool, string) {
		return reconcile.PausedSkips(lifecycle.ControllerName) > skips, fmt.Sprintf("skips %v (before %v)", reconcile.PausedSkips(lifecycle.ControllerName), skips)
	})

	if n := em.RPCCounts()["/machine.MachineService/ApplyConfiguration"]; n != 0 {
		t.Fatalf("the machine of a cluster with an unsupported CNI preset got %d ApplyConfiguration calls", n)
	}

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(tm), m))

	if m.Status.ConfigSentAt != nil || m.Status.Stage != ichorv1alpha1.StageMaintenance {
		t.Fatalf("the machine moved: stage %q, configSentAt %v", m.Status.Stage, m.Status.ConfigSentAt)
	}

	if got := cluster(t, other, name).Status.CNI.Detected; got != "" {
		t.Errorf("the CNI of an unsupported cluster was read: %q", got)
	}

	// The adoption annotation: the preset is allowed, the halt ends.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := cluster(t, other, name)
		cur.Annotations = map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}

		return k8s.Update(ctx, cur)
	}))

	testenv.EventuallyOK(t, waitTimeout, "CNIUnsupported removed", func() (bool, string) {
		cond = apimeta.FindStatusCondition(cluster(t, other, name).Status.Conditions, ichorv1alpha1.CNIUnsupportedCondition)

		return cond == nil, fmt.Sprintf("%+v", cond)
	})

	testenv.EventuallyOK(t, waitTimeout, "the machine configured once the preset is allowed", func() (bool, string) {
		testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(tm), m))

		return m.Status.ConfigSentAt != nil && em.RPCCounts()["/machine.MachineService/ApplyConfiguration"] > 0,
			fmt.Sprintf("stage %q, configSentAt %v", m.Status.Stage, m.Status.ConfigSentAt)
	})
}

// storeRaw writes c into the API server's etcd as it stores a custom
// resource (JSON under /registry/<group>/<resource>/<namespace>/<name>),
// past the CRD's schema and admission: a TalosCluster an older release, a
// restored backup or a write while the webhook was away could have left.
func storeRaw(t *testing.T, c *ichorv1alpha1.TalosCluster) {
	t.Helper()

	c.APIVersion, c.Kind = ichorv1alpha1.GroupVersion.String(), "TalosCluster"
	c.UID, c.Generation, c.CreationTimestamp = uuid.NewUUID(), 1, metav1.Now()

	raw, err := json.Marshal(c)
	testenv.Must(t, err)

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{env.EtcdEndpoint()}, DialTimeout: 10 * time.Second})
	testenv.Must(t, err)

	defer func() { _ = etcd.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = etcd.Put(ctx, "/registry/"+ichorv1alpha1.Group+"/talosclusters/"+c.Namespace+"/"+c.Name, string(raw))
	testenv.Must(t, err)
}

// TestCNIUnsupportedStoredPreset: a TalosCluster stored with a preset the
// CRD no longer admits (flannel) gets CNIUnsupported=True naming it, saying
// that Ichor changes nothing and that the preset is immutable, and naming
// the way out; its first step, the allow-delete annotation, is a write the
// API server takes (the schema ratchets an unchanged field).
func TestCNIUnsupportedStoredPreset(t *testing.T) {
	ctx := context.Background()
	const other, name = "stored", "old-flannel"

	testenv.Must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}))

	c := testenv.TalosCluster(other, name)
	c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: "flannel"}

	if err := k8s.Create(ctx, c.DeepCopy()); err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("the CRD admitted preset flannel: %v", err)
	}

	storeRaw(t, c)

	var cond *metav1.Condition

	testenv.EventuallyOK(t, waitTimeout, "CNIUnsupported=True", func() (bool, string) {
		cond = apimeta.FindStatusCondition(cluster(t, other, name).Status.Conditions, ichorv1alpha1.CNIUnsupportedCondition)

		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", cond)
	})

	if cond.Reason != ichorv1alpha1.CNIPresetUnsupportedReason {
		t.Errorf("reason %q; want %q", cond.Reason, ichorv1alpha1.CNIPresetUnsupportedReason)
	}

	for _, w := range []string{`spec.cni.preset is "flannel"`, "does not manage", "changes nothing", "immutable",
		ichorv1alpha1.AllowDeleteAnnotation, "spec.cni.preset: cilium"} {
		if !strings.Contains(cond.Message, w) {
			t.Errorf("the CNIUnsupported message %q does not say %q", cond.Message, w)
		}
	}

	if got := cluster(t, other, name).Status.CNI.Detected; got != "" {
		t.Errorf("the CNI of an unsupported cluster was read: %q", got)
	}

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := cluster(t, other, name)
		cur.Annotations = map[string]string{ichorv1alpha1.AllowDeleteAnnotation: "true"}

		return k8s.Update(ctx, cur)
	}))
}

// kubeProxyConsistency: with Cilium running, KubeProxyConsistent compares
// Cilium's live kube-proxy-replacement (ConfigMap kube-system/cilium-config)
// with spec.cni.kubeProxy, and with kube-proxy replaced also refuses a
// running kube-proxy DaemonSet: a mismatch is False with what disagrees
// (and on the attention list), agreement True.
func kubeProxyConsistency(t *testing.T, k kubernetes.Interface, c *ichorv1alpha1.TalosCluster) {
	t.Helper()

	ctx := context.Background()
	want, wrong := "false", "true"

	if c.Spec.CNI.KubeProxy == ichorv1alpha1.KubeProxyReplaced {
		want, wrong = "true", "false"
	}

	waitKubeProxy := func(status metav1.ConditionStatus, says string) {
		t.Helper()

		testenv.EventuallyOK(t, waitTimeout, "KubeProxyConsistent "+string(status), func() (bool, string) {
			cond := apimeta.FindStatusCondition(cluster(t, ns, clusterName).Status.Conditions, ichorv1alpha1.KubeProxyConsistentCondition)
			if cond == nil {
				return false, "no condition"
			}

			return cond.Status == status && strings.Contains(cond.Message, says), fmt.Sprintf("%s: %s", cond.Status, cond.Message)
		})
	}

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-config"},
		Data:       map[string]string{"kube-proxy-replacement": wrong},
	}
	_, err := k.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
	testenv.Must(t, err)

	t.Cleanup(func() {
		_ = k.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	})

	waitKubeProxy(metav1.ConditionFalse, fmt.Sprintf(`Cilium runs with kube-proxy-replacement %q`, wrong))

	cm.Data["kube-proxy-replacement"] = want
	_, err = k.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{})
	testenv.Must(t, err)

	waitKubeProxy(metav1.ConditionTrue, "agree with spec.cni.kubeProxy "+c.Spec.CNI.KubeProxy)

	if c.Spec.CNI.KubeProxy != ichorv1alpha1.KubeProxyReplaced {
		return
	}

	proxy := daemonSet("kube-system", "kube-proxy", "registry.k8s.io/kube-proxy:v1.37.2", map[string]string{"k8s-app": "kube-proxy"})
	swap(t, k, nil, proxy)
	waitKubeProxy(metav1.ConditionFalse, "two proxies")
	swap(t, k, proxy, nil)
	waitKubeProxy(metav1.ConditionTrue, "agree")
}
