package talosemu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/client/multiplex"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// ClusterService.HealthCheck, the server side of `talosctl health` (its default, --server=true):
// t:internal/app/machined/internal/server/v1alpha1/v1alpha1_cluster.go. The node (a control
// plane) talks to the cluster through its own apid with a client certificate of the caller's
// roles (as Talos's LocalClientProvider does), takes the nodes from the request, else from
// the discovery Members, else from the Kubernetes Nodes, streams "discovered nodes: …" and then
// runs the checks of t:pkg/cluster/check/default.go (DefaultClusterChecks) in order, each
// polled until it passes or the wait timeout ends, streaming "waiting for <check>: <state>"
// whenever a check's line changes. The assertions follow t:pkg/cluster/check/{service,etcd,
// apid,nodes,diagnostics,events,kubernetes}.go; the client side (`--server=false`) runs
// Talos's own code over the same APIs.
//
// Differences: the boot sequence check reads MachineStatus with Get instead of a Watch; error
// lists are joined with errors.Join instead of hashicorp/go-multierror's layout.

type clusterServer struct {
	clusterapi.UnimplementedClusterServiceServer

	m *Machine
}

// errSkip is conditions.ErrSkipAssertion.
var errSkip = errors.New("SKIP")

type healthNode struct {
	internal netip.Addr
	ips      []netip.Addr
}

type healthInfo struct {
	byType map[machine.Type][]healthNode
}

func (h *healthInfo) nodes() []healthNode {
	return slices.Concat(h.byType[machine.TypeInit], h.byType[machine.TypeControlPlane], h.byType[machine.TypeWorker])
}

func (h *healthInfo) controlPlanes() []healthNode {
	return slices.Concat(h.byType[machine.TypeInit], h.byType[machine.TypeControlPlane])
}

func internalIPs(nodes []healthNode) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.internal.String())
	}

	return out
}

func ipsToNodes(ips []string) ([]healthNode, error) {
	out := make([]healthNode, 0, len(ips))

	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}

		out = append(out, healthNode{internal: ip, ips: []netip.Addr{ip}})
	}

	return out, nil
}

// healthRun is one HealthCheck call: the local client, the cluster's nodes and a lazily built
// Kubernetes client.
type healthRun struct {
	m     *Machine
	cli   *client.Client
	info  *healthInfo
	force string

	kubeMu sync.Mutex
	kube   *kubernetes.Clientset
}

// HealthCheck runs the cluster checks.
func (s *clusterServer) HealthCheck(in *clusterapi.HealthCheckRequest, srv grpc.ServerStreamingServer[clusterapi.HealthCheckProgress]) error {
	m := s.m

	if err := checkControlPlane(srv.Context(), m.st, "cluster health check"); err != nil {
		return err
	}

	cli, err := m.localClient(srv.Context())
	if err != nil {
		return err
	}
	defer cli.Close() //nolint:errcheck

	ctx, cancel := context.WithTimeout(srv.Context(), in.GetWaitTimeout().AsDuration())
	defer cancel()

	run := &healthRun{m: m, cli: cli, force: in.GetClusterInfo().GetForceEndpoint()}

	if run.info, err = run.clusterInfo(ctx, in.GetClusterInfo()); err != nil {
		return err
	}

	if err := srv.Send(&clusterapi.HealthCheckProgress{Message: fmt.Sprintf("discovered nodes: %q", internalIPs(run.info.nodes()))}); err != nil {
		return err
	}

	last := ""
	report := func(line string) {
		if line = strings.TrimSpace("waiting for " + line); line != last {
			_ = srv.Send(&clusterapi.HealthCheckProgress{Message: line}) // as Talos's reporter, a lost line is not an error

			last = line
		}
	}

	for _, c := range run.checks() {
		if err := c.wait(ctx, report); err != nil {
			return err
		}
	}

	return nil
}

// localClient dials this machine's own apid with a client certificate of the caller's roles
// signed by the OS CA of the running config.
func (m *Machine) localClient(ctx context.Context) (*client.Client, error) {
	cfg := m.activeConfig()
	if cfg == nil {
		return nil, errors.New("machine configuration is not available")
	}

	bundle, err := secrets.NewBundleFromConfig(secrets.NewFixedClock(time.Now()), cfg)
	if err != nil {
		return nil, err
	}

	crt, err := bundle.GenerateTalosAPIClientCertificateWithTTL(rolesFrom(ctx), time.Hour)
	if err != nil {
		return nil, err
	}

	tc := clientconfig.NewConfig("local", []string{m.IP()}, bundle.Certs.OS.Crt, crt)

	return client.New(context.WithoutCancel(ctx), client.WithConfig(tc), client.WithEndpoints(m.IP()))
}

func (r *healthRun) clusterInfo(ctx context.Context, in *clusterapi.ClusterInfo) (*healthInfo, error) {
	if len(in.GetControlPlaneNodes()) > 0 || len(in.GetWorkerNodes()) > 0 {
		cps, err := ipsToNodes(in.GetControlPlaneNodes())
		if err != nil {
			return nil, err
		}

		workers, err := ipsToNodes(in.GetWorkerNodes())
		if err != nil {
			return nil, err
		}

		return &healthInfo{byType: map[machine.Type][]healthNode{machine.TypeControlPlane: cps, machine.TypeWorker: workers}}, nil
	}

	info := &healthInfo{byType: map[machine.Type][]healthNode{}}

	r.m.world.discoveryRead(r.m)

	members, err := safe.StateListAll[*cluster.Member](ctx, r.m.st)
	if err == nil && members.Len() > 0 {
		for mem := range members.All() {
			spec := mem.TypedSpec()
			if len(spec.Addresses) == 0 {
				return nil, fmt.Errorf("no IP address found for member: %s", mem.Metadata().ID())
			}

			info.byType[spec.MachineType] = append(info.byType[spec.MachineType], healthNode{internal: spec.Addresses[0], ips: slices.Clone(spec.Addresses)})
		}

		return info, nil
	}

	kube, err := r.k8s(ctx)
	if err != nil {
		return nil, err
	}

	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}

	for _, n := range nodes.Items {
		hn := k8sNodeInfo(&n)
		typ := machine.TypeWorker

		if _, ok := n.Labels[constants.LabelNodeRoleControlPlane]; ok {
			typ = machine.TypeControlPlane
		}

		info.byType[typ] = append(info.byType[typ], hn)
	}

	return info, nil
}

func k8sNodeInfo(n *corev1.Node) healthNode {
	var hn healthNode

	for _, a := range n.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}

		switch a.Type { //nolint:exhaustive // as Talos: internal and external addresses
		case corev1.NodeInternalIP:
			hn.internal = ip
			hn.ips = append(hn.ips, ip)
		case corev1.NodeExternalIP:
			hn.ips = append(hn.ips, ip)
		}
	}

	return hn
}

// k8s is the Kubernetes client built from the Kubeconfig API (cached); a FailedPrecondition
// from it skips the Kubernetes checks, as on Talos.
func (r *healthRun) k8s(ctx context.Context) (*kubernetes.Clientset, error) {
	r.kubeMu.Lock()
	defer r.kubeMu.Unlock()

	if r.kube != nil {
		return r.kube, nil
	}

	kc, err := r.cli.Kubeconfig(ctx)
	if err != nil {
		if client.StatusCode(err) == codes.FailedPrecondition {
			return nil, errSkip
		}

		return nil, err
	}

	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, err
	}

	if r.force != "" {
		rc.Host = "https://" + strings.TrimPrefix(r.force, "https://")
		if !strings.Contains(strings.TrimPrefix(rc.Host, "https://"), ":") {
			rc.Host += ":6443"
		}
	}

	r.kube, err = kubernetes.NewForConfig(rc)

	return r.kube, err
}

// healthCheck is one polling condition of t:pkg/cluster/check/default.go.
type healthCheck struct {
	name     string
	interval time.Duration
	assert   func(ctx context.Context) error
}

// wait polls the assertion (each run bounded by the interval) until it passes or is skipped,
// reporting its line as conditions.StatusLine writes it.
func (c healthCheck) wait(ctx context.Context, report func(string)) error {
	report(c.name + ": ...")

	ticker := time.NewTicker(c.interval)
	defer ticker.Stop()

	for {
		runCtx, cancel := context.WithTimeout(ctx, c.interval)
		err := c.assert(runCtx)

		cancel()

		switch {
		case err == nil:
			report(c.name + ": OK")

			return nil
		case errors.Is(err, errSkip):
			report(c.name + ": SKIP")

			return nil
		default:
			report(c.name + ": " + err.Error())
		}

		select {
		case <-ctx.Done():
			report(c.name + ": " + err.Error())

			return ctx.Err()
		case <-ticker.C:
		}
	}
}

func (r *healthRun) skipIf(skip func(context.Context) (bool, error), assert func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := skip(ctx)
		if err != nil {
			return err
		}

		if s {
			return errSkip
		}

		return assert(ctx)
	}
}

func (r *healthRun) checks() []healthCheck {
	const every = 5 * time.Second

	cps := func(ctx context.Context) error { return r.serviceHealthy(ctx, "etcd", r.info.controlPlanes()) }

	return []healthCheck{
		{"etcd to be healthy", every, r.skipIf(r.etcdDisabled, cps)},
		{"etcd members to be consistent across nodes", every, r.skipIf(r.etcdDisabled, r.etcdConsistent)},
		{"etcd members to be control plane nodes", every, r.skipIf(r.etcdDisabled, r.etcdControlPlanes)},
		{"apid to be ready", every, r.apidReady},
		{"all nodes memory sizes", every, r.memorySizes},
		{"all nodes disk sizes", every, r.diskSizes},
		{"no diagnostics", every, r.noDiagnostics},
		{"kubelet to be healthy", every, r.skipIf(r.kubeletDisabled, func(ctx context.Context) error {
			return r.serviceHealthy(ctx, "kubelet", r.info.controlPlanes())
		})},
		{"all nodes to finish boot sequence", every, r.allBooted},
		{"all k8s nodes to report", 30 * time.Second, r.k8sNodesReported},
		{"all control plane static pods to be running", every, r.staticPods},
		{"all control plane components to be ready", every, r.fullControlPlane},
		{"all k8s nodes to report ready", every, r.skipIf(r.cniDisabled, r.k8sNodesReady)},
		{"kube-proxy to report ready", every, r.kubeProxyReady},
		{"coredns to report ready", every, r.skipIf(r.cniDisabled, r.coreDNSReady)},
		{"all k8s nodes to report schedulable", every, r.k8sSchedulable},
	}
}

func (r *healthRun) etcdDisabled(context.Context) (bool, error) {
	cfg := r.m.activeConfig()

	return cfg == nil || cfg.Cluster() == nil || cfg.Cluster().Etcd() == nil || cfg.Cluster().Etcd().CA() == nil, nil
}

func (r *healthRun) kubeletDisabled(ctx context.Context) (bool, error) {
	_, err := safe.StateGetByID[*k8s.KubeletConfig](ctx, r.m.st, k8s.KubeletID)
	if state.IsNotFoundError(err) {
		return true, nil
	}

	return false, err
}

func (r *healthRun) cniDisabled(ctx context.Context) (bool, error) {
	bmc, err := safe.StateGetByID[*k8s.BootstrapManifestsConfig](ctx, r.m.st, k8s.BootstrapManifestsConfigID)
	if state.IsNotFoundError(err) {
		return true, nil
	}

	if err != nil {
		return false, err
	}

	return bmc.TypedSpec().CNIName == constants.NoneCNI, nil
}

// serviceHealthy is check.ServiceHealthAssertion.
func (r *healthRun) serviceHealthy(ctx context.Context, service string, nodes []healthNode) error {
	type info struct {
		client.ServiceInfo

		node string
	}

	var infos []info

	for resp := range multiplex.Unary(ctx, internalIPs(nodes), func(ctx context.Context) ([]client.ServiceInfo, error) {
		return r.cli.ServiceInfo(ctx, service)
	}) {
		if resp.Err != nil {
			return fmt.Errorf("error getting service info for service %q from node %q: %w", service, resp.Node, resp.Err)
		}

		for _, si := range resp.Payload {
			infos = append(infos, info{ServiceInfo: si, node: resp.Node})
		}
	}

	if len(infos) != len(nodes) {
		return fmt.Errorf("expected a response with %d node(s), got %d", len(nodes), len(infos))
	}

	slices.SortFunc(infos, func(a, b info) int { return cmp.Compare(a.node, b.node) })

	var errs []error

	for _, si := range infos {
		events := si.Service.GetEvents().GetEvents()

		switch {
		case len(events) == 0:
			errs = append(errs, fmt.Errorf("%s: no events recorded yet for service %q", si.node, service))
		case events[len(events)-1].GetState() != stateRunning:
			last := events[len(events)-1]
			errs = append(errs, fmt.Errorf("%s: service %q not in expected state %q: current state [%s] %s", si.node, service, stateRunning, last.GetState(), last.GetMsg()))
		case !si.Service.GetHealth().GetHealthy():
			errs = append(errs, fmt.Errorf("%s: service is not healthy: %s", si.node, service))
		}
	}

	return errors.Join(errs...)
}

// etcdConsistent is check.EtcdConsistentAssertion.
func (r *healthRun) etcdConsistent(ctx context.Context) error {
	type member struct {
		hostname string
		id       uint64
		learner  bool
	}

	type answer struct {
		node    string
		members []*machineapi.EtcdMember
	}

	var answers []answer

	for resp := range multiplex.Unary(ctx, internalIPs(r.info.controlPlanes()), func(ctx context.Context) (*machineapi.EtcdMemberListResponse, error) {
		return r.cli.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	}) {
		if resp.Err != nil {
			return fmt.Errorf("error getting etcd member list from node %q: %w", resp.Node, resp.Err)
		}

		if len(resp.Payload.GetMessages()) == 0 {
			return fmt.Errorf("node %q: no messages returned", resp.Node)
		}

		answers = append(answers, answer{node: resp.Node, members: resp.Payload.GetMessages()[0].GetMembers()})
	}

	slices.SortFunc(answers, func(a, b answer) int { return cmp.Compare(a.node, b.node) })

	known := map[member]bool{}

	for i, a := range answers {
		if i == 0 {
			for _, mem := range a.members {
				known[member{mem.GetHostname(), mem.GetId(), mem.GetIsLearner()}] = true
			}

			continue
		}

		if len(a.members) != len(known) {
			var want, got []string

			for k := range known {
				want = append(want, k.hostname)
			}

			for _, mem := range a.members {
				got = append(got, mem.GetHostname())
			}

			return fmt.Errorf("%s: expected to have %v members, got %v", a.node, want, got)
		}

		for _, mem := range a.members {
			if !known[member{mem.GetHostname(), mem.GetId(), mem.GetIsLearner()}] {
				return fmt.Errorf("%s: found unexpected etcd member %s", a.node, mem.GetHostname())
			}
		}
	}

	return nil
}

// etcdControlPlanes is check.EtcdControlPlaneNodesAssertion: the local member list's peer
// addresses are control plane addresses.
func (r *healthRun) etcdControlPlanes(ctx context.Context) error {
	resp, err := r.cli.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
	if err != nil {
		return err
	}

	allowed := map[string]bool{}

	var cpIPs []string

	for _, n := range r.info.controlPlanes() {
		for _, ip := range n.ips {
			allowed[ip.String()] = true
			cpIPs = append(cpIPs, ip.String())
		}
	}

	var memberIPs []string

	for _, mem := range resp.GetMessages()[0].GetMembers() {
		for _, peer := range mem.GetPeerUrls() {
			u, err := url.Parse(peer)
			if err != nil {
				return err
			}

			memberIPs = append(memberIPs, u.Hostname())
		}
	}

	for _, ip := range memberIPs {
		if !allowed[ip] {
			return fmt.Errorf("etcd member ips %q are not subset of control plane node ips %q", memberIPs, cpIPs)
		}
	}

	return nil
}

// apidReady is check.ApidReadyAssertion.
func (r *healthRun) apidReady(ctx context.Context) error {
	var errs []error

	for resp := range multiplex.Unary(ctx, internalIPs(r.info.nodes()), func(ctx context.Context) (*machineapi.VersionResponse, error) {
		return r.cli.Version(ctx)
	}) {
		if resp.Err != nil {
			errs = append(errs, fmt.Errorf("error getting version from node %q: %w", resp.Node, resp.Err))
		}
	}

	return errors.Join(errs...)
}

// memorySizes is check.AllNodesMemorySizes (m:… minimal memory by machine type).
func (r *healthRun) memorySizes(ctx context.Context) error {
	typeOf := map[string]machine.Type{}

	for typ, nodes := range r.info.byType {
		for _, n := range nodes {
			typeOf[n.internal.String()] = typ
		}
	}

	var errs []error

	for resp := range multiplex.Unary(ctx, internalIPs(r.info.nodes()), func(ctx context.Context) (*machineapi.MemoryResponse, error) {
		return r.cli.Memory(ctx)
	}) {
		if resp.Err != nil {
			errs = append(errs, fmt.Errorf("error getting memory info for node %q: %w", resp.Node, resp.Err))

			continue
		}

		const mib = 1 << 20

		minimum := uint64(1024-150) * mib
		if typeOf[resp.Node].IsControlPlane() {
			minimum = uint64(1848-150) * mib
		}

		if total := resp.Payload.GetMessages()[0].GetMeminfo().GetMemtotal() * 1024; total < minimum {
			errs = append(errs, fmt.Errorf("node %q does not meet memory requirements: expected at least %d MiB, actual %d MiB", resp.Node, minimum/mib, total/mib))
		}
	}

	return errors.Join(errs...)
}

// diskSizes is check.AllNodesDiskSizes: EPHEMERAL at least the minimal disk (6 GiB) less the
// other partitions and 10 MiB of GPT overhead.
func (r *healthRun) diskSizes(ctx context.Context) error {
	ps := quirks.New("").PartitionSizes()
	minimal := uint64(6<<30) - (ps.UKIEFISize() + ps.StateSize() + ps.METASize() + 10<<20)

	nodes := internalIPs(r.info.nodes())
	slices.Sort(nodes)

	var errs []error

	for _, ip := range nodes {
		vs, err := safe.StateGetByID[*block.VolumeStatus](client.WithNode(ctx, ip), r.cli.COSI, constants.EphemeralPartitionLabel)
		if err != nil {
			errs = append(errs, fmt.Errorf("error getting volume status for node %q: %w", ip, err))

			continue
		}

		if vs.TypedSpec().Size < minimal {
			errs = append(errs, fmt.Errorf("ephemeral partition %q for node %q is too small, expected at least %s, actual %s",
				vs.TypedSpec().Location, ip, humanSize(minimal), humanSize(vs.TypedSpec().Size)))
		}
	}

	return errors.Join(errs...)
}

// noDiagnostics is check.NoDiagnostics.
func (r *healthRun) noDiagnostics(ctx context.Context) error {
	var lines []string

	nodes := internalIPs(r.info.nodes())
	slices.Sort(nodes)

	for _, ip := range nodes {
		list, err := safe.StateListAll[*runtime.Diagnostic](client.WithNode(ctx, ip), r.cli.COSI)
		if err != nil {
			return err
		}

		var msgs []string
		for d := range list.All() {
			msgs = append(msgs, d.TypedSpec().Message)
		}

		if len(msgs) > 0 {
			lines = append(lines, ip+": "+strings.Join(msgs, ", "))
		}
	}

	if len(lines) == 0 {
		return nil
	}

	return fmt.Errorf("active diagnostics: %s", strings.Join(lines, "; "))
}

// allBooted is check.AllNodesBootedAssertion: every node's MachineStatus is running.
func (r *healthRun) allBooted(ctx context.Context) error {
	byStage := map[runtime.MachineStage][]string{}

	for _, ip := range internalIPs(r.info.nodes()) {
		ms, err := safe.StateGetByID[*runtime.MachineStatus](client.WithNode(ctx, ip), r.cli.COSI, runtime.MachineStatusID)
		if err != nil {
			return fmt.Errorf("error watching machine %s status: %w", ip, err)
		}

		if st := ms.TypedSpec().Stage; st != runtime.MachineStageRunning {
			byStage[st] = append(byStage[st], ip)
		}
	}

	if len(byStage) == 0 {
		return nil
	}

	stages := make([]runtime.MachineStage, 0, len(byStage))
	for st := range byStage {
		stages = append(stages, st)
	}

	slices.Sort(stages)

	parts := make([]string, 0, len(stages))

	for _, st := range stages {
		slices.Sort(byStage[st])
		parts = append(parts, fmt.Sprintf("%s: %v", st, byStage[st]))
	}

	return fmt.Errorf("nodes are not running: %s", strings.Join(parts, ", "))
}

// nodesMatch is pkg/cluster NodesMatch: each expected node shares an address with exactly one
// actual node, and no actual node is left over.
func nodesMatch(expected, actual []healthNode) error {
	left := slices.Clone(actual)

	for _, e := range expected {
		i := slices.IndexFunc(left, func(a healthNode) bool {
			return slices.ContainsFunc(a.ips, func(ip netip.Addr) bool { return slices.Contains(e.ips, ip) })
		})
		if i < 0 {
			return fmt.Errorf("can't find expected node with IPs %q", e.ips)
		}

		left = slices.Delete(left, i, i+1)
	}

	if len(left) > 0 {
		var ips []netip.Addr
		for _, n := range left {
			ips = append(ips, n.ips...)
		}

		slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })

		return fmt.Errorf("unexpected nodes with IPs %q", ips)
	}

	return nil
}

func (r *healthRun) k8sNodes(ctx context.Context) ([]corev1.Node, error) {
	kube, err := r.k8s(ctx)
	if err != nil {
		return nil, err
	}

	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}

	return list.Items, nil
}

func (r *healthRun) k8sNodesReported(ctx context.Context) error {
	nodes, err := r.k8sNodes(ctx)
	if err != nil {
		return err
	}

	actual := make([]healthNode, 0, len(nodes))
	for i := range nodes {
		actual = append(actual, k8sNodeInfo(&nodes[i]))
	}

	return nodesMatch(r.info.nodes(), actual)
}

// staticPods is check.K8sControlPlaneStaticPods.
func (r *healthRun) staticPods(ctx context.Context) error {
	for _, n := range r.info.controlPlanes() {
		nodeCtx := client.WithNode(ctx, n.internal.String())
		expected := map[string]bool{}

		for id, typ := range map[string]resource.Type{
			"kube-system/kube-apiserver":          k8s.APIServerConfigType,
			"kube-system/kube-controller-manager": k8s.ControllerManagerConfigType,
			"kube-system/kube-scheduler":          k8s.SchedulerConfigType,
		} {
			items, err := r.cli.COSI.List(nodeCtx, resource.NewMetadata(k8s.ControlPlaneNamespaceName, typ, "", resource.VersionUndefined))
			if err != nil {
				return fmt.Errorf("error listing static pods config for node %s: %w", n.internal, err)
			}

			if len(items.Items) > 0 {
				expected[id] = true
			}
		}

		statuses, err := safe.StateListAll[*k8s.StaticPodStatus](nodeCtx, r.cli.COSI)
		if err != nil {
			return fmt.Errorf("error listing static pods on node %s: %w", n.internal, err)
		}

		for st := range statuses.All() {
			for id := range expected {
				if strings.HasPrefix(st.Metadata().ID(), id) {
					delete(expected, id)
				}
			}
		}

		if len(expected) > 0 {
			missing := make([]string, 0, len(expected))
			for id := range expected {
				missing = append(missing, id)
			}

			slices.Sort(missing)

			return fmt.Errorf("missing static pods on node %s: %v", n.internal, missing)
		}
	}

	return nil
}

// fullControlPlane is check.K8sFullControlPlaneAssertion.
func (r *healthRun) fullControlPlane(ctx context.Context) error {
	nodes, err := r.k8sNodes(ctx)
	if err != nil {
		return err
	}

	var actual []healthNode

	for i := range nodes {
		if _, ok := nodes[i].Labels[constants.LabelNodeRoleControlPlane]; ok {
			actual = append(actual, k8sNodeInfo(&nodes[i]))
		}
	}

	if err := nodesMatch(r.info.controlPlanes(), actual); err != nil {
		return err
	}

	kube, err := r.k8s(ctx)
	if err != nil {
		return err
	}

	dss, err := kube.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app in (kube-apiserver,kube-scheduler,kube-controller-manager)"})
	if err != nil {
		return err
	}

	for _, ds := range dss.Items {
		if s := ds.Status; s.CurrentNumberScheduled != s.DesiredNumberScheduled || s.NumberAvailable != s.DesiredNumberScheduled || s.NumberReady != s.DesiredNumberScheduled {
			return fmt.Errorf("expected daemonset %s to be fully ready", ds.Name)
		}
	}

	for _, app := range []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app = " + app})
		if err != nil {
			return fmt.Errorf("error listing pods for app %s: %w", app, err)
		}

		if len(pods.Items) != len(actual) {
			return fmt.Errorf("expected number of pods for %s to be %d, got %d", app, len(actual), len(pods.Items))
		}

		var notReady []string

		for i := range pods.Items {
			if !podIsReady(&pods.Items[i]) && hasReadyCondition(&pods.Items[i]) {
				notReady = append(notReady, pods.Items[i].Name)
			}
		}

		if len(notReady) > 0 {
			return fmt.Errorf("some pods are not ready for %s: %v", app, notReady)
		}
	}

	return nil
}

func hasReadyCondition(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
}

func (r *healthRun) k8sNodesReady(ctx context.Context) error {
	nodes, err := r.k8sNodes(ctx)
	if err != nil {
		return err
	}

	var notReady []string

	for _, n := range nodes {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				notReady = append(notReady, n.Name)
			}
		}
	}

	if len(notReady) > 0 {
		return fmt.Errorf("some nodes are not ready: %v", notReady)
	}

	return nil
}

func (r *healthRun) k8sSchedulable(ctx context.Context) error {
	nodes, err := r.k8sNodes(ctx)
	if err != nil {
		return err
	}

	for _, n := range nodes {
		if n.Spec.Unschedulable {
			// Talos reports the first one only
			return fmt.Errorf("some nodes are not schedulable: %v", []string{n.Name})
		}
	}

	return nil
}

// podsReady is check.K8sPodReadyAssertion.
func (r *healthRun) podsReady(ctx context.Context, replicas int, selector string) error {
	kube, err := r.k8s(ctx)
	if err != nil {
		return err
	}

	pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}

	if len(pods.Items) == 0 {
		return fmt.Errorf("no pods found for namespace %q and label selector %q", "kube-system", selector)
	}

	var ready, notReady []string

	for i := range pods.Items {
		p := &pods.Items[i]

		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
			continue
		}

		terminated := true

		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated == nil {
				terminated = false
			}
		}

		if terminated {
			continue
		}

		if podIsReady(p) {
			ready = append(ready, p.Name)
		} else {
			notReady = append(notReady, p.Name)
		}
	}

	switch {
	case len(ready) == 0:
		return fmt.Errorf("no ready pods found for namespace %q and label selector %q", "kube-system", selector)
	case len(notReady) > 0:
		return fmt.Errorf("some pods are not ready: %v", notReady)
	case len(ready) != replicas:
		return fmt.Errorf("expected %d ready pods, got %d", replicas, len(ready))
	}

	return nil
}

func (r *healthRun) kubeProxyReady(ctx context.Context) error {
	kube, err := r.k8s(ctx)
	if err != nil {
		return err
	}

	dss, err := kube.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil {
		return err
	}

	if len(dss.Items) == 0 || dss.Items[0].Status.DesiredNumberScheduled == 0 {
		return errSkip
	}

	return r.podsReady(ctx, int(dss.Items[0].Status.DesiredNumberScheduled), "k8s-app=kube-proxy")
}

func (r *healthRun) coreDNSReady(ctx context.Context) error {
	kube, err := r.k8s(ctx)
	if err != nil {
		return err
	}

	deps, err := kube.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil {
		return err
	}

	if len(deps.Items) == 0 {
		return errSkip
	}

	replicas := 0
	if deps.Items[0].Spec.Replicas != nil {
		replicas = int(*deps.Items[0].Spec.Replicas)
	}

	return r.podsReady(ctx, replicas, "k8s-app=kube-dns")
}
