package server

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"

	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// service is one gRPC service of the UI API with its REST mapping.
type service struct {
	name string
	// grpc registers the implementation on the gRPC server.
	grpc func(grpc.ServiceRegistrar)
	// rest registers the grpc-gateway mapping, which calls the gRPC
	// server in-process through conn.
	rest func(ctx context.Context, mux *runtime.ServeMux, conn *grpc.ClientConn) error
}

// services is the table of the UI API's services New registers, one entry
// per service of contracts/proto/ichor/v1; a nil implementation is left out.
func (o *Options) services() []service {
	var out []service
	add := func(s service, set bool) {
		if set {
			out = append(out, s)
		}
	}
	add(serviceOf("ClusterService", o.Cluster, ichorv1.RegisterClusterServiceServer, ichorv1.RegisterClusterServiceHandler))
	add(serviceOf("MachineService", o.Machines, ichorv1.RegisterMachineServiceServer, ichorv1.RegisterMachineServiceHandler))
	add(serviceOf("NodeService", o.Nodes, ichorv1.RegisterNodeServiceServer, ichorv1.RegisterNodeServiceHandler))
	add(serviceOf("OperationService", o.Operations, ichorv1.RegisterOperationServiceServer, ichorv1.RegisterOperationServiceHandler))
	add(serviceOf("SettingsService", o.Settings, ichorv1.RegisterSettingsServiceServer, ichorv1.RegisterSettingsServiceHandler))
	add(serviceOf("ReclaimService", o.Reclaims, ichorv1.RegisterReclaimServiceServer, ichorv1.RegisterReclaimServiceHandler))
	add(serviceOf("PatchService", o.Patches, ichorv1.RegisterPatchServiceServer, ichorv1.RegisterPatchServiceHandler))
	add(serviceOf("HealthService", o.Health, ichorv1.RegisterHealthServiceServer, ichorv1.RegisterHealthServiceHandler))
	add(serviceOf("BackupService", o.Backups, ichorv1.RegisterBackupServiceServer, ichorv1.RegisterBackupServiceHandler))
	add(serviceOf("UserService", o.Users, ichorv1.RegisterUserServiceServer, ichorv1.RegisterUserServiceHandler))
	return out
}

// serviceOf pairs an implementation with its generated gRPC and REST
// registrations; false when impl is nil.
func serviceOf[T any](name string, impl T, register func(grpc.ServiceRegistrar, T),
	handler func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error,
) (service, bool) {
	if any(impl) == nil {
		return service{}, false
	}
	return service{name: name, grpc: func(r grpc.ServiceRegistrar) { register(r, impl) }, rest: handler}, true
}
