package talosemu

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// checkControlPlane mirrors t:internal/app/internal/machinehelper/machinehelper.go
// (CheckControlplane): Unimplemented without a machine type or on a non-control-plane.
func checkControlPlane(ctx context.Context, st state.State, api string) error {
	mt, err := safe.StateGetByID[*config.MachineType](ctx, st, config.MachineTypeID)
	if err != nil {
		if state.IsNotFoundError(err) {
			return status.Errorf(codes.Unimplemented, "machine type is not set, cannot use %s API", api)
		}

		return fmt.Errorf("failed to get machine type: %w", err)
	}

	if !mt.MachineType().IsControlPlane() {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	return nil
}

// GenerateClientConfiguration signs a client certificate for the requested roles with the OS
// CA of the running config (t:…/v1alpha1_server.go GenerateClientConfiguration).
func (s *apiServer) GenerateClientConfiguration(ctx context.Context, in *machine.GenerateClientConfigurationRequest) (*machine.GenerateClientConfigurationResponse, error) {
	if err := checkControlPlane(ctx, s.m.st, "generate client configuration"); err != nil {
		return nil, err
	}

	ttl := in.GetCrtTtl().AsDuration()
	if ttl <= 0 {
		return nil, status.Error(codes.InvalidArgument, "crt_ttl should be positive")
	}

	roles, _ := role.Parse(in.GetRoles())

	s.m.mu.Lock()
	cfg := s.m.active
	s.m.mu.Unlock()

	if cfg == nil {
		return nil, status.Error(codes.FailedPrecondition, "machine configuration is not available")
	}

	bundle, err := secrets.NewBundleFromConfig(secrets.NewFixedClock(time.Now()), cfg)
	if err != nil {
		return nil, fmt.Errorf("error creating secrets bundle from config: %w", err)
	}

	cert, err := bundle.GenerateTalosAPIClientCertificateWithTTL(roles, ttl)
	if err != nil {
		return nil, err
	}

	name := nameTalos
	if kc := cfg.K8sClusterConfig(); kc != nil && kc.ClusterName() != "" {
		name = kc.ClusterName()
	}

	if r := roles.Strings(); len(r) == 1 {
		name = strings.TrimPrefix(r[0], role.Prefix) + "@" + name
	}

	b, err := clientconfig.NewConfig(name, nil, bundle.Certs.OS.Crt, cert).Bytes()
	if err != nil {
		return nil, err
	}

	return &machine.GenerateClientConfigurationResponse{Messages: []*machine.GenerateClientConfiguration{{
		Ca:          bundle.Certs.OS.Crt,
		Crt:         cert.Crt,
		Key:         cert.Key,
		Talosconfig: b,
	}}}, nil
}
