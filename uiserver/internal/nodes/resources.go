package nodes

import (
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// GetNodeResources implements NodeService: SystemStat (boot time, CPU
// time), LoadAvg, Memory and Mounts, as `talosctl stats`/`memory`/`mounts`
// read them (t:cmd/talosctl/cmd/talos/memory.go, mounts.go).
func (s *Service) GetNodeResources(ctx context.Context, req *ichorv1.GetNodeResourcesRequest) (*ichorv1.GetNodeResourcesResponse, error) {
	cctx, c, m, done, err := s.open(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	defer done()

	out := &ichorv1.GetNodeResourcesResponse{}

	st, err := c.MachineClient.SystemStat(cctx, &emptypb.Empty{})
	if err != nil {
		return nil, nodeError(cctx, m, err, "reading the system statistics")
	}

	for _, msg := range st.GetMessages() {
		if bt := msg.GetBootTime(); bt > 0 && bt < math.MaxInt64 {
			out.BootTime = timestamppb.New(time.Unix(int64(bt), 0))
		}

		out.Cpus = int32(min(len(msg.GetCpu()), math.MaxInt32))
		if t := msg.GetCpuTotal(); t != nil {
			idle := t.GetIdle() + t.GetIowait()
			all := idle + t.GetUser() + t.GetNice() + t.GetSystem() + t.GetIrq() + t.GetSoftIrq() + t.GetSteal()

			if all > 0 {
				out.CpuBusy = 1 - idle/all
			}
		}
	}

	if la, err := c.MachineClient.LoadAvg(cctx, &emptypb.Empty{}); err == nil {
		for _, msg := range la.GetMessages() {
			out.Load1 = msg.GetLoad1()
		}
	}

	mem, err := c.Memory(cctx)
	if err != nil {
		return nil, nodeError(cctx, m, err, "reading the memory use")
	}

	for _, msg := range mem.GetMessages() {
		mi := msg.GetMeminfo()
		out.MemoryTotalBytes, out.MemoryAvailableBytes = kib(mi.GetMemtotal()), kib(mi.GetMemavailable())
	}

	mounts, err := c.Mounts(cctx)
	if err != nil {
		return nil, nodeError(cctx, m, err, "reading the filesystems")
	}

	for _, msg := range mounts.GetMessages() {
		for _, st := range msg.GetStats() {
			if !strings.HasPrefix(st.GetFilesystem(), "/dev/") || st.GetSize() == 0 {
				continue // tmpfs, overlays and the like
			}

			out.Filesystems = append(out.Filesystems, &ichorv1.NodeFilesystem{
				MountPoint: st.GetMountedOn(), Device: st.GetFilesystem(),
				SizeBytes: clamp(st.GetSize()), AvailableBytes: clamp(st.GetAvailable()),
			})
		}
	}

	slices.SortFunc(out.Filesystems, func(a, b *ichorv1.NodeFilesystem) int { return strings.Compare(a.GetMountPoint(), b.GetMountPoint()) })

	return out, nil
}

// kib converts /proc/meminfo's kibibytes (Talos passes them on as read) to bytes.
func kib(v uint64) int64 { return clamp(v) * 1024 }

func clamp(v uint64) int64 {
	if v > math.MaxInt64/1024 {
		return math.MaxInt64 / 1024
	}

	return int64(v)
}

// maxPods and maxEvents bound what GetNodeKubernetes returns.
const (
	maxPods   = 500
	maxEvents = 50
)

// GetNodeKubernetes implements NodeService: the machine's Node, its pods and
// Events, read as the signed-in user (impersonated), so their role decides
// what they see; a part they may not read is said in unavailable.
func (s *Service) GetNodeKubernetes(ctx context.Context, req *ichorv1.GetNodeKubernetesRequest) (*ichorv1.GetNodeKubernetesResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required: the TalosMachine whose Kubernetes Node to read")
	}

	if err := s.Clients.Authorize(ctx, "get", "talosmachines"); err != nil {
		return nil, userError(ctx, err, "reading machine "+name)
	}

	m := &ichorv1alpha1.TalosMachine{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, m); err != nil {
		return nil, userError(ctx, err, "reading machine "+name)
	}

	if m.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "machine %s belongs to cluster %q, not %q", name, m.Spec.ClusterName, s.ClusterName)
	}

	if m.Status.NodeName == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "machine %s has no Kubernetes Node yet (status.nodeName is empty): it has one once it joined", name)
	}

	out := &ichorv1.GetNodeKubernetesResponse{NodeName: m.Status.NodeName}
	user := s.Clients.User

	n := &corev1.Node{}
	if err := user.Get(ctx, client.ObjectKey{Name: m.Status.NodeName}, n); err != nil {
		if fatal := readFailure(ctx, err, "the Node "+m.Status.NodeName, &out.Unavailable); fatal != nil {
			return nil, fatal
		}
	} else {
		nodeToProto(n, out)
	}

	pods := &corev1.PodList{}
	if err := user.List(ctx, pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", m.Status.NodeName)},
		client.Limit(maxPods)); err != nil {
		if fatal := readFailure(ctx, err, "the pods", &out.Unavailable); fatal != nil {
			return nil, fatal
		}
	} else {
		for i := range pods.Items {
			out.Pods = append(out.Pods, podToProto(&pods.Items[i]))
		}

		slices.SortFunc(out.Pods, func(a, b *ichorv1.NodePod) int {
			return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
		})
	}

	events := &corev1.EventList{}
	if err := user.List(ctx, events, client.MatchingFieldsSelector{Selector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Node"),
		fields.OneTermEqualSelector("involvedObject.name", m.Status.NodeName),
	)}); err != nil {
		if fatal := readFailure(ctx, err, "the Node's Events", &out.Unavailable); fatal != nil {
			return nil, fatal
		}
	} else {
		out.Events = eventsToProto(events.Items)
	}

	return out, nil
}

// readFailure records a read the user may not make (or of an object that
// does not exist) in unavailable and returns nil; other errors are returned.
func readFailure(ctx context.Context, err error, what string, unavailable *[]string) error {
	var forbidden *kube.Forbidden

	switch {
	case apierrors.IsForbidden(err), errors.As(err, &forbidden):
		*unavailable = append(*unavailable, what+": your role may not read it (ask an administrator for get/list on it): "+apiMessage(err))
	case apierrors.IsNotFound(err):
		*unavailable = append(*unavailable, what+": not found")
	default:
		return userError(ctx, err, "reading "+what)
	}

	return nil
}

func nodeToProto(n *corev1.Node, out *ichorv1.GetNodeKubernetesResponse) {
	out.Unschedulable = n.Spec.Unschedulable
	out.KubeletVersion = n.Status.NodeInfo.KubeletVersion
	out.ContainerRuntimeVersion = n.Status.NodeInfo.ContainerRuntimeVersion
	out.KernelVersion = n.Status.NodeInfo.KernelVersion

	for _, c := range n.Status.Conditions {
		cond := &ichorv1.Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		if !c.LastTransitionTime.IsZero() {
			cond.LastTransitionTime = timestamppb.New(c.LastTransitionTime.Time)
		}

		out.Conditions = append(out.Conditions, cond)
	}

	for _, t := range n.Spec.Taints {
		out.Taints = append(out.Taints, &ichorv1.NodeTaint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}

	names := make([]string, 0, len(n.Status.Capacity))
	for r := range n.Status.Capacity {
		names = append(names, string(r))
	}

	sort.Strings(names)

	for _, r := range names {
		c := &ichorv1.NodeCapacity{Name: r}
		if q, ok := n.Status.Capacity[corev1.ResourceName(r)]; ok {
			c.Capacity = q.String()
		}

		if q, ok := n.Status.Allocatable[corev1.ResourceName(r)]; ok {
			c.Allocatable = q.String()
		}

		out.Capacity = append(out.Capacity, c)
	}
}

func podToProto(p *corev1.Pod) *ichorv1.NodePod {
	ready, restarts := 0, int32(0)

	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}

		restarts += cs.RestartCount
	}

	return &ichorv1.NodePod{
		Namespace: p.Namespace, Name: p.Name, Phase: string(p.Status.Phase),
		Ready:    strconv.Itoa(ready) + "/" + strconv.Itoa(len(p.Spec.Containers)),
		Restarts: restarts, CreatedAt: timestamppb.New(p.CreationTimestamp.Time),
	}
}

func eventsToProto(items []corev1.Event) []*ichorv1.NodeEvent {
	last := func(e *corev1.Event) time.Time {
		switch {
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		}

		return e.CreationTimestamp.Time
	}

	slices.SortFunc(items, func(a, b corev1.Event) int { return last(&b).Compare(last(&a)) })

	out := make([]*ichorv1.NodeEvent, 0, min(len(items), maxEvents))

	for i := range items[:min(len(items), maxEvents)] {
		e := &items[i]
		out = append(out, &ichorv1.NodeEvent{
			Type: e.Type, Reason: e.Reason, Message: e.Message, Count: max(e.Count, 1), LastTime: timestamppb.New(last(e)),
		})
	}

	return out
}
