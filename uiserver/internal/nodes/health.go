package nodes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/attention"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// Health implements HealthService: the needs-attention list from the cache,
// and the control plane's health read from the nodes with ichor-ui's
// os:reader certificate (as Service reads them) and from each kube-apiserver's
// /readyz.
type Health struct {
	ichorv1.UnimplementedHealthServiceServer

	// Nodes reads the nodes: its clients, cluster, certificate and timeout.
	Nodes *Service
	// APIServer is ichor-ui's own Kubernetes configuration (credentials and
	// the cluster's CA), with which each control plane's kube-apiserver is
	// asked for /readyz at its machine's address; nil asks none.
	APIServer *rest.Config
	// APIServerPort is the kube-apiserver's port on each control plane; zero means 6443.
	APIServerPort int
}

// ListAttention implements HealthService.
func (h *Health) ListAttention(ctx context.Context, _ *ichorv1.ListAttentionRequest) (*ichorv1.ListAttentionResponse, error) {
	s := h.Nodes

	c, err := s.cluster(ctx)
	if err != nil {
		return nil, err
	}

	out := &ichorv1.ListAttentionResponse{}

	var machines []ichorv1alpha1.TalosMachine

	if err := s.Clients.Authorize(ctx, "list", "talosmachines"); err != nil {
		out.Incomplete = append(out.Incomplete, "machines are not listed: "+err.Error())
	} else {
		list := &ichorv1alpha1.TalosMachineList{}
		if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
			return nil, userError(ctx, err, "listing TalosMachines")
		}

		machines = list.Items
	}

	var ops []ichorv1alpha1.TalosOperation

	if err := s.Clients.Authorize(ctx, "list", "talosoperations"); err != nil {
		out.Incomplete = append(out.Incomplete, "operations are not listed: "+err.Error())
	} else {
		list := &ichorv1alpha1.TalosOperationList{}
		if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
			return nil, userError(ctx, err, "listing TalosOperations")
		}

		ops = list.Items
	}

	var backups []ichorv1alpha1.TalosEtcdBackup

	if err := s.Clients.Authorize(ctx, "list", "talosetcdbackups"); err != nil {
		out.Incomplete = append(out.Incomplete, "etcd backups are not listed: "+err.Error())
	} else {
		list := &ichorv1alpha1.TalosEtcdBackupList{}
		if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
			return nil, userError(ctx, err, "listing TalosEtcdBackups")
		}

		backups = list.Items
	}

	var storages []ichorv1alpha1.TalosStorage

	if err := s.Clients.Authorize(ctx, "list", "talosstorages"); err != nil {
		out.Incomplete = append(out.Incomplete, "storages are not listed: "+err.Error())
	} else {
		list := &ichorv1alpha1.TalosStorageList{}
		if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
			return nil, userError(ctx, err, "listing TalosStorages")
		}

		storages = list.Items
	}

	clusterName := ""
	if c != nil {
		clusterName = c.Name
	}

	for _, it := range attention.WithStorages(attention.Items(c, machines, ops, backups, time.Now()), clusterName, storages) {
		out.Items = append(out.Items, &ichorv1.AttentionItem{
			Key: it.Key, Severity: string(it.Severity), Kind: it.Kind, Subject: it.Subject,
			Summary: it.Summary, Detail: it.Detail, Since: stamp(it.Since), Action: string(it.Action), Command: it.Command,
		})
	}

	return out, nil
}

// cluster checks that the user may get the TalosCluster and reads it.
func (s *Service) cluster(ctx context.Context) (*ichorv1alpha1.TalosCluster, error) {
	if err := s.Clients.Authorize(ctx, "get", "talosclusters"); err != nil {
		return nil, userError(ctx, err, "reading the cluster")
	}

	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, userError(ctx, err, "reading TalosCluster "+s.ClusterName)
	}

	return c, nil
}

func stamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}

	return timestamppb.New(t)
}

// GetClusterHealth implements HealthService.
func (h *Health) GetClusterHealth(ctx context.Context, _ *ichorv1.GetClusterHealthRequest) (*ichorv1.GetClusterHealthResponse, error) {
	s := h.Nodes

	c, err := s.cluster(ctx)
	if err != nil {
		return nil, err
	}

	if err := s.Clients.Authorize(ctx, "list", "talosmachines"); err != nil {
		return nil, userError(ctx, err, "listing the cluster's machines")
	}

	list := &ichorv1alpha1.TalosMachineList{}
	if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, userError(ctx, err, "listing TalosMachines")
	}

	var cps, approved []*ichorv1alpha1.TalosMachine

	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.ClusterName != s.ClusterName || m.Spec.Approval.State != ichorv1alpha1.ApprovalApproved {
			continue
		}

		approved = append(approved, m)
		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			cps = append(cps, m)
		}
	}

	byName := func(a, b *ichorv1alpha1.TalosMachine) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(approved, byName)
	slices.SortFunc(cps, byName)

	out := &ichorv1.GetClusterHealthResponse{
		TalosVersion: c.Spec.TalosVersion, KubernetesVersion: c.Spec.KubernetesVersion,
		ReadAt: timestamppb.Now(),
	}
	out.Certificates, out.CertificatesMissing = certificates(c)
	out.Etcd, out.ControlPlanes = h.controlPlanes(ctx, cps)
	out.Nodes, out.VersionSkew = h.versions(ctx, c, approved)

	var unavailable []string
	if err := h.recentEvents(ctx, out); err != nil {
		if fatal := readFailure(ctx, err, "the Events", &unavailable); fatal != nil {
			return nil, fatal
		}

		out.EventsUnavailable = strings.Join(unavailable, "; ")
	}

	return out, nil
}

// maxClusterEvents bounds the Events GetClusterHealth returns.
const maxClusterEvents = 20

// recentEvents reads, as the signed-in user, the Events of Ichor's objects
// in the cluster's namespace, newest first.
func (h *Health) recentEvents(ctx context.Context, out *ichorv1.GetClusterHealthResponse) error {
	list := &corev1.EventList{}
	if err := h.Nodes.Clients.User.List(ctx, list, client.InNamespace(h.Nodes.Clients.Namespace)); err != nil {
		return err
	}

	ours := list.Items[:0]
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].InvolvedObject.APIVersion, ichorv1alpha1.GroupVersion.Group+"/") {
			ours = append(ours, list.Items[i])
		}
	}

	events := eventsToProto(ours) // sorts ours in place: events[i] is ours[i]
	for i, e := range events[:min(len(events), maxClusterEvents)] {
		out.Events = append(out.Events, &ichorv1.ClusterEvent{
			Type: e.GetType(), Reason: e.GetReason(), Message: e.GetMessage(), Count: e.GetCount(), LastTime: e.GetLastTime(),
			Kind: ours[i].InvolvedObject.Kind, Name: ours[i].InvolvedObject.Name,
		})
	}

	return nil
}

// certificates are the expiry dates status.certificates records, and the
// CAs it does not record yet. Ichor's Talos client certificate is never
// missing: Ichor issues it per connection (talos.DefaultCertTTL), bounded by
// the Talos API CA, so the controller has no long-lived one to record; a
// date is still shown when status holds one.
func certificates(c *ichorv1alpha1.TalosCluster) ([]*ichorv1.CertificateExpiry, string) {
	certs := c.Status.Certificates

	var (
		out     []*ichorv1.CertificateExpiry
		missing []string
	)

	for _, e := range []struct {
		name     string
		at       *metav1.Time
		optional bool
	}{
		{"Talos API CA", certs.TalosCAExpiry, false},
		{"Kubernetes CA", certs.KubernetesCAExpiry, false},
		{"etcd CA", certs.EtcdCAExpiry, false},
		{"Kubernetes aggregator CA", certs.AggregatorCAExpiry, false},
		{"Ichor's Talos client certificate", certs.ClientCertificateExpiry, true},
	} {
		if e.at == nil || e.at.IsZero() {
			if !e.optional {
				missing = append(missing, e.name)
			}

			continue
		}

		out = append(out, &ichorv1.CertificateExpiry{Name: e.name, ExpiresAt: timestamppb.New(e.at.Time)})
	}

	if len(missing) == 0 {
		return out, ""
	}

	return out, "the cluster's status.certificates does not record the expiry of " + strings.Join(missing, ", ") +
		": the controller records it from the certificates of the cluster's secrets bundle, which it has not read yet or which lacks it"
}

// controlPlanes reads each running control plane's etcd status and its
// kube-apiserver's /readyz, at once, and the etcd membership from the first
// that answers.
func (h *Health) controlPlanes(ctx context.Context, cps []*ichorv1alpha1.TalosMachine) (*ichorv1.EtcdHealth, []*ichorv1.ControlPlaneHealth) {
	type result struct {
		cp      *ichorv1.ControlPlaneHealth
		status  *ichorv1.EtcdMemberHealth
		members []*ichorv1.EtcdMemberHealth
		err     string
	}

	results := make([]result, len(cps))

	var wg sync.WaitGroup

	for i, m := range cps {
		wg.Go(func() {
			r := &results[i]
			r.cp = &ichorv1.ControlPlaneHealth{Machine: m.Name, Address: m.Spec.Address}
			r.cp.ApiServerReady, r.cp.ApiServerMessage = h.readyz(ctx, m.Spec.Address)
			r.status, r.members, r.err = h.etcd(ctx, m)
			r.cp.EtcdHealthy = r.status != nil && r.status.Error == ""

			switch {
			case r.err != "":
				r.cp.EtcdMessage = r.err
			case r.status.Error != "":
				r.cp.EtcdMessage = r.status.Error
			case r.status.Leader:
				r.cp.EtcdMessage = "leader"
			default:
				r.cp.EtcdMessage = "follower"
			}
		})
	}

	wg.Wait()

	etcd := &ichorv1.EtcdHealth{}
	status := map[string]*ichorv1.EtcdMemberHealth{}

	out := make([]*ichorv1.ControlPlaneHealth, 0, len(results))

	for i := range results {
		r := &results[i]
		out = append(out, r.cp)

		if r.status != nil {
			status[r.status.Id] = r.status
		}

		if etcd.Members == nil && r.members != nil {
			etcd.Members = r.members
		}
	}

	if etcd.Members == nil {
		etcd.Error = "no control plane answered the etcd member list"
		if len(cps) == 0 {
			etcd.Error = "the cluster has no approved control plane"
		}

		for i := range results {
			if results[i].err != "" {
				etcd.Error += ": " + results[i].err

				break
			}
		}

		return etcd, out
	}

	voters := int32(0)

	for _, mem := range etcd.Members {
		if st, ok := status[mem.Id]; ok {
			mem.Healthy, mem.Leader, mem.DbSizeBytes, mem.Error, mem.Machine = st.Error == "", st.Leader, st.DbSizeBytes, st.Error, st.Machine
		} else {
			mem.Error = "its status was not read: no running control plane of the cluster has this member"
		}

		if mem.Machine == "" {
			for _, m := range cps {
				if m.Spec.Hostname == mem.Hostname || m.Name == mem.Hostname {
					mem.Machine = m.Name
				}
			}
		}

		if mem.Learner {
			continue
		}

		voters++

		if mem.Healthy {
			etcd.Healthy++
		}
	}

	etcd.Quorum = voters/2 + 1
	etcd.HasQuorum = voters > 0 && etcd.Healthy >= etcd.Quorum

	return etcd, out
}

// etcd reads one control plane's member status and the member list.
func (h *Health) etcd(ctx context.Context, m *ichorv1alpha1.TalosMachine) (*ichorv1.EtcdMemberHealth, []*ichorv1.EtcdMemberHealth, string) {
	s := h.Nodes
	if m.Status.Stage != ichorv1alpha1.StageRunning || m.Spec.Address == "" {
		stage := m.Status.Stage
		if stage == "" {
			stage = "not provisioned"
		}

		return nil, nil, "not read: the machine is " + stage
	}

	cred, err := s.Credentials.Get(ctx)
	if err != nil {
		return nil, nil, "not read: " + err.Error()
	}

	c, err := talos.DialWithCertificate(ctx, m.Spec.Address, s.Port, cred.Cert, cred.Roots)
	if err != nil {
		return nil, nil, "the node's Talos API does not answer: " + talos.Message(err)
	}
	defer c.Close() //nolint:errcheck

	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()

	var status *ichorv1.EtcdMemberHealth

	st, err := c.EtcdStatus(cctx)
	if err != nil {
		return nil, nil, attention.Cause(talos.Message(err)) + ": " + talos.Message(err)
	}

	for _, msg := range st.GetMessages() {
		ms := msg.GetMemberStatus()
		status = &ichorv1.EtcdMemberHealth{
			Id: strconv.FormatUint(ms.GetMemberId(), 16), Machine: m.Name, Learner: ms.GetIsLearner(),
			Leader: ms.GetLeader() != 0 && ms.GetLeader() == ms.GetMemberId(), DbSizeBytes: ms.GetDbSize(),
			Healthy: len(ms.GetErrors()) == 0, Error: strings.Join(ms.GetErrors(), "; "),
		}
	}

	if status == nil {
		return nil, nil, "the node answered no etcd status"
	}

	var members []*ichorv1.EtcdMemberHealth

	ml, err := c.EtcdMemberList(cctx, &machine.EtcdMemberListRequest{})
	if err == nil {
		members = []*ichorv1.EtcdMemberHealth{}

		for _, msg := range ml.GetMessages() {
			for _, mem := range msg.GetMembers() {
				members = append(members, &ichorv1.EtcdMemberHealth{
					Id: strconv.FormatUint(mem.GetId(), 16), Hostname: mem.GetHostname(), Learner: mem.GetIsLearner(),
				})
			}
		}
	}

	return status, members, ""
}

// readyz asks a control plane's kube-apiserver whether it is ready
// (/readyz), with ichor-ui's own Kubernetes credentials and CA (every
// authenticated caller may read /readyz: the system:public-info-viewer role).
func (h *Health) readyz(ctx context.Context, address string) (bool, string) {
	if address == "" {
		return false, "not asked: the machine has no address"
	}

	if h.APIServer == nil {
		return false, "not asked: ichor-ui has no Kubernetes configuration to ask with"
	}

	port := h.APIServerPort
	if port == 0 {
		port = 6443
	}

	cfg := rest.CopyConfig(h.APIServer)
	cfg.Host = "https://" + net.JoinHostPort(address, strconv.Itoa(port))
	cfg.Timeout = 5 * time.Second

	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false, "not asked: " + err.Error()
	}
	defer hc.CloseIdleConnections()

	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(cctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}

	resp, err := hc.Do(req)
	if err != nil {
		return false, "does not answer (" + attention.Cause(err.Error()) + "): " + err.Error()
	}
	defer resp.Body.Close() //nolint:errcheck

	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(body))

	if resp.StatusCode != http.StatusOK {
		return false, fmt.Sprintf("not ready (%s): %s", resp.Status, text)
	}

	return true, text
}

// versions are what each approved machine runs: Talos from its status, the
// kubelet from its Node when the user may read it.
func (h *Health) versions(ctx context.Context, c *ichorv1alpha1.TalosCluster, machines []*ichorv1alpha1.TalosMachine) ([]*ichorv1.NodeVersions, bool) {
	out := make([]*ichorv1.NodeVersions, 0, len(machines))

	talosSeen, kubeletSeen := map[string]bool{}, map[string]bool{}
	skew := false

	for _, m := range machines {
		nv := &ichorv1.NodeVersions{Machine: m.Name, Role: m.Spec.Role, TalosVersion: m.Status.TalosVersion}

		if m.Status.NodeName != "" {
			n := &corev1.Node{}
			if err := h.Nodes.Clients.User.Get(ctx, client.ObjectKey{Name: m.Status.NodeName}, n); err == nil {
				nv.KubeletVersion = n.Status.NodeInfo.KubeletVersion
			}
		}

		if nv.TalosVersion != "" {
			talosSeen[nv.TalosVersion] = true
			nv.Skewed = trimV(nv.TalosVersion) != trimV(c.Spec.TalosVersion)
		}

		if nv.KubeletVersion != "" {
			kubeletSeen[nv.KubeletVersion] = true
			nv.Skewed = nv.Skewed || trimV(nv.KubeletVersion) != trimV(c.Spec.KubernetesVersion)
		}

		skew = skew || nv.Skewed
		out = append(out, nv)
	}

	return out, skew || len(talosSeen) > 1 || len(kubeletSeen) > 1
}

func trimV(v string) string { return strings.TrimPrefix(v, "v") }
