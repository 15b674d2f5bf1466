package talosemu_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// realCluster holds the configs of a cluster whose endpoint is its first control plane.
type realCluster struct {
	bundle       *secrets.Bundle
	controlPlane []byte
	worker       []byte
	talosconfig  *clientconfig.Config
}

//nolint:staticcheck // the v1alpha1 inline manifests are what generated configs carry in v1.14
func newRealCluster(t testing.TB, endpointIP string, inline v1alpha1.ClusterInlineManifests) *realCluster {
	t.Helper()

	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput("emu", "https://"+endpointIP+":6443", "1.37.2",
		generate.WithSecretsBundle(bundle), generate.WithInstallDisk("/dev/nvme0n1"))
	if err != nil {
		t.Fatal(err)
	}

	rc := &realCluster{bundle: bundle}

	for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		cfg, err := in.Config(typ)
		if err != nil {
			t.Fatal(err)
		}

		if typ == machine.TypeControlPlane && len(inline) > 0 {
			cfg.RawV1Alpha1().ClusterConfig.ClusterInlineManifests = inline //nolint:staticcheck // see above
		}

		b, err := cfg.EncodeBytes()
		if err != nil {
			t.Fatal(err)
		}

		if typ == machine.TypeControlPlane {
			rc.controlPlane = b
		} else {
			rc.worker = b
		}
	}

	rc.talosconfig, err = in.Talosconfig()
	if err != nil {
		t.Fatal(err)
	}

	return rc
}

func (c *realCluster) admin(t testing.TB, endpoint string) *client.Client {
	t.Helper()

	cl, err := client.New(t.Context(), client.WithConfig(c.talosconfig), client.WithEndpoints(endpoint))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = cl.Close() })

	return cl
}

func (c *realCluster) factory(endpoint string) func() (*client.Client, error) {
	return func() (*client.Client, error) {
		return client.New(context.Background(), client.WithConfig(c.talosconfig), client.WithEndpoints(endpoint))
	}
}

// provisionAll applies the configs to maintenance machines in parallel and waits until every
// one runs.
func (c *realCluster) provisionAll(t testing.TB, cps, workers []*talosemu.Machine) {
	t.Helper()

	var wg sync.WaitGroup

	errs := make(chan error, len(cps)+len(workers))

	apply := func(m *talosemu.Machine, data []byte) {
		defer wg.Done()

		cl, err := client.New(context.Background(), client.WithMaintenanceMode(m.IP(), nil), client.WithDefaultGRPCDialOptions())
		if err != nil {
			errs <- err

			return
		}
		defer cl.Close() //nolint:errcheck

		if _, err := cl.ApplyConfiguration(context.Background(), applyRequest(data)); err != nil {
			errs <- fmt.Errorf("%s: %w", m.Name(), err)
		}
	}

	for _, m := range cps {
		wg.Add(1)

		go apply(m, c.controlPlane)
	}

	for _, m := range workers {
		wg.Add(1)

		go apply(m, c.worker)
	}

	wg.Wait()
	close(errs)

	for err := range errs {
		t.Fatal(err)
	}

	for _, m := range append(append([]*talosemu.Machine{}, cps...), workers...) {
		waitStage(t, c.factory(m.IP()), runtime.MachineStageRunning)
	}
}

type memberView struct {
	names    []string
	learners int
	ids      []uint64
}

func memberList(ctx context.Context, cl *client.Client) (memberView, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	resp, err := cl.MachineClient.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	if err != nil {
		return memberView{}, err
	}

	var v memberView

	for _, mem := range resp.GetMessages()[0].GetMembers() {
		v.names = append(v.names, mem.GetHostname())
		v.ids = append(v.ids, mem.GetId())

		if mem.GetIsLearner() {
			v.learners++
		}
	}

	return v, nil
}

// waitVoters waits until the member list read through cl shows n started voting members.
func waitVoters(t testing.TB, cl *client.Client, n int, timeout time.Duration) memberView {
	t.Helper()

	var v memberView

	testenv.EventuallyOK(t, timeout, fmt.Sprintf("%d voting etcd members", n), func() (bool, string) {
		var err error

		v, err = memberList(t.Context(), cl)
		if err != nil {
			return false, err.Error()
		}

		started := 0

		for _, name := range v.names {
			if name != "" {
				started++
			}
		}

		return len(v.names) == n && started == n && v.learners == 0, fmt.Sprintf("%+v", v)
	})

	return v
}

func snapshot(t testing.TB, cl *client.Client) []byte {
	t.Helper()

	stream, err := cl.MachineClient.EtcdSnapshot(t.Context(), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}

	var b []byte

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return b
		}

		if err != nil {
			t.Fatalf("reading snapshot: %v", err)
		}

		b = append(b, msg.GetBytes()...)
	}
}

func recoverUpload(ctx context.Context, cl *client.Client, snap []byte) error {
	stream, err := cl.MachineClient.EtcdRecover(ctx)
	if err != nil {
		return err
	}

	for off := 0; off < len(snap); off += 1 << 20 {
		end := min(off+1<<20, len(snap))
		if err := stream.Send(&common.Data{Bytes: snap[off:end]}); err != nil {
			// the server ended the stream; its status comes with the reply
			_, rerr := stream.CloseAndRecv()
			if rerr != nil {
				return rerr
			}

			return err
		}
	}

	_, err = stream.CloseAndRecv()

	return err
}

// TestEtcdMembership runs real etcd members on two control planes: Bootstrap and its errors,
// a join as learner then promotion, ForfeitLeadership, RemoveMemberByID NotFound, a graceful
// Reset that leaves etcd first and a rejoin after reprovisioning.
func TestEtcdMembership(t *testing.T) {
	spec := testSpec(3)
	w := startWorld(t, spec, "")
	ms := w.Machines()
	cp1, cp2, wk := ms[0], ms[1], ms[2]

	c := newRealCluster(t, cp1.IP(), nil)

	// in maintenance every caller is os:reader; EtcdRecover needs os:admin
	maint := maintenanceClient(t, wk.IP())
	wantCode(t, recoverUpload(t.Context(), maint, []byte("x")), codes.PermissionDenied, "not authorized")

	c.provisionAll(t, []*talosemu.Machine{cp1, cp2}, []*talosemu.Machine{wk})

	a1, a2, aw := c.admin(t, cp1.IP()), c.admin(t, cp2.IP()), c.admin(t, wk.IP())

	// before Bootstrap no member runs
	_, err := aw.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{})
	wantCode(t, err, codes.Unimplemented, "")

	_, err = a1.MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
	wantCode(t, err, codes.Unavailable, "")

	_, err = a1.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, err, codes.FailedPrecondition, "")

	if _, err := a1.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	_, err = a1.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{})
	wantCode(t, err, codes.AlreadyExists, "etcd data directory is not empty")

	// the second control plane joins as a learner and is promoted
	// (t:internal/app/machined/pkg/system/services/etcd.go)
	v := waitVoters(t, a1, 2, 60*time.Second)

	_, err = a2.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{})
	wantCode(t, err, codes.AlreadyExists, "etcd data directory is not empty")

	// both members answer their own status and agree on the leader
	leaders := make([]uint64, 0, 2)

	for _, cl := range []*client.Client{a1, a2} {
		st, err := cl.MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
		if err != nil {
			t.Fatalf("EtcdStatus: %v", err)
		}

		ms := st.GetMessages()[0].GetMemberStatus()
		if ms.GetMemberId() == 0 || ms.GetProtocolVersion() == "" || ms.GetDbSize() == 0 || ms.GetIsLearner() {
			t.Fatalf("EtcdStatus: %+v", ms)
		}

		leaders = append(leaders, ms.GetLeader())
	}

	if leaders[0] != leaders[1] || leaders[0] == 0 {
		t.Fatalf("leaders disagree: %v (members %v)", leaders, v.ids)
	}

	_, err = a1.MachineClient.EtcdRemoveMemberByID(t.Context(), &machineapi.EtcdRemoveMemberByIDRequest{MemberId: 0x1234})
	wantCode(t, err, codes.NotFound, "")

	// forfeit on the leader moves leadership to the other member
	leaderCl, other := a1, a2

	st2, _ := a2.MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
	if st2.GetMessages()[0].GetMemberStatus().GetMemberId() == leaders[0] {
		leaderCl, other = a2, a1
	}

	fr, err := leaderCl.MachineClient.EtcdForfeitLeadership(t.Context(), &machineapi.EtcdForfeitLeadershipRequest{})
	if err != nil {
		t.Fatalf("EtcdForfeitLeadership: %v", err)
	}

	if fr.GetMessages()[0].GetMember() == "" {
		t.Fatal("EtcdForfeitLeadership on the leader named no new leader")
	}

	testenv.EventuallyOK(t, 20*time.Second, "leadership moved", func() (bool, string) {
		st, err := other.MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
		if err != nil {
			return false, err.Error()
		}

		ms := st.GetMessages()[0].GetMemberStatus()

		return ms.GetLeader() == ms.GetMemberId(), fmt.Sprintf("%+v", ms)
	})

	// graceful reset of cp2 leaves etcd before wiping (t:…/v1alpha1_sequencer.go Reset)
	if _, err := a2.MachineClient.Reset(t.Context(), &machineapi.ResetRequest{Graceful: true, Reboot: true}); err != nil {
		t.Fatalf("Reset: %v", err)
	}

	waitVoters(t, a1, 1, 60*time.Second)
	waitStage(t, maintenanceFactory(cp2.IP()), runtime.MachineStageMaintenance)

	// reprovisioned, it joins again as a new member
	c.provisionAll(t, []*talosemu.Machine{cp2}, nil)
	waitVoters(t, a1, 2, 60*time.Second)

	// EtcdLeaveCluster removes the member
	a2 = c.admin(t, cp2.IP())
	if _, err := a2.MachineClient.EtcdLeaveCluster(t.Context(), &machineapi.EtcdLeaveClusterRequest{}); err != nil {
		t.Fatalf("EtcdLeaveCluster: %v", err)
	}

	waitVoters(t, a1, 1, 30*time.Second)

	_, err = a2.MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
	wantCode(t, err, codes.Unavailable, "")
}

var errNoKubeAssets = errors.New("no kube assets")

func kubeAssets(t testing.TB) string {
	t.Helper()

	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = home + "/.cache/ichor/assets/v1.37.2"
	}

	if _, err := os.Stat(dir + "/kube-apiserver"); err != nil {
		t.Fatalf("%v: kube-apiserver not in %s: run `go tool task assets` (or set KUBEBUILDER_ASSETS)", errNoKubeAssets, dir)
	}

	return dir
}

func contains(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

// TestClusterScenario is issue 4's scenario: 3 control planes + 2 workers with real etcd and
// a real Kubernetes control plane; bootstrap, members, Nodes and pods, snapshot, quorum held
// with one control plane off and lost with two, power on, then a recovery from the snapshot
// into a fresh cluster that holds a ConfigMap written before the snapshot.
//
//nolint:gocyclo,cyclop,maintidx
func TestClusterScenario(t *testing.T) {
	assets := kubeAssets(t)

	spec := testSpec(5)
	ms := spec.Machines

	for i := range ms {
		if i < 3 {
			ms[i].Name = fmt.Sprintf("cp-%d", i+1)
		} else {
			ms[i].Name = fmt.Sprintf("worker-%d", i-2)
		}
	}

	opt := testOptions()
	opt.Kubernetes, opt.KubeAssets = true, assets

	w, err := talosemu.Start(t.Context(), spec, t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		w.Close()

		// no kube-apiserver, controller-manager or scheduler outlives Close
		if left := childProcs(t); len(left) > 0 {
			t.Errorf("processes left after Close: %v", left)
		}
	})

	machines := w.Machines()
	cps, workers := machines[:3], machines[3:]

	inline := v1alpha1.ClusterInlineManifests{{ //nolint:staticcheck // see newRealCluster
		InlineManifestName: "emu-inline",
		InlineManifestContents: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: emu-inline\n  namespace: kube-system\ndata:\n  from: inline-manifest\n" +
			"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: emu-apps\n",
	}}

	c := newRealCluster(t, cps[0].IP(), inline)
	c.provisionAll(t, cps, workers)

	a := make([]*client.Client, len(machines))
	for i, m := range machines {
		a[i] = c.admin(t, m.IP())
	}

	// Kubeconfig before the API server exists still renders (Talos signs it locally); on a
	// worker it is control-plane only
	_, err = a[3].Kubeconfig(t.Context())
	wantCode(t, err, codes.Unimplemented, "")

	if _, err := a[0].MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	v := waitVoters(t, a[0], 3, 90*time.Second)
	t.Logf("etcd members: %v", v.names)

	kc, err := a[0].Kubeconfig(t.Context())
	if err != nil {
		t.Fatalf("Kubeconfig: %v", err)
	}

	kube := kubeClient(t, kc)

	// every control plane runs an API server that reports its real version
	for _, m := range cps {
		kcm := kubeClientAt(t, kc, "https://"+m.IP()+":6443")

		testenv.EventuallyOK(t, 120*time.Second, "kube-apiserver on "+m.Name(), func() (bool, string) {
			ver, err := kcm.Discovery().ServerVersion()
			if err != nil {
				return false, err.Error()
			}

			return strings.HasPrefix(ver.GitVersion, "v1.37."), ver.GitVersion
		})
	}

	// five Nodes, Ready, control planes labelled and tainted
	waitNodes(t, kube, 5, nodeReady, "5 Ready nodes")

	nodes, err := kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	cpNodes := 0

	for _, n := range nodes.Items {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			cpNodes++

			if len(n.Spec.Taints) == 0 || n.Spec.Taints[0].Key != "node-role.kubernetes.io/control-plane" {
				t.Fatalf("control plane node %s taints %v", n.Name, n.Spec.Taints)
			}
		}

		if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Type != corev1.NodeInternalIP {
			t.Fatalf("node %s addresses %v", n.Name, n.Status.Addresses)
		}
	}

	if cpNodes != 3 {
		t.Fatalf("%d control-plane nodes, want 3", cpNodes)
	}

	// the inline manifests were server-side applied (field manager "talos")
	testenv.EventuallyOK(t, 60*time.Second, "inline manifest ConfigMap", func() (bool, string) {
		cm, err := kube.CoreV1().ConfigMaps("kube-system").Get(t.Context(), "emu-inline", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		return cm.Data["from"] == "inline-manifest" && cm.ManagedFields[0].Manager == "talos", fmt.Sprint(cm.Data)
	})

	// a Deployment's pods are scheduled to the workers and become Ready (controller-manager,
	// scheduler and the kubelet simulation at work)
	replicas := int32(2)
	labels := map[string]string{"app": "emu"}

	_, err = kube.AppsV1().Deployments("emu-apps").Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "emu"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyOK(t, 90*time.Second, "deployment ready", func() (bool, string) {
		d, err := kube.AppsV1().Deployments("emu-apps").Get(t.Context(), "emu", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		return d.Status.ReadyReplicas == 2, fmt.Sprintf("%+v", d.Status)
	})

	// resource budget of a 3+2 cluster with its API servers (issue 4: ≤ 3 GiB RSS in total)
	rss, detail := clusterRSS(t)
	t.Logf("RSS of the 3+2 cluster: %d MiB (%s)", rss>>20, detail)

	if rss > 3<<30 {
		t.Fatalf("RSS of the 3+2 cluster is %d MiB, over the 3 GiB budget (%s)", rss>>20, detail)
	}

	// a ConfigMap written before the snapshot
	_, err = kube.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before-snapshot"},
		Data:       map[string]string{"written": "before-the-snapshot"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	snap := snapshot(t, a[0])
	if len(snap) < 1<<14 {
		t.Fatalf("snapshot is %d bytes", len(snap))
	}

	workerNode := strings.ToLower(hostnameOf(t, a[4]))

	// one control plane off — the one the cluster endpoint names: quorum holds, writes work
	// through another control plane's API server, and the in-process clients (kubelets, kwok)
	// fail over to it as KubePrism does; a powered-off worker's Node turns NotReady
	if err := cps[0].PowerOff(); err != nil {
		t.Fatal(err)
	}

	if err := workers[1].PowerOff(); err != nil {
		t.Fatal(err)
	}

	kube2 := kubeClientAt(t, kc, "https://"+cps[1].IP()+":6443")

	writeCM(t, kube2, "after-one-off", 20*time.Second)

	st, err := a[1].MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
	if err != nil {
		t.Fatalf("EtcdStatus with one member off: %v", err)
	}

	if st.GetMessages()[0].GetMemberStatus().GetLeader() == 0 {
		t.Fatal("no leader with 2 of 3 members")
	}

	waitNodes(t, kube2, 1, func(n corev1.Node) bool { return n.Name == workerNode && !nodeReady(n) }, "powered-off worker NotReady")

	liveWorker := strings.ToLower(hostnameOf(t, a[3]))
	waitNodes(t, kube2, 1, func(n corev1.Node) bool { return n.Name == liveWorker && nodeReady(n) },
		"the running worker stays Ready with the endpoint's control plane off")

	// a new pod is created, scheduled and made Ready with the endpoint's control plane off
	// (controller-manager and scheduler leaders elsewhere, kwok on another API server)
	readyBefore := podsReadyOn(t, kube2, liveWorker)

	_, err = kube2.AppsV1().Deployments("emu-apps").Patch(t.Context(), "emu", types.MergePatchType,
		[]byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyOK(t, 120*time.Second, "deployment scaled with the endpoint's control plane off", func() (bool, string) {
		n := podsReadyOn(t, kube2, liveWorker)

		return n == readyBefore+1, fmt.Sprintf("%d Ready pods on %s, %d before the scale-up", n, liveWorker, readyBefore)
	})

	// the second control plane off: quorum lost, writes fail
	if err := cps[1].PowerOff(); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyOK(t, 30*time.Second, "etcd without a leader", func() (bool, string) {
		_, err := memberList(t.Context(), a[2])

		return err != nil, fmt.Sprint(err)
	})

	kube3 := kubeClientAt(t, kc, "https://"+cps[2].IP()+":6443")
	wctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	_, err = kube3.CoreV1().ConfigMaps("default").Create(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "during-quorum-loss"}}, metav1.CreateOptions{})

	cancel()

	if err == nil {
		t.Fatal("a write succeeded without etcd quorum")
	}

	// power on: quorum returns, writes work again, the worker is Ready again
	for _, m := range []*talosemu.Machine{cps[0], cps[1], workers[1]} {
		if err := m.PowerOn(); err != nil {
			t.Fatal(err)
		}
	}

	waitVoters(t, a[0], 3, 90*time.Second)
	writeCM(t, kube, "after-power-on", 60*time.Second)
	waitNodes(t, kube, 5, nodeReady, "5 Ready nodes after power on")

	// recovery into a fresh cluster (same secrets, new machines): EtcdRecover + Bootstrap{recover_etcd}
	spec2 := testSpec(1)

	w2, err := talosemu.Start(t.Context(), spec2, t.TempDir(), testOptions())
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(w2.Close)

	fresh := w2.Machines()[0]
	c.provisionAll(t, []*talosemu.Machine{fresh}, nil)

	af := c.admin(t, fresh.IP())

	if err := recoverUpload(t.Context(), af, snap); err != nil {
		t.Fatalf("EtcdRecover: %v", err)
	}

	if _, err := af.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("Bootstrap{recover_etcd}: %v", err)
	}

	vf := waitVoters(t, af, 1, 30*time.Second)
	if vf.names[0] != hostnameOf(t, af) {
		t.Fatalf("recovered cluster members %v", vf.names)
	}

	// the ConfigMap is in the restored keyspace (read with an etcd client of the etcd CA)
	got := etcdGet(t, c, fresh.IP(), "/registry/configmaps/default/before-snapshot")
	if !contains(got, "before-the-snapshot") {
		t.Fatalf("restored value of the ConfigMap does not hold its data (%d bytes)", len(got))
	}

	if v := etcdGet(t, c, fresh.IP(), "/registry/configmaps/default/after-one-off"); v != nil {
		t.Fatal("a ConfigMap written after the snapshot is in the restored keyspace")
	}
}

// TestSingleAPIServerUpgradeDrain runs one Kubernetes control plane for a cluster of two
// control planes (Options.SingleAPIServer) and checks that Talos's legacy Upgrade cordons and
// drains the node first and that the node is uncordoned after the reboot
// (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go Upgrade,
// t:pkg/kubernetes/kubernetes.go CordonAndDrain, UncordonNode after boot).
func TestSingleAPIServerUpgradeDrain(t *testing.T) {
	opt := testOptions()
	opt.Kubernetes, opt.KubeAssets, opt.SingleAPIServer = true, kubeAssets(t), true

	w, err := talosemu.Start(t.Context(), testSpec(3), t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		w.Close()

		if left := childProcs(t); len(left) > 0 {
			t.Errorf("processes left after Close: %v", left)
		}
	})

	ms := w.Machines()
	c := newRealCluster(t, ms[0].IP(), nil)
	c.provisionAll(t, ms[:2], ms[2:])

	a1, aw := c.admin(t, ms[0].IP()), c.admin(t, ms[2].IP())

	if _, err := a1.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	waitVoters(t, a1, 2, 60*time.Second)

	kc, err := a1.Kubeconfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	kube := kubeClient(t, kc)
	waitNodes(t, kube, 3, nodeReady, "3 Ready nodes")

	apiservers := 0

	for _, name := range childProcs(t) {
		if name == "kube-apiserver" {
			apiservers++
		}
	}

	if apiservers != 1 {
		t.Fatalf("%d kube-apiserver processes with SingleAPIServer, want 1", apiservers)
	}

	one := int32(1)
	labels := map[string]string{"app": "drain"}

	_, err = kube.AppsV1().Deployments("default").Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "drain"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var oldPod string

	testenv.EventuallyOK(t, 60*time.Second, "the pod runs on the worker", func() (bool, string) {
		pods, err := kube.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=drain"})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}

		p := pods.Items[0]
		oldPod = string(p.UID)

		return p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "", string(p.Status.Phase)
	})

	rss, detail := clusterRSS(t)
	t.Logf("RSS of a 2+1 cluster with one Kubernetes control plane: %d MiB (%s)", rss>>20, detail)

	workerNode := strings.ToLower(hostnameOf(t, aw))

	// a long enough reboot to see the cordon
	if err := ms[2].SetDurations(&talosemu.Durations{Reboot: talosemu.Duration(6 * time.Second), Boot: talosemu.Duration(50 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}

	//nolint:staticcheck // the legacy Upgrade is the one that drains and reboots
	if _, err := aw.MachineClient.Upgrade(t.Context(), &machineapi.UpgradeRequest{Image: "ghcr.io/siderolabs/installer:v1.14.2"}); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyOK(t, 30*time.Second, "node cordoned by Talos", func() (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(t.Context(), workerNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		return n.Spec.Unschedulable && n.Annotations["talos.dev/cordoned"] == "true", fmt.Sprint(n.Spec.Unschedulable)
	})

	testenv.EventuallyOK(t, 60*time.Second, "upgraded, uncordoned, the evicted pod replaced", func() (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(t.Context(), workerNode, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}

		pods, err := kube.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=drain"})
		if err != nil {
			return false, err.Error()
		}

		running := 0

		for _, p := range pods.Items {
			if string(p.UID) == oldPod {
				return false, "the old pod still exists"
			}

			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}

		info := ms[2].Info()

		return !n.Spec.Unschedulable && n.Annotations["talos.dev/cordoned"] == "" && running == 1 && info.Version == "v1.14.2",
			fmt.Sprintf("unschedulable=%v running=%d version=%s", n.Spec.Unschedulable, running, info.Version)
	})

	// a change of the apiserver's extra args restarts it without a reboot
	// (t:internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go)
	patch, err := configpatcher.LoadPatch([]byte("apiVersion: v1alpha1\nkind: KubeAPIServerConfig\nextraArgs:\n  event-ttl: 2h\n"))
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(c.controlPlane), []configpatcher.Patch{patch})
	if err != nil {
		t.Fatal(err)
	}

	patched, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	bootID := ms[0].Info().BootID

	if _, err := a1.ApplyConfiguration(t.Context(), &machineapi.ApplyConfigurationRequest{Data: patched, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyOK(t, 90*time.Second, "kube-apiserver restarted with --event-ttl=2h and ready", func() (bool, string) {
		found := false

		for pid, name := range childProcs(t) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if name == "kube-apiserver" && bytes.Contains(b, []byte("--event-ttl=2h")) {
				found = true
			}
		}

		if !found {
			return false, "no kube-apiserver with the new flag"
		}

		_, err := kube.Discovery().ServerVersion()

		return err == nil, fmt.Sprint(err)
	})

	if ms[0].Info().BootID != bootID {
		t.Fatal("the machine rebooted for an apiserver settings change")
	}
}
