package talosemu

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The etcd downgrade RPCs act on the local member through the real client's
// Maintenance.Downgrade, as Talos does
// (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go EtcdDowngradeValidate,
// EtcdDowngradeEnable, EtcdDowngradeCancel, validateDowngrade). The member decides: etcd v3.7
// accepts exactly one minor version down (3.6) and answers the rest with "invalid downgrade
// target version"; Talos wraps the client's error without a gRPC status, so that reaches the
// caller as Unknown, the same here.
//
// One difference: Talos dials localhost:2379 whether or not etcd runs, so a call on a control
// plane whose member is stopped waits for the caller's deadline; the emulator answers
// Unavailable "etcd service is not running" at once, as its other etcd RPCs do.

// EtcdDowngradeValidate asks the local member whether the cluster can be downgraded to
// the MAJOR.MINOR version of the request.
func (s *apiServer) EtcdDowngradeValidate(ctx context.Context, in *machine.EtcdDowngradeValidateRequest) (*machine.EtcdDowngradeValidateResponse, error) {
	d, err := s.etcdDowngrade(ctx, "etcd downgrade validate", clientv3.DowngradeValidate, in.GetVersion())
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDowngradeValidateResponse{Messages: []*machine.EtcdDowngradeValidate{{ClusterDowngrade: d}}}, nil
}

// EtcdDowngradeEnable starts the cluster's downgrade to the MAJOR.MINOR version of the request.
func (s *apiServer) EtcdDowngradeEnable(ctx context.Context, in *machine.EtcdDowngradeEnableRequest) (*machine.EtcdDowngradeEnableResponse, error) {
	d, err := s.etcdDowngrade(ctx, "etcd downgrade enable", clientv3.DowngradeEnable, in.GetVersion())
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDowngradeEnableResponse{Messages: []*machine.EtcdDowngradeEnable{{ClusterDowngrade: d}}}, nil
}

// EtcdDowngradeCancel cancels a downgrade in progress. etcd answers with the cluster version
// also when no downgrade is in progress (its server ignores "no inflight downgrade job").
func (s *apiServer) EtcdDowngradeCancel(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdDowngradeCancelResponse, error) {
	d, err := s.etcdDowngrade(ctx, "etcd downgrade cancel", clientv3.DowngradeCancel, "")
	if err != nil {
		return nil, err
	}

	return &machine.EtcdDowngradeCancelResponse{Messages: []*machine.EtcdDowngradeCancel{{ClusterDowngrade: d}}}, nil
}

// etcdDowngrade checks the role and the version (not for cancel), then runs the action on
// the local member.
func (s *apiServer) etcdDowngrade(ctx context.Context, api string, action clientv3.DowngradeAction, version string) (*machine.EtcdClusterDowngrade, error) {
	if err := checkControlPlane(ctx, s.m.st, api); err != nil {
		return nil, err
	}

	if action != clientv3.DowngradeCancel {
		if err := validateEtcdDowngrade(version); err != nil {
			return nil, err
		}
	}

	c, _, err := s.m.localEtcdClient(ctx)
	if err != nil {
		return nil, err
	}

	defer c.Close() //nolint:errcheck

	resp, err := c.Downgrade(ctx, action, version)
	if err != nil {
		return nil, fmt.Errorf("failed to query etcd status: %w", err)
	}

	return &machine.EtcdClusterDowngrade{ClusterVersion: resp.Version}, nil
}

// validateEtcdDowngrade is Talos's check of the target version before etcd sees it:
// required, MAJOR.MINOR, numbers, at least 3.5 (compared as Talos does, on the unsigned
// values, so a negative number is not "less than 3.5").
func validateEtcdDowngrade(version string) error {
	if version == "" {
		return status.Error(codes.InvalidArgument, "version is required for etcd downgrade")
	}

	parts := strings.Split(version, ".")
	if len(parts) != 2 {
		return status.Error(codes.InvalidArgument, "version should be in MAJOR.MINOR format")
	}

	major, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return status.Error(codes.InvalidArgument, "major version should be a number")
	}

	minor, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return status.Error(codes.InvalidArgument, "minor version should be a number")
	}

	if major >= 0 && (major < 3 || (major == 3 && minor >= 0 && minor < 5)) {
		return status.Error(codes.InvalidArgument, "etcd downgrade is only supported to 3.5 and later versions")
	}

	return nil
}
