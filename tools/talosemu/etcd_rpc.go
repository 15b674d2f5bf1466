package talosemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// errEtcdNotRunning is what the etcd RPCs answer while the member is not running. Talos
// v1.14 has no such check (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go:
// the etcd RPCs only call machinehelper.CheckControlplane, then dial localhost:2379, so a call
// waits for the caller's deadline); the emulator answers at once instead.
var errEtcdNotRunning = status.Error(codes.Unavailable, "etcd service is not running")

func (s *apiServer) checkEtcd(ctx context.Context, api string) error {
	if err := checkControlPlane(ctx, s.m.st, api); err != nil {
		return err
	}

	if s.m.runningEtcd() == nil {
		return errEtcdNotRunning
	}

	return nil
}

// Bootstrap creates the etcd cluster on this control plane, or restores it from the uploaded
// snapshot with recover_etcd (t:…/v1alpha1_server.go Bootstrap; errors per talos-api.md).
// Difference: Talos starts its etcd service and answers at once, so a missing or bad recovery
// snapshot shows as a failing etcd service; the emulator restores synchronously and answers
// the failure (FailedPrecondition without a snapshot, the restore error otherwise).
func (s *apiServer) Bootstrap(ctx context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	m := s.m

	// Talos asks whether bootstrap is allowed before it checks the machine type
	// (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Bootstrap)
	if m.Stage() != talosruntime.MachineStageRunning {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}

	if err := checkControlPlane(ctx, m.st, "bootstrap"); err != nil {
		return nil, err
	}

	if etcdCA(m.activeConfig()) == nil {
		return nil, status.Error(codes.InvalidArgument, "etcd is not configured, bootstrap is not possible")
	}

	m.etcdStartMu.Lock()
	defer m.etcdStartMu.Unlock()

	if dirNotEmpty(m.etcdDataDir()) || m.runningEtcd() != nil {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	if in.GetRecoverEtcd() {
		if _, err := os.Stat(m.etcdSnapshotPath()); err != nil {
			return nil, status.Error(codes.FailedPrecondition, "etcd recovery snapshot is not present, upload it with EtcdRecover first")
		}

		if err := m.restoreEtcd(in.GetRecoverSkipHashCheck()); err != nil {
			return nil, err
		}
	}

	m.etcdMu.Lock()
	m.etcdLeft = false
	m.etcdMu.Unlock()

	sctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if err := m.startEtcdLocked(sctx, embed.ClusterStateFlagNew, ""); err != nil {
		return nil, err
	}

	m.world.logf("machine %s: bootstrapped etcd (recover=%v)", m.Name(), in.GetRecoverEtcd())

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// EtcdMemberList lists the members (t:…/v1alpha1_server.go EtcdMemberList).
func (s *apiServer) EtcdMemberList(ctx context.Context, in *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	if err := s.checkEtcd(ctx, "etcd member list"); err != nil {
		return nil, err
	}

	var (
		c   *clientv3.Client
		err error
	)

	if in.GetQueryLocal() {
		c, _, err = s.m.localEtcdClient(ctx)
	} else {
		c, err = s.m.clusterEtcdClient(ctx)
	}

	if err != nil {
		return nil, err
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.MemberList(clientv3.WithRequireLeader(ctx))
	if err != nil {
		return nil, err
	}

	out := &machine.EtcdMembers{}

	for _, mem := range resp.Members {
		out.LegacyMembers = append(out.LegacyMembers, mem.GetName())
		out.Members = append(out.Members, &machine.EtcdMember{
			Id:         mem.GetID(),
			Hostname:   mem.GetName(),
			PeerUrls:   mem.GetPeerURLs(),
			ClientUrls: mem.GetClientURLs(),
			IsLearner:  mem.GetIsLearner(),
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{out}}, nil
}

// EtcdRemoveMemberByID removes a member; NotFound for an unknown id (t:…/v1alpha1_server.go).
func (s *apiServer) EtcdRemoveMemberByID(ctx context.Context, in *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	if err := s.checkEtcd(ctx, "etcd remove member"); err != nil {
		return nil, err
	}

	c, err := s.m.clusterEtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	if _, err := c.MemberRemove(clientv3.WithRequireLeader(ctx), in.GetMemberId()); err != nil {
		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil, status.Error(codes.NotFound, err.Error())
		}

		return nil, fmt.Errorf("failed to remove member: %w", err)
	}

	return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
}

// EtcdLeaveCluster removes this member from the cluster (t:…/v1alpha1_server.go EtcdLeaveCluster).
func (s *apiServer) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	if err := s.checkEtcd(ctx, "etcd leave"); err != nil {
		return nil, err
	}

	if err := s.m.leaveEtcd(ctx); err != nil {
		return nil, fmt.Errorf("failed to leave cluster: %w", err)
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}

// EtcdForfeitLeadership moves the leadership to another voting member when this member leads
// and returns the new leader's name ("" when it did not lead) (t:internal/pkg/etcd/etcd.go
// ForfeitLeadership).
func (s *apiServer) EtcdForfeitLeadership(ctx context.Context, _ *machine.EtcdForfeitLeadershipRequest) (*machine.EtcdForfeitLeadershipResponse, error) {
	if err := s.checkEtcd(ctx, "etcd forfeit leadership"); err != nil {
		return nil, err
	}

	c, r, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	ctx = clientv3.WithRequireLeader(ctx)

	st, err := c.Status(ctx, s.m.etcdClientURL())
	if err != nil {
		return nil, fmt.Errorf("failed to forfeit leadership: %w", err)
	}

	leader := ""

	if st.Leader == r.id {
		list, err := c.MemberList(ctx)
		if err != nil {
			return nil, fmt.Errorf("failed to forfeit leadership: %w", err)
		}

		for _, mem := range list.Members {
			if mem.ID == r.id || mem.IsLearner || mem.Name == "" {
				continue
			}

			if _, err := c.MoveLeader(ctx, mem.ID); err != nil {
				continue
			}

			leader = mem.Name

			break
		}
	}

	return &machine.EtcdForfeitLeadershipResponse{Messages: []*machine.EtcdForfeitLeadership{{Member: leader}}}, nil
}

// EtcdStatus reports the local member's status (t:…/v1alpha1_server.go EtcdStatus).
func (s *apiServer) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	if err := s.checkEtcd(ctx, "etcd status"); err != nil {
		return nil, err
	}

	c, _, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.Status(ctx, s.m.etcdClientURL())
	if err != nil {
		return nil, fmt.Errorf("failed to query etcd status: %w", err)
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: &machine.EtcdMemberStatus{
		MemberId:         resp.Header.GetMemberId(),
		ProtocolVersion:  resp.Version,
		StorageVersion:   resp.StorageVersion,
		DbSize:           resp.DbSize,
		DbSizeInUse:      resp.DbSizeInUse,
		Leader:           resp.Leader,
		RaftIndex:        resp.RaftIndex,
		RaftTerm:         resp.RaftTerm,
		RaftAppliedIndex: resp.RaftAppliedIndex,
		Errors:           resp.Errors,
		IsLearner:        resp.IsLearner,
	}}}}, nil
}

// EtcdSnapshot streams a real snapshot of the local member (t:…/v1alpha1_server.go EtcdSnapshot).
func (s *apiServer) EtcdSnapshot(_ *machine.EtcdSnapshotRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	ctx := srv.Context()

	if err := s.checkEtcd(ctx, "etcd snapshot"); err != nil {
		return err
	}

	c, _, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	rd, err := c.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("failed reading etcd snapshot: %w", err)
	}

	defer rd.Close() //nolint:errcheck

	buf := make([]byte, 1<<20)

	for {
		n, err := rd.Read(buf)
		if n > 0 {
			if serr := srv.Send(&common.Data{Bytes: append([]byte(nil), buf[:n]...)}); serr != nil {
				return serr
			}
		}

		if errors.Is(err, io.EOF) {
			return nil
		}

		if err != nil {
			return fmt.Errorf("failed reading etcd snapshot: %w", err)
		}
	}
}

// EtcdRecover stores the uploaded snapshot for Bootstrap{recover_etcd}; FailedPrecondition
// before /var/lib exists, i.e. before Talos is installed (t:…/v1alpha1_server.go EtcdRecover).
func (s *apiServer) EtcdRecover(srv grpc.ClientStreamingServer[common.Data, machine.EtcdRecoverResponse]) error {
	m := s.m

	m.mu.Lock()
	installed := m.p.Installed
	m.mu.Unlock()

	if !installed {
		return status.Error(codes.FailedPrecondition, "etcd service is not ready for recovery yet")
	}

	if err := checkControlPlane(srv.Context(), m.st, "etcd recover"); err != nil {
		return err
	}

	path := m.etcdSnapshotPath()

	f, err := os.OpenFile(filepath.Clean(path), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("error creating etcd recovery snapshot: %w", err)
	}

	ok := false

	defer func() {
		_ = f.Close()

		if !ok {
			_ = os.Remove(path)
		}
	}()

	for {
		msg, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}

		if err != nil {
			return err
		}

		if _, err := f.Write(msg.GetBytes()); err != nil {
			return fmt.Errorf("error writing snapshot: %w", err)
		}
	}

	if err := f.Sync(); err != nil {
		return fmt.Errorf("error fsyncing snapshot: %w", err)
	}

	ok = true

	return srv.SendAndClose(&machine.EtcdRecoverResponse{Messages: []*machine.EtcdRecover{{}}})
}

func mapAlarms(alarms []*etcdserverpb.AlarmMember) []*machine.EtcdMemberAlarm {
	out := make([]*machine.EtcdMemberAlarm, 0, len(alarms))

	for _, a := range alarms {
		typ := machine.EtcdMemberAlarm_NONE

		switch a.Alarm { //nolint:exhaustive // the rest is NONE
		case etcdserverpb.AlarmType_NOSPACE:
			typ = machine.EtcdMemberAlarm_NOSPACE
		case etcdserverpb.AlarmType_CORRUPT:
			typ = machine.EtcdMemberAlarm_CORRUPT
		}

		out = append(out, &machine.EtcdMemberAlarm{MemberId: a.MemberID, Alarm: typ})
	}

	return out
}

// EtcdAlarmList lists the alarms of the cluster (t:…/v1alpha1_server.go EtcdAlarmList).
func (s *apiServer) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	if err := s.checkEtcd(ctx, "etcd alarm list"); err != nil {
		return nil, err
	}

	c, _, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.AlarmList(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to list etcd alarms: %w", err)
	}

	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{MemberAlarms: mapAlarms(resp.Alarms)}}}, nil
}

// EtcdAlarmDisarm disarms the alarms (t:…/v1alpha1_server.go EtcdAlarmDisarm).
func (s *apiServer) EtcdAlarmDisarm(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmDisarmResponse, error) {
	if err := s.checkEtcd(ctx, "etcd alarm disarm"); err != nil {
		return nil, err
	}

	c, _, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.AlarmDisarm(ctx, &clientv3.AlarmMember{})
	if err != nil {
		return nil, fmt.Errorf("failed to disarm etcd alarm: %w", err)
	}

	return &machine.EtcdAlarmDisarmResponse{Messages: []*machine.EtcdAlarmDisarm{{MemberAlarms: mapAlarms(resp.Alarms)}}}, nil
}

// EtcdDefragment defragments the local member's backend (t:…/v1alpha1_server.go EtcdDefragment).
func (s *apiServer) EtcdDefragment(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdDefragmentResponse, error) {
	if err := s.checkEtcd(ctx, "etcd defragment"); err != nil {
		return nil, err
	}

	c, _, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to create etcd client: %w", err)
	}

	defer c.Close() //nolint:errcheck

	if _, err := c.Defragment(ctx, s.m.etcdClientURL()); err != nil {
		return nil, fmt.Errorf("failed to defragment etcd: %w", err)
	}

	return &machine.EtcdDefragmentResponse{Messages: []*machine.EtcdDefragment{{}}}, nil
}
