package talosemu_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestKwokPodsAndNodeIdentities runs a 1+2 cluster whose pods kwok drives: a DaemonSet is
// Ready on every Node, a Deployment rolls to a new template, Talos's drain before an upgrade
// evicts pods honouring a PodDisruptionBudget, the pods of a powered-off machine turn NotReady
// (kube-controller-manager) and Ready again at power-on. The kubelets talk to the apiserver
// as system:node:<name> (audit log) and NodeRestriction keeps such an identity off other Nodes.
//
//nolint:gocyclo,cyclop,maintidx
func TestKwokPodsAndNodeIdentities(t *testing.T) {
	opt := testOptions()
	opt.Kubernetes, opt.KubeAssets = true, kubeAssets(t)

	spec := testSpec(3)
	for i, name := range []string{"cp-1", "worker-1", "worker-2"} {
		spec.Machines[i].Name = name
	}

	dir := t.TempDir()

	w, err := talosemu.Start(t.Context(), spec, dir, opt)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(w.Close)

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

	kube := kubeClient(t, kc)
	waitNodes(t, kube, 3, nodeReady, "3 Ready nodes")

	nodeOf := map[string]string{}
	for _, m := range ms {
		nodeOf[m.Name()] = strings.ToLower(hostnameOf(t, c.admin(t, m.IP())))
	}

	ctx := t.Context()

	t.Run("NodeIdentity", func(t *testing.T) {
		// a kubelet identity of worker-1 may change its own Node, not worker-2's
		kubelet := nodeIdentityClient(t, c, kc, nodeOf["worker-1"])

		own := []byte(`{"metadata":{"labels":{"example.com/own":"yes"}}}`)
		if _, err := kubelet.CoreV1().Nodes().Patch(ctx, nodeOf["worker-1"], types.MergePatchType, own, metav1.PatchOptions{}); err != nil {
			t.Fatalf("a kubelet labelling its own Node: %v", err)
		}

		other := []byte(`{"metadata":{"labels":{"example.com/other":"yes"}}}`)

		_, err := kubelet.CoreV1().Nodes().Patch(ctx, nodeOf["worker-2"], types.MergePatchType, other, metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("a kubelet labelling another Node: %v, want Forbidden", err)
		}

		// the admin identity of the Kubeconfig RPC still may
		if _, err := kube.CoreV1().Nodes().Patch(ctx, nodeOf["worker-2"], types.MergePatchType, other, metav1.PatchOptions{}); err != nil {
			t.Fatalf("admin labelling a Node: %v", err)
		}

		// the emulated kubelets renew their Lease and post their status as system:node:<name>
		// in group system:nodes (the default audit policy logs every request's user)
		audit := filepath.Join(dir, "cp-1", "logs", "audit", "kube-apiserver.log")

		testenv.EventuallyOK(t, 60*time.Second, "kubelet requests in the audit log", func() (bool, string) {
			users := auditUsers(t, audit, func(e auditEvent) bool {
				return e.ObjectRef.Resource == "leases" && e.ObjectRef.Namespace == corev1.NamespaceNodeLease && e.Verb == "update"
			})

			for _, n := range nodeOf {
				u, ok := users[n]
				if !ok {
					return false, fmt.Sprintf("no lease update of %s yet (%v)", n, users)
				}

				if u.Username != "system:node:"+n || !slices.Contains(u.Groups, "system:nodes") {
					return false, fmt.Sprintf("lease of %s renewed by %+v", n, u)
				}
			}

			return true, ""
		})
	})

	t.Run("DaemonSet", func(t *testing.T) {
		labels := map[string]string{"app": "everywhere"}

		_, err := kube.AppsV1().DaemonSets("default").Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "everywhere"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers:  []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
					},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}

		testenv.EventuallyOK(t, 90*time.Second, "DaemonSet ready on every node", func() (bool, string) {
			ds, err := kube.AppsV1().DaemonSets("default").Get(ctx, "everywhere", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}

			return ds.Status.DesiredNumberScheduled == 3 && ds.Status.NumberReady == 3, fmt.Sprintf("%+v", ds.Status)
		})

		// kwok gives each pod an address of its Node's podCIDR and the Node's address as host IP
		pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=everywhere"})
		if err != nil {
			t.Fatal(err)
		}

		for _, p := range pods.Items {
			node, err := kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}

			_, cidr, err := net.ParseCIDR(node.Spec.PodCIDR)
			if err != nil {
				t.Fatalf("node %s podCIDR %q: %v", node.Name, node.Spec.PodCIDR, err)
			}

			if ip := net.ParseIP(p.Status.PodIP); ip == nil || !cidr.Contains(ip) {
				t.Fatalf("pod %s on %s has IP %q outside %s", p.Name, node.Name, p.Status.PodIP, cidr)
			}

			if p.Status.HostIP != node.Status.Addresses[0].Address {
				t.Fatalf("pod %s host IP %q, node address %q", p.Name, p.Status.HostIP, node.Status.Addresses[0].Address)
			}
		}
	})

	t.Run("DeploymentRollout", func(t *testing.T) {
		d := deployment("roll", 2)
		if _, err := kube.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		waitDeployment(t, kube, "roll")

		patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"example.com/rev":"2"}}}}}`)
		if _, err := kube.AppsV1().Deployments("default").Patch(ctx, "roll", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}

		waitDeployment(t, kube, "roll")

		pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=roll"})
		if err != nil {
			t.Fatal(err)
		}

		for _, p := range pods.Items {
			if p.Annotations["example.com/rev"] != "2" {
				t.Fatalf("pod %s of the old template is left (%s)", p.Name, p.Status.Phase)
			}
		}
	})

	t.Run("DrainHonoursPDB", func(t *testing.T) {
		// both replicas on worker-1: worker-2 is cordoned while they are scheduled
		setUnschedulable(t, kube, nodeOf["worker-2"], true)

		if _, err := kube.AppsV1().Deployments("default").Create(ctx, deployment("guarded", 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		waitDeployment(t, kube, "guarded")

		minAvailable := intstr.FromInt32(1)

		_, err := kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: &minAvailable,
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}

		testenv.EventuallyOK(t, 30*time.Second, "PDB allows one disruption", func() (bool, string) {
			pdb, err := kube.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "guarded", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}

			return pdb.Status.DisruptionsAllowed == 1 && pdb.Status.ObservedGeneration == pdb.Generation, fmt.Sprintf("%+v", pdb.Status)
		})

		old := map[types.UID]bool{}

		pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil {
			t.Fatal(err)
		}

		for _, p := range pods.Items {
			if p.Spec.NodeName != nodeOf["worker-1"] {
				t.Fatalf("pod %s on %s, want %s", p.Name, p.Spec.NodeName, nodeOf["worker-1"])
			}

			old[p.UID] = true
		}

		setUnschedulable(t, kube, nodeOf["worker-2"], false)

		// the legacy Upgrade cordons and drains worker-1 before it reboots
		aw := c.admin(t, ms[1].IP())

		//nolint:staticcheck // the legacy Upgrade is the one that drains
		if _, err := aw.MachineClient.Upgrade(ctx, &machineapi.UpgradeRequest{Image: "ghcr.io/siderolabs/installer:v1.14.2"}); err != nil {
			t.Fatal(err)
		}

		// while the drain runs, at least one guarded pod stays Ready (the second eviction waits
		// for the first pod's replacement on worker-2)
		deadline := time.Now().Add(120 * time.Second)

		for {
			pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
			if err != nil {
				t.Fatal(err)
			}

			ready, oldLeft, newReady := 0, 0, 0

			for _, p := range pods.Items {
				if old[p.UID] {
					oldLeft++
				}

				if podReady(p) && p.DeletionTimestamp == nil {
					ready++

					if !old[p.UID] && p.Spec.NodeName == nodeOf["worker-2"] {
						newReady++
					}
				}
			}

			if ready < 1 {
				t.Fatalf("no guarded pod Ready during the drain (PDB minAvailable 1): %d pods", len(pods.Items))
			}

			if oldLeft == 0 && newReady == 2 {
				break
			}

			if time.Now().After(deadline) {
				t.Fatalf("drain not done: %d old pods left, %d new Ready on worker-2", oldLeft, newReady)
			}

			time.Sleep(200 * time.Millisecond)
		}

		// the drain evicted with worker-1's kubelet identity, and the PDB refused an eviction
		// (429) until a replacement was Ready
		codes := map[int]int{}

		for _, e := range auditEvents(t, filepath.Join(dir, "cp-1", "logs", "audit", "kube-apiserver.log")) {
			if e.ObjectRef.Subresource == "eviction" && e.Verb == "create" && e.Stage == "ResponseComplete" && strings.HasPrefix(e.ObjectRef.Name, "guarded-") {
				if e.User.Username != "system:node:"+nodeOf["worker-1"] {
					t.Fatalf("eviction by %+v, want worker-1's kubelet", e.User)
				}

				codes[e.ResponseStatus.Code]++
			}
		}

		if codes[201] != 2 || codes[429] == 0 {
			t.Fatalf("eviction answers %v, want two 201 and at least one 429", codes)
		}

		testenv.EventuallyOK(t, 90*time.Second, "worker-1 upgraded and uncordoned", func() (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, nodeOf["worker-1"], metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}

			info := ms[1].Info()

			return info.Version == "v1.14.2" && !n.Spec.Unschedulable && nodeReady(*n), fmt.Sprintf("version=%s unschedulable=%v", info.Version, n.Spec.Unschedulable)
		})
	})

	t.Run("PowerOff", func(t *testing.T) {
		// worker-2 runs both guarded pods; powered off, its Node turns NotReady and
		// kube-controller-manager marks its pods NotReady (kwok no longer manages the Node);
		// the unreachable taint would evict them after the default 300 s toleration
		if err := ms[2].PowerOff(); err != nil {
			t.Fatal(err)
		}

		testenv.EventuallyOK(t, 120*time.Second, "the powered-off machine's pods NotReady", func() (bool, string) {
			n, err := kube.CoreV1().Nodes().Get(ctx, nodeOf["worker-2"], metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}

			tainted := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == corev1.TaintNodeUnreachable && t.Effect == corev1.TaintEffectNoExecute
			})

			pods, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeOf["worker-2"]})
			if err != nil {
				return false, err.Error()
			}

			ready := 0

			for _, p := range pods.Items {
				if podReady(p) {
					ready++
				}
			}

			return !nodeReady(*n) && tainted && len(pods.Items) > 0 && ready == 0,
				fmt.Sprintf("node ready=%v unreachable-taint=%v pods=%d ready=%d", nodeReady(*n), tainted, len(pods.Items), ready)
		})

		if err := ms[2].PowerOn(); err != nil {
			t.Fatal(err)
		}

		// back up, the pods are Ready again (as a kubelet restarting them would report)
		waitDeployment(t, kube, "guarded")
	})
}

// nodeIdentityClient is a client with a kubelet's identity (CN system:node:<node>, O
// system:nodes), signed with the cluster's Kubernetes CA.
func nodeIdentityClient(t testing.TB, c *realCluster, kubeconfig []byte, node string) *kubernetes.Clientset {
	t.Helper()

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(c.bundle.Certs.K8s)
	if err != nil {
		t.Fatal(err)
	}

	kp, err := x509.NewKeyPair(ca, x509.CommonName("system:node:"+node), x509.Organization("system:nodes"),
		x509.NotAfter(time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}

	admin, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	rc := &rest.Config{
		Host:            admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.bundle.Certs.K8s.Crt, CertData: kp.CrtPEM, KeyData: kp.KeyPEM},
		Timeout:         15 * time.Second,
	}

	cl, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	return cl
}

type auditUser struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

type auditEvent struct {
	Verb      string    `json:"verb"`
	Stage     string    `json:"stage"`
	User      auditUser `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditEvents reads the apiserver's audit log (missing: none).
func auditEvents(t testing.TB, path string) []auditEvent {
	t.Helper()

	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return nil
	}
	defer f.Close() //nolint:errcheck

	var out []auditEvent

	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)

	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}

	return out
}

// auditUsers maps the object name of the audit events that match to the user of the last one.
func auditUsers(t testing.TB, path string, match func(auditEvent) bool) map[string]auditUser {
	t.Helper()

	out := map[string]auditUser{}

	for _, e := range auditEvents(t, path) {
		if match(e) {
			out[e.ObjectRef.Name] = e.User
		}
	}

	return out
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}

	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// waitDeployment waits until the Deployment's current template is rolled out with its two
// replicas Ready and no old ones.
func waitDeployment(t testing.TB, kube *kubernetes.Clientset, name string) {
	t.Helper()

	const n = 2

	testenv.EventuallyOK(t, 120*time.Second, "deployment "+name+" rolled out", func() (bool, string) {
		d, err := kube.AppsV1().Deployments("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		s := d.Status

		return s.ObservedGeneration == d.Generation && s.UpdatedReplicas == n && s.ReadyReplicas == n && s.AvailableReplicas == n && s.Replicas == n,
			fmt.Sprintf("%+v", s)
	})
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}

	return false
}

func setUnschedulable(t testing.TB, kube *kubernetes.Clientset, node string, on bool) {
	t.Helper()

	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%v}}`, on)

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	if _, err := kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
