package nodes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// Service implements NodeService.
type Service struct {
	ichorv1.UnimplementedNodeServiceServer

	// Clients read the machines (cache) and check the user's rights.
	Clients *kube.Clients
	// ClusterName is the TalosCluster ichor-ui serves.
	ClusterName string
	// Credentials is ichor-ui's os:reader certificate.
	Credentials *Credentials
	// Port is the Talos API port; zero means 50000.
	Port int
	// CallTimeout bounds one read of a node; zero means 20 s.
	CallTimeout time.Duration
	// Stopping is closed when the server shuts down: log streams end with
	// UNAVAILABLE so that clients reconnect and resume.
	Stopping <-chan struct{}
	// MaxLogStreamsPerUser bounds the log streams one signed-in user may
	// have open at once (each holds a connection to a node); zero means
	// DefaultMaxLogStreamsPerUser.
	MaxLogStreamsPerUser int

	streamsMu sync.Mutex
	streams   map[string]int // user name -> open log streams
}

// DefaultMaxLogStreamsPerUser is the default of MaxLogStreamsPerUser.
const DefaultMaxLogStreamsPerUser = 8

// openLogStream counts a log stream of the signed-in user, or refuses it
// with RESOURCE_EXHAUSTED when the user has the most open; call the returned
// function when the stream ends.
func (s *Service) openLogStream(ctx context.Context) (func(), error) {
	id, _ := identity.From(ctx)
	limit := s.MaxLogStreamsPerUser
	if limit == 0 {
		limit = DefaultMaxLogStreamsPerUser
	}
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams == nil {
		s.streams = map[string]int{}
	}
	if s.streams[id.Username] >= limit {
		return nil, status.Errorf(codes.ResourceExhausted,
			"%s has %d log streams open, the most ichor-ui serves one user; close one (a log view or a browser tab) and try again", id.Username, limit)
	}
	s.streams[id.Username]++
	return func() {
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		if s.streams[id.Username]--; s.streams[id.Username] <= 0 {
			delete(s.streams, id.Username)
		}
	}, nil
}

// Limits of the requests.
const (
	defaultDmesgLines = 500
	defaultLogLines   = 100
	maxLines          = 5000
)

// connect checks that the signed-in user may get the TalosCluster, resolves
// the machine and dials its node with ichor-ui's reader certificate.
func (s *Service) connect(ctx context.Context, name string) (*talosclient.Client, *ichorv1alpha1.TalosMachine, error) {
	if name == "" {
		return nil, nil, status.Error(codes.InvalidArgument, "name is required: the TalosMachine whose node to read")
	}

	if err := s.Clients.Authorize(ctx, "get", "talosclusters"); err != nil {
		return nil, nil, userError(ctx, err, "reading node "+name)
	}

	m := &ichorv1alpha1.TalosMachine{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, m); err != nil {
		return nil, nil, userError(ctx, err, "reading machine "+name)
	}

	if m.Spec.ClusterName != s.ClusterName {
		return nil, nil, status.Errorf(codes.NotFound, "machine %s belongs to cluster %q, not %q", name, m.Spec.ClusterName, s.ClusterName)
	}

	if m.Status.Stage != ichorv1alpha1.StageRunning {
		stage := m.Status.Stage
		if stage == "" {
			stage = "not provisioned"
		}

		return nil, nil, status.Errorf(codes.FailedPrecondition,
			"machine %s is %s, not running: its node's Talos state can be read once it runs its configuration", name, stage)
	}

	if m.Spec.Address == "" {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "machine %s has no spec.address to reach its node at", name)
	}

	cred, err := s.Credentials.Get(ctx)
	if err != nil {
		return nil, nil, err
	}

	c, err := talos.DialWithCertificate(ctx, m.Spec.Address, s.Port, cred.Cert, cred.Roots)
	if err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "node %s (%s): %v", name, m.Spec.Address, err)
	}

	return c, m, nil
}

// open connects to the machine's node (connect) and bounds the reads by the
// call timeout; done closes the connection and releases the context.
func (s *Service) open(ctx context.Context, name string) (context.Context, *talosclient.Client, *ichorv1alpha1.TalosMachine, func(), error) {
	c, m, err := s.connect(ctx, name)
	if err != nil {
		return nil, nil, nil, nil, err
	}

	cctx, cancel := context.WithTimeout(ctx, s.timeout())

	return cctx, c, m, func() { cancel(); _ = c.Close() }, nil
}

func (s *Service) timeout() time.Duration {
	if s.CallTimeout > 0 {
		return s.CallTimeout
	}

	return 20 * time.Second
}

// nodeError maps an error of a node to the status the UI shows.
func nodeError(ctx context.Context, m *ichorv1alpha1.TalosMachine, err error, what string) error {
	if err == nil {
		return nil
	}

	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return status.FromContextError(ctx.Err()).Err()
	}

	st, _ := status.FromError(err)
	node := fmt.Sprintf("node %s (%s)", m.Name, m.Spec.Address)

	switch st.Code() {
	case codes.PermissionDenied:
		return status.Errorf(codes.PermissionDenied, "%s: %s refused ichor-ui's os:reader certificate: %s", what, node, st.Message())
	case codes.Unimplemented:
		return status.Errorf(codes.FailedPrecondition, "%s: %s does not offer it: %s", what, node, st.Message())
	case codes.NotFound, codes.InvalidArgument:
		return status.Errorf(st.Code(), "%s: %s: %s", what, node, st.Message())
	case codes.Canceled:
		return status.Errorf(codes.Canceled, "%s: %s", what, st.Message())
	}

	return status.Errorf(codes.Unavailable, "%s: %s does not answer: %s", what, node, st.Message())
}

// userError maps a refusal of the user's rights or of the API server.
func userError(ctx context.Context, err error, what string) error {
	if _, ok := status.FromError(err); ok {
		return err
	}

	var forbidden *kube.Forbidden

	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, kube.ErrNoIdentity):
		return status.Error(codes.Unauthenticated, "sign in first: "+err.Error())
	case errors.Is(err, identity.ErrNotAllowed), errors.As(err, &forbidden):
		return status.Errorf(codes.PermissionDenied, "%s: %v", what, err)
	case apierrors.IsForbidden(err):
		user := "the signed-in user"
		if id, ok := identity.From(ctx); ok {
			user = fmt.Sprintf("user %q", id.Username)
		}

		return status.Errorf(codes.PermissionDenied, "%s: the Kubernetes API server refused it for %s (403 Forbidden): %s", what, user, apiMessage(err))
	case apierrors.IsNotFound(err):
		return status.Errorf(codes.NotFound, "%s: %s", what, apiMessage(err))
	}

	return status.Errorf(codes.Unavailable, "%s: %s", what, apiMessage(err))
}

// GetNodeServices implements NodeService.
func (s *Service) GetNodeServices(ctx context.Context, req *ichorv1.GetNodeServicesRequest) (*ichorv1.GetNodeServicesResponse, error) {
	cctx, c, m, done, err := s.open(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	defer done()

	resp, err := c.ServiceList(cctx)
	if err != nil {
		return nil, nodeError(cctx, m, err, "listing the services")
	}

	out := &ichorv1.GetNodeServicesResponse{}

	for _, msg := range resp.GetMessages() {
		for _, svc := range msg.GetServices() {
			ts := &ichorv1.TalosService{
				Id: svc.GetId(), State: svc.GetState(),
				Healthy: svc.GetHealth().GetHealthy(), HealthUnknown: svc.GetHealth().GetUnknown(),
				HealthMessage: svc.GetHealth().GetLastMessage(),
			}

			if ev := svc.GetEvents().GetEvents(); len(ev) > 0 {
				last := ev[len(ev)-1]
				ts.LastEvent, ts.LastEventTime = last.GetMsg(), last.GetTs()
			}

			out.Services = append(out.Services, ts)
		}
	}

	slices.SortFunc(out.Services, func(a, b *ichorv1.TalosService) int { return strings.Compare(a.GetId(), b.GetId()) })

	return out, nil
}

// GetNodeDisks implements NodeService: the block.Disk resources.
func (s *Service) GetNodeDisks(ctx context.Context, req *ichorv1.GetNodeDisksRequest) (*ichorv1.GetNodeDisksResponse, error) {
	cctx, c, m, done, err := s.open(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	defer done()

	disks, err := safe.StateListAll[*block.Disk](cctx, c.COSI)
	if err != nil {
		return nil, nodeError(cctx, m, err, "listing the disks")
	}

	out := &ichorv1.GetNodeDisksResponse{}

	for d := range disks.All() {
		spec := d.TypedSpec()
		nd := &ichorv1.NodeDisk{
			DevicePath: spec.DevPath, SizeBytes: int64(min(spec.Size, uint64(1<<63-1))),
			Model: spec.Model, Serial: spec.Serial, Wwid: spec.WWID, Transport: spec.Transport,
			Rotational: spec.Rotational, Readonly: spec.Readonly, BusPath: spec.BusPath,
		}

		if nd.DevicePath == "" {
			nd.DevicePath = "/dev/" + d.Metadata().ID()
		}

		for _, l := range spec.Symlinks {
			if strings.HasPrefix(l, "/dev/disk/by-id/") {
				nd.ById = l

				break
			}
		}

		out.Disks = append(out.Disks, nd)
	}

	slices.SortFunc(out.Disks, func(a, b *ichorv1.NodeDisk) int { return strings.Compare(a.GetDevicePath(), b.GetDevicePath()) })

	return out, nil
}

// GetNodeLinks implements NodeService: LinkStatus with the AddressStatus of each link.
func (s *Service) GetNodeLinks(ctx context.Context, req *ichorv1.GetNodeLinksRequest) (*ichorv1.GetNodeLinksResponse, error) {
	cctx, c, m, done, err := s.open(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	defer done()

	links, err := safe.StateListAll[*network.LinkStatus](cctx, c.COSI)
	if err != nil {
		return nil, nodeError(cctx, m, err, "listing the links")
	}

	addrs, err := safe.StateListAll[*network.AddressStatus](cctx, c.COSI)
	if err != nil {
		return nil, nodeError(cctx, m, err, "listing the addresses")
	}

	byLink := map[string][]string{}
	for a := range addrs.All() {
		byLink[a.TypedSpec().LinkName] = append(byLink[a.TypedSpec().LinkName], a.TypedSpec().Address.String())
	}

	out := &ichorv1.GetNodeLinksResponse{}

	for l := range links.All() {
		spec := l.TypedSpec()

		kind := spec.Kind
		if kind == "" && spec.Type == nethelpers.LinkEther {
			kind = "physical"
		}

		nl := &ichorv1.NodeLink{
			Name: l.Metadata().ID(), Kind: kind,
			HardwareAddr: spec.HardwareAddr.String(), OperationalState: spec.OperationalState.String(),
			Mtu: int32(min(spec.MTU, 1<<31-1)),
		}

		if kind == "physical" {
			nl.PermanentAddr = spec.PermanentAddr.String()
		}

		if spec.Alias != "" {
			nl.Aliases = append(nl.Aliases, spec.Alias)
		}

		nl.Aliases = append(nl.Aliases, spec.AltNames...)
		nl.Addresses = byLink[l.Metadata().ID()]
		slices.Sort(nl.Addresses)
		out.Links = append(out.Links, nl)
	}

	slices.SortFunc(out.Links, func(a, b *ichorv1.NodeLink) int { return strings.Compare(a.GetName(), b.GetName()) })

	return out, nil
}

// GetNodeDmesg implements NodeService: the last lines of the kernel log.
func (s *Service) GetNodeDmesg(ctx context.Context, req *ichorv1.GetNodeDmesgRequest) (*ichorv1.GetNodeDmesgResponse, error) {
	n, err := lines(req.GetTailLines(), defaultDmesgLines)
	if err != nil {
		return nil, err
	}

	cctx, c, m, done, err := s.open(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	defer done()

	stream, err := c.Dmesg(cctx, false, false)
	if err != nil {
		return nil, nodeError(cctx, m, err, "reading the kernel log")
	}

	out := &ichorv1.GetNodeDmesgResponse{}

	err = readLines(stream, func(l string) error {
		out.Lines = append(out.Lines, l)
		if len(out.Lines) > 2*n {
			out.Lines = append(out.Lines[:0], out.Lines[len(out.Lines)-n:]...)
		}

		return nil
	})
	if err != nil {
		return nil, nodeError(cctx, m, err, "reading the kernel log")
	}

	if len(out.Lines) > n {
		out.Lines = out.Lines[len(out.Lines)-n:]
	}

	return out, nil
}

// GetNodeEtcdMembers implements NodeService (control planes only).
func (s *Service) GetNodeEtcdMembers(ctx context.Context, req *ichorv1.GetNodeEtcdMembersRequest) (*ichorv1.GetNodeEtcdMembersResponse, error) {
	c, m, err := s.connect(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	defer c.Close() //nolint:errcheck

	if m.Spec.Role != "" && m.Spec.Role != ichorv1alpha1.RoleControlPlane {
		return nil, status.Errorf(codes.FailedPrecondition, "machine %s is a %s: etcd members are read on a control plane", m.Name, m.Spec.Role)
	}

	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()

	resp, err := c.EtcdMemberList(cctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		return nil, nodeError(cctx, m, err, "listing the etcd members")
	}

	out := &ichorv1.GetNodeEtcdMembersResponse{}

	for _, msg := range resp.GetMessages() {
		for _, mem := range msg.GetMembers() {
			out.Members = append(out.Members, &ichorv1.EtcdMember{
				Id: strconv.FormatUint(mem.GetId(), 16), Hostname: mem.GetHostname(),
				PeerUrls: mem.GetPeerUrls(), ClientUrls: mem.GetClientUrls(), Learner: mem.GetIsLearner(),
			})
		}
	}

	return out, nil
}

// lines checks a tail_lines field.
func lines(n, def int32) (int, error) {
	switch {
	case n < 0:
		return 0, status.Errorf(codes.InvalidArgument, "tail_lines %d: give a count from 1 to %d, or 0 for %d", n, maxLines, def)
	case n == 0:
		return int(def), nil
	case n > maxLines:
		return 0, status.Errorf(codes.InvalidArgument, "tail_lines %d is more than %d: ask for fewer lines", n, maxLines)
	}

	return int(n), nil
}
