package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/attention"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func healthClient(t testing.TB, tok string) ichorv1.HealthServiceClient {
	return ichorv1.NewHealthServiceClient(grpcConn(t, tok))
}

// grpcRefused is what a NodeUnreachable condition holds when the node's port is closed.
const grpcRefused = `Unavailable: connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.21:50000: connect: connection refused"`

// approvedMachine creates an approved, running machine of the test cluster
// with the given status, and removes it when the test ends.
func approvedMachine(t *testing.T, name, role, address string, st ichorv1alpha1.TalosMachineStatus) {
	t.Helper()
	ctx := context.Background()
	now := metav1.Now()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: testCluster, Role: role, Address: address, Identity: ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
		},
	}
	if err := admin.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), m) })
	m.Status = st
	ichorv1alpha1.SummarizeTalosMachine(m)
	if err := admin.Status().Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitCached(t, name, m.ResourceVersion)
}

func attentionOf(t *testing.T, tok string, want func([]*ichorv1.AttentionItem) bool) []*ichorv1.AttentionItem {
	t.Helper()
	c := healthClient(t, tok)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.ListAttention(context.Background(), &ichorv1.ListAttentionRequest{})
		if err != nil {
			t.Fatalf("ListAttention: %v", err)
		}
		if want(resp.GetItems()) {
			return resp.GetItems()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the attention list never had what the test waits for: %v", resp.GetItems())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func itemsOf(items []*ichorv1.AttentionItem, subject string) []*ichorv1.AttentionItem {
	var out []*ichorv1.AttentionItem
	for _, it := range items {
		if it.GetSubject() == subject {
			out = append(out, it)
		}
	}
	return out
}

// TestListAttention: the list is the backend's (contracts/pkg/attention),
// in plain language, one item per problem, with the raw text as detail and
// the condition's time; a user who may not read the cluster gets nothing.
func TestListAttention(t *testing.T) {
	ctx := context.Background()
	since := metav1.NewTime(time.Now().Add(-5 * time.Minute).Truncate(time.Second))
	cond := func(typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, LastTransitionTime: since}
	}
	createMachine(t, "att-new", ichorv1alpha1.ApprovalPending, "")
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "att-new"}})
	})
	approvedMachine(t, "att-w1", ichorv1alpha1.RoleWorker, "10.0.0.21", ichorv1alpha1.TalosMachineStatus{
		Stage: ichorv1alpha1.StageUnreachable,
		Conditions: []metav1.Condition{
			cond(ichorv1alpha1.ProvisionedCondition, metav1.ConditionTrue, ichorv1alpha1.JoinedReason, "joined"),
			cond(ichorv1alpha1.NodeHealthyCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason,
				"the node at 10.0.0.21 answers neither with the cluster's credentials nor in maintenance mode: "+grpcRefused),
			cond(ichorv1alpha1.InSyncCondition, metav1.ConditionFalse, ichorv1alpha1.NodeUnreachableReason, grpcRefused),
		},
	})

	items := attentionOf(t, viewer(t), func(items []*ichorv1.AttentionItem) bool {
		return len(itemsOf(items, "att-new")) > 0 && len(itemsOf(items, "att-w1")) > 0
	})
	pending := itemsOf(items, "att-new")
	if len(pending) != 1 || pending[0].GetAction() != "Approve" || pending[0].GetSummary() != "att-new (no address) waits for approval" {
		t.Fatalf("pending machine: %v", pending)
	}
	down := itemsOf(items, "att-w1")
	if len(down) != 1 {
		t.Fatalf("one problem (unreachable, on NodeHealthy and InSync) is one item, got %v", down)
	}
	if d := down[0]; d.GetSummary() != "att-w1: the node's Talos API does not answer (connection refused)" || d.GetSeverity() != "Error" ||
		d.GetAction() != "OpenNode" || !strings.Contains(d.GetDetail(), "transport: Error while dialing") || !d.GetSince().AsTime().Equal(since.Time) {
		t.Fatalf("unreachable machine: %v", d)
	}
	if items[0].GetSeverity() != "Error" {
		t.Fatalf("errors come first: %v", items)
	}

	// The cluster's Ready repeats its machines': not told again.
	c := &ichorv1alpha1.TalosCluster{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testCluster}, c); err != nil {
		t.Fatal(err)
	}
	c.Status.Conditions = []metav1.Condition{cond(ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.MachinesNotReadyReason, "not Ready: att-w1")}
	if err := admin.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Status.Conditions = nil
		_ = admin.Status().Update(context.Background(), c)
	})
	rv := c.ResourceVersion
	items = attentionOf(t, viewer(t), func([]*ichorv1.AttentionItem) bool {
		got := &ichorv1alpha1.TalosCluster{}
		return nodeSvc.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testCluster}, got) == nil && got.ResourceVersion == rv
	})
	if cl := itemsOf(items, testCluster); len(cl) != 0 {
		t.Fatalf("the cluster's Ready is told by its machines, not again: %v", cl)
	}

	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/attention", viewer(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), "does not answer (connection refused)") {
		t.Fatalf("REST attention: %d %v", code, body)
	}

	_, err := healthClient(t, token(t, "ichor:nobody")).ListAttention(ctx, &ichorv1.ListAttentionRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user who may not get the cluster: %v, want PermissionDenied", err)
	}
}

// TestClusterHealth: etcd's members and quorum come from the control planes
// over Talos, each kube-apiserver's readiness from its /readyz; versions and
// their skew from the machines; certificate expiry that status does not
// record is said to be missing.
func TestClusterHealth(t *testing.T) {
	// A control plane at 127.0.0.1: its kube-apiserver is the suite's API
	// server, and no Talos API answers there.
	approvedMachine(t, "hc-api", ichorv1alpha1.RoleControlPlane, "127.0.0.1", ichorv1alpha1.TalosMachineStatus{
		Stage: ichorv1alpha1.StageRunning, TalosVersion: "v1.13.2",
	})

	// Events: one of Ichor's (shown), one of a pod (not).
	for _, ev := range []*corev1.Event{
		{
			ObjectMeta:     metav1.ObjectMeta{Namespace: testNS, Name: "hc-api.apply"},
			InvolvedObject: corev1.ObjectReference{APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: "TalosMachine", Namespace: testNS, Name: "hc-api"},
			Type:           corev1.EventTypeWarning, Reason: "ApplyFailed", Message: "the node refused the configuration", Count: 1, LastTimestamp: metav1.Now(),
		},
		{
			ObjectMeta:     metav1.ObjectMeta{Namespace: testNS, Name: "some-pod.pulled"},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: testNS, Name: "some-pod"},
			Type:           corev1.EventTypeNormal, Reason: "Pulled", Message: "image pulled", Count: 1, LastTimestamp: metav1.Now(),
		},
	} {
		must(t, admin.Create(context.Background(), ev))
		t.Cleanup(func() { _ = admin.Delete(context.Background(), ev) })
	}

	resp, err := healthClient(t, viewer(t)).GetClusterHealth(context.Background(), &ichorv1.GetClusterHealthRequest{})
	if err != nil {
		t.Fatalf("viewer GetClusterHealth: %v", err)
	}

	etcd := resp.GetEtcd()
	if len(etcd.GetMembers()) != 1 || etcd.GetHealthy() != 1 || etcd.GetQuorum() != 1 || !etcd.GetHasQuorum() {
		t.Fatalf("etcd: %v", etcd)
	}
	if mem := etcd.GetMembers()[0]; mem.GetMachine() != nodeName || !mem.GetHealthy() || !mem.GetLeader() || mem.GetDbSizeBytes() <= 0 {
		t.Fatalf("etcd member: %v", mem)
	}

	cps := map[string]*ichorv1.ControlPlaneHealth{}
	for _, cp := range resp.GetControlPlanes() {
		cps[cp.GetMachine()] = cp
	}
	if cp := cps["hc-api"]; cp == nil || !cp.GetApiServerReady() || cp.GetEtcdHealthy() || !strings.Contains(cp.GetEtcdMessage(), "connection refused") {
		t.Fatalf("hc-api (kube-apiserver ready, no Talos): %v", cp)
	}
	if cp := cps[nodeName]; cp == nil || cp.GetApiServerReady() || !strings.Contains(cp.GetApiServerMessage(), "connection refused") ||
		!cp.GetEtcdHealthy() || cp.GetEtcdMessage() != "leader" {
		t.Fatalf("%s (etcd leader, no kube-apiserver): %v", nodeName, cp)
	}

	var skewed *ichorv1.NodeVersions
	for _, n := range resp.GetNodes() {
		if n.GetMachine() == "hc-api" {
			skewed = n
		}
	}
	if skewed == nil || !skewed.GetSkewed() || skewed.GetTalosVersion() != "v1.13.2" || !resp.GetVersionSkew() {
		t.Fatalf("a node on v1.13.2 in a v1.14.1 cluster is skewed: %v (skew %t)", skewed, resp.GetVersionSkew())
	}
	if m := resp.GetCertificatesMissing(); !strings.Contains(m, "Kubernetes CA") || !strings.Contains(m, "Kubernetes aggregator CA") ||
		strings.Contains(m, "client certificate") || len(resp.GetCertificates()) != 0 {
		t.Fatalf("CAs not in status must be said missing (not the per-connection client certificate): %q %v", m, resp.GetCertificates())
	}

	if ev := resp.GetEvents(); len(ev) != 1 || ev[0].GetKind() != "TalosMachine" || ev[0].GetName() != "hc-api" || ev[0].GetReason() != "ApplyFailed" || resp.GetEventsUnavailable() != "" {
		t.Fatalf("recent Events (Ichor's objects only): %v %q", ev, resp.GetEventsUnavailable())
	}

	code, body := rest(t, httpClient(), http.MethodGet, "/api/v1/health", viewer(t), "")
	if code != http.StatusOK || !strings.Contains(toJSON(body), `"hasQuorum":true`) {
		t.Fatalf("REST health: %d %v", code, body)
	}
}

// TestNodeResources: uptime, CPU, memory and disk use from the node's Talos API.
func TestNodeResources(t *testing.T) {
	resp, err := nodeClient(t, viewer(t)).GetNodeResources(context.Background(), &ichorv1.GetNodeResourcesRequest{Name: nodeName})
	if err != nil {
		t.Fatalf("viewer GetNodeResources: %v", err)
	}
	if bt := resp.GetBootTime().AsTime(); bt.IsZero() || bt.After(time.Now()) {
		t.Fatalf("boot time %v", bt)
	}
	if resp.GetCpus() != 8 || resp.GetCpuBusy() < 0.19 || resp.GetCpuBusy() > 0.21 || resp.GetLoad1() <= 0 {
		t.Fatalf("cpu: %d cpus, %.2f busy, load %.2f", resp.GetCpus(), resp.GetCpuBusy(), resp.GetLoad1())
	}
	if resp.GetMemoryTotalBytes() != 8<<30 || resp.GetMemoryAvailableBytes() != 6<<30 {
		t.Fatalf("memory: %d of %d available", resp.GetMemoryAvailableBytes(), resp.GetMemoryTotalBytes())
	}
	fs := resp.GetFilesystems()
	if len(fs) != 1 || fs[0].GetMountPoint() != "/var" || fs[0].GetDevice() != "/dev/nvme0n1p6" || fs[0].GetAvailableBytes() >= fs[0].GetSizeBytes() {
		t.Fatalf("filesystems (tmpfs and overlays left out): %v", fs)
	}
	if _, err := nodeClient(t, token(t, "ichor:nobody")).GetNodeResources(context.Background(), &ichorv1.GetNodeResourcesRequest{Name: nodeName}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user who may not get the cluster: %v", err)
	}
}

// TestNodeKubernetes: the Node's conditions, taints and capacity, its pods and
// Events, read as the signed-in user: a viewer sees them; a user whose role
// reads machines but not Nodes is told what is missing.
func TestNodeKubernetes(t *testing.T) {
	ctx := context.Background()
	const kname = "kn-1"
	approvedMachine(t, "kn-m1", ichorv1alpha1.RoleWorker, "10.0.0.31", ichorv1alpha1.TalosMachineStatus{Stage: ichorv1alpha1.StageRunning, NodeName: kname})

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: kname},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}},
	}
	must(t, admin.Create(ctx, node))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), node) })
	node.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3800m"), corev1.ResourceMemory: resource.MustParse("7Gi")},
		Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()},
		},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.1.0", KernelVersion: "6.18.0-talos"},
	}
	must(t, admin.Status().Update(ctx, node))

	// envtest runs no controller-manager: the namespace's default ServiceAccount is made here.
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "kn-pod"},
		Spec:       corev1.PodSpec{NodeName: kname, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	must(t, admin.Create(ctx, pod))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), pod) })
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: "kn-1.reboot"},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: kname},
		Type:           corev1.EventTypeWarning, Reason: "Rebooted", Message: "Node kn-1 has been rebooted", Count: 2,
		LastTimestamp: metav1.Now(),
	}
	must(t, admin.Create(ctx, ev))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), ev) })

	resp, err := nodeClient(t, viewer(t)).GetNodeKubernetes(ctx, &ichorv1.GetNodeKubernetesRequest{Name: "kn-m1"})
	if err != nil {
		t.Fatalf("viewer GetNodeKubernetes: %v", err)
	}
	if resp.GetNodeName() != kname || resp.GetKubeletVersion() != "v1.37.2" || len(resp.GetConditions()) != 2 || len(resp.GetUnavailable()) != 0 {
		t.Fatalf("node: %v", resp)
	}
	// The API server's TaintNodesByCondition adds node.kubernetes.io/not-ready beside the test's.
	found := false
	for _, tt := range resp.GetTaints() {
		found = found || tt.GetKey() == "dedicated" && tt.GetValue() == "db" && tt.GetEffect() == "NoSchedule"
	}
	if !found {
		t.Fatalf("taints: %v", resp.GetTaints())
	}
	capacity := map[string]string{}
	for _, c := range resp.GetCapacity() {
		capacity[c.GetName()] = c.GetCapacity() + "/" + c.GetAllocatable()
	}
	if capacity["cpu"] != "4/3800m" || capacity["memory"] != "8Gi/7Gi" {
		t.Fatalf("capacity: %v", capacity)
	}
	if p := resp.GetPods(); len(p) != 1 || p[0].GetName() != "kn-pod" || p[0].GetReady() != "0/1" {
		t.Fatalf("pods: %v", p)
	}
	if e := resp.GetEvents(); len(e) != 1 || e[0].GetReason() != "Rebooted" || e[0].GetCount() != 2 {
		t.Fatalf("events: %v", e)
	}

	// A role that reads machines and not Nodes: the rest is said, not filled in.
	limited := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-machines-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{ichorv1alpha1.GroupVersion.Group}, Resources: []string{"talosmachines"}, Verbs: []string{"get", "list"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-machines-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: limited.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "ichor:limited"}},
	}
	must(t, admin.Create(ctx, limited))
	must(t, admin.Create(ctx, binding))
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), binding)
		_ = admin.Delete(context.Background(), limited)
	})
	resp, err = nodeClient(t, token(t, "ichor:limited")).GetNodeKubernetes(ctx, &ichorv1.GetNodeKubernetesRequest{Name: "kn-m1"})
	if err != nil {
		t.Fatalf("limited GetNodeKubernetes: %v", err)
	}
	if len(resp.GetUnavailable()) != 3 || !strings.Contains(resp.GetUnavailable()[0], "your role may not read it") || len(resp.GetPods()) != 0 || resp.GetKubeletVersion() != "" {
		t.Fatalf("limited: %v", resp)
	}

	if _, err := nodeClient(t, token(t, "ichor:nobody")).GetNodeKubernetes(ctx, &ichorv1.GetNodeKubernetesRequest{Name: "kn-m1"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user who may not get machines: %v", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestListAttentionBackupsAndCertificates: a stale etcd backup and a cluster
// CA that expires within 30 days are in the list, from the API (the backup's
// Stale condition, the cluster's status.certificates); a paused operation is
// there too (TestOperations in contracts/pkg/attention covers its words).
func TestListAttentionBackupsAndCertificates(t *testing.T) {
	ctx := context.Background()
	now := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	b := &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "att-nightly"},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{
			ClusterName: testCluster, Schedule: "0 3 * * *",
			S3:               ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "s3"}},
			EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "age"},
		},
	}
	testenv.Must(t, admin.Create(ctx, b))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), b) })
	b.Status.Conditions = []metav1.Condition{{Type: ichorv1alpha1.StaleCondition, Status: metav1.ConditionTrue,
		Reason: ichorv1alpha1.SnapshotOverdueReason, Message: "no snapshot was stored since the backup was created", LastTransitionTime: now}}
	testenv.Must(t, admin.Status().Update(ctx, b))

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "att-held"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: testCluster, Type: ichorv1alpha1.OperationConfig, Paused: true},
	}
	testenv.Must(t, admin.Create(ctx, op))
	t.Cleanup(func() { _ = admin.Delete(context.Background(), op) })
	op.Status.Phase = ichorv1alpha1.OperationPaused
	testenv.Must(t, admin.Status().Update(ctx, op))

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, admin.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testCluster}, c))
	soon := metav1.NewTime(time.Now().Add(12 * 24 * time.Hour).Truncate(time.Second))
	later := metav1.NewTime(time.Now().Add(20 * 24 * time.Hour).Truncate(time.Second))
	c.Status.Certificates.EtcdCAExpiry = &soon
	c.Status.Certificates.KubernetesCAExpiry = &later
	// The condition the controller sets from the same rule: not told again.
	apimeta.SetStatusCondition(&c.Status.Conditions, attention.CertificatesCondition(c.Name, c.Status.Certificates, time.Now()))
	testenv.Must(t, admin.Status().Update(ctx, c))
	t.Cleanup(func() {
		c.Status.Certificates.EtcdCAExpiry, c.Status.Certificates.KubernetesCAExpiry = nil, nil
		apimeta.RemoveStatusCondition(&c.Status.Conditions, ichorv1alpha1.CertificatesExpiringCondition)
		_ = admin.Status().Update(context.Background(), c)
	})

	items := attentionOf(t, viewer(t), func(items []*ichorv1.AttentionItem) bool {
		return len(itemsOf(items, "att-nightly")) > 0 && len(itemsOf(items, "att-held")) > 0 && len(itemsOf(items, testCluster)) > 0
	})
	if bk := itemsOf(items, "att-nightly"); bk[0].GetKind() != "TalosEtcdBackup" || bk[0].GetSeverity() != "Warning" ||
		!strings.Contains(bk[0].GetSummary(), "att-nightly is stale") || bk[0].GetCommand() != "ichor etcd backup now att-nightly --wait" {
		t.Errorf("the stale backup: %v", bk)
	}
	cl := itemsOf(items, testCluster)
	if len(cl) != 2 {
		t.Fatalf("want the etcd CA and the Kubernetes CA, once each: %v", cl)
	}
	if !strings.Contains(cl[0].GetSummary(), "etcd CA of cluster prod expires in") || !strings.Contains(cl[0].GetSummary(), "cannot rotate it") ||
		cl[0].GetSeverity() != "Warning" || cl[0].GetCommand() != "" {
		t.Errorf("the expiring etcd CA (no command: this release cannot rotate it): %v", cl[0])
	}
	if !strings.Contains(cl[1].GetSummary(), "Kubernetes CA of cluster prod expires in") || cl[1].GetCommand() != "ichor cluster rotate-ca prod" {
		t.Errorf("the expiring Kubernetes CA, with the rotate-ca command: %v", cl[1])
	}
	if p := itemsOf(items, "att-held"); p[0].GetAction() != "ResumeOperation" || !strings.Contains(p[0].GetSummary(), "is paused") {
		t.Errorf("the paused operation: %v", p)
	}
}
