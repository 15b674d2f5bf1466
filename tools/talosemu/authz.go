package talosemu

import (
	"context"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// errNotAuthorized is the error Talos's authorizer returns
// (t:pkg/grpc/middleware/authz/authorizer.go, ErrNotAuthorized).
var errNotAuthorized = status.Error(codes.PermissionDenied, "not authorized")

// methodRoles is Talos's per-method rules table (t:internal/app/machined/pkg/system/services/machined.go,
// var rules), regrouped by the set of roles allowed. Methods absent from it need os:admin
// (FallbackRoles in the same file).
var methodRoles = buildRules(map[string][]string{
	"A": {
		"/machine.ImageService/Import", "/machine.ImageService/Remove",
		"/machine.DebugService/ContainerRun",
		"/machine.LifecycleService/Install", "/machine.LifecycleService/Upgrade",
		"/machine.MachineService/Bootstrap", "/machine.MachineService/Copy",
		"/machine.MachineService/EtcdForfeitLeadership", "/machine.MachineService/EtcdLeaveCluster",
		"/machine.MachineService/EtcdRecover", "/machine.MachineService/EtcdRemoveMemberByID",
		"/machine.MachineService/EtcdDowngradeCancel", "/machine.MachineService/EtcdDowngradeEnable",
		"/machine.MachineService/EtcdDowngradeValidate",
		"/machine.MachineService/GenerateClientConfiguration", "/machine.MachineService/Kubeconfig",
		"/machine.MachineService/Read", "/machine.MachineService/Reset", "/machine.MachineService/Rollback",
		"/machine.MachineService/Upgrade",
		"/cosi.resource.State/Create", "/cosi.resource.State/Destroy", "/cosi.resource.State/Teardown",
		"/cosi.resource.State/TeardownAndDestroy", "/cosi.resource.State/Update",
	},
	"AO": {
		"/machine.ImageService/Pull",
		"/machine.MachineService/EtcdAlarmDisarm", "/machine.MachineService/EtcdDefragment",
		"/machine.MachineService/ImagePull", "/machine.MachineService/PacketCapture",
		"/machine.MachineService/Reboot", "/machine.MachineService/Restart",
		"/machine.MachineService/ServiceRestart", "/machine.MachineService/ServiceStart",
		"/machine.MachineService/ServiceStop", "/machine.MachineService/Shutdown",
	},
	"AOR": {
		"/cluster.ClusterService/HealthCheck",
		"/inspect.InspectService/ControllerRuntimeDependencies",
		"/machine.ImageService/List",
		"/machine.MachineService/CPUInfo", "/machine.MachineService/CPUFreqStats",
		"/machine.MachineService/Containers", "/machine.MachineService/DiskStats",
		"/machine.MachineService/DiskUsage", "/machine.MachineService/Dmesg",
		"/machine.MachineService/Events", "/machine.MachineService/Hostname",
		"/machine.MachineService/ImageList", "/machine.MachineService/List",
		"/machine.MachineService/LoadAvg", "/machine.MachineService/Logs",
		"/machine.MachineService/LogsContainers", "/machine.MachineService/Memory",
		"/machine.MachineService/Mounts", "/machine.MachineService/NetworkDeviceStats",
		"/machine.MachineService/Netstat", "/machine.MachineService/Processes",
		"/machine.MachineService/ServiceList", "/machine.MachineService/Stats",
		"/machine.MachineService/SystemStat", "/machine.MachineService/Version",
		"/cosi.resource.State/Get", "/cosi.resource.State/List", "/cosi.resource.State/Watch",
		"/storage.StorageService/Disks",
		"/time.TimeService/Time", "/time.TimeService/TimeCheck",
	},
	"AOB": {"/machine.MachineService/EtcdSnapshot"},
	"AORB": {
		"/machine.MachineService/EtcdAlarmList", "/machine.MachineService/EtcdMemberList",
		"/machine.MachineService/EtcdStatus",
	},
	"AORI": {"/machine.ImageService/Verify"},
	"AM":   {"/machine.MachineService/MetaWrite", "/machine.MachineService/MetaDelete"},
	// reader only in maintenance, checked in the handler
	"AR": {
		"/machine.MachineService/ApplyConfiguration", "/storage.StorageService/BlockDeviceWipe",
		"/machine.LVMService/LogicalVolumeRemove", "/machine.LVMService/VolumeGroupRemove",
		"/machine.LVMService/PhysicalVolumeRemove", "/machine.MDService/Destroy",
	},
})

var fallbackRoles = role.MakeSet(role.Admin)

func buildRules(groups map[string][]string) map[string]role.Set {
	letters := map[rune]role.Role{
		'A': role.Admin, 'O': role.Operator, 'R': role.Reader, 'B': role.EtcdBackup,
		'I': role.ImageVerifier, 'M': role.MetaWriter,
	}

	out := map[string]role.Set{}

	for key, methods := range groups {
		roles := make([]role.Role, 0, len(key))
		for _, r := range key {
			roles = append(roles, letters[r])
		}

		for _, m := range methods {
			out[m] = role.MakeSet(roles...)
		}
	}

	return out
}

type rolesKey struct{}

// rolesFrom returns the roles the interceptor attached to the request context.
func rolesFrom(ctx context.Context) role.Set {
	r, _ := ctx.Value(rolesKey{}).(role.Set)

	return r
}

// callerRoles decides the caller's roles: os:reader for everyone in maintenance
// (t:pkg/grpc/middleware/authz/injector.go ReadOnly modes), otherwise the Organization of the
// verified client certificate (injector.go, mode Enabled).
func (m *Machine) callerRoles(ctx context.Context) role.Set {
	if m.inMaintenance() {
		return role.MakeSet(role.Reader)
	}

	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.MakeSet()
	}

	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return role.MakeSet()
	}

	roles, _ := role.Parse(info.State.PeerCertificates[0].Subject.Organization)

	// another apid forwarding a request (or a user with the os:impersonator role) passes the
	// caller's roles in the metadata (injector.go, Enabled; proxy.go)
	if roles.Includes(role.Impersonator) {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if values := md.Get(constants.APIAuthzRoleMetadataKey); len(values) > 0 {
				mdRoles, _ := role.Parse(values)

				return mdRoles
			}
		}
	}

	return roles
}

func (m *Machine) authorize(ctx context.Context, method string) (context.Context, error) {
	m.countRPC(method)

	roles := m.callerRoles(ctx)
	ctx = context.WithValue(ctx, rolesKey{}, roles)

	allowed, ok := methodRoles[method]
	if !ok {
		allowed = fallbackRoles
	}

	if !allowed.IncludesAny(roles) {
		return ctx, errNotAuthorized
	}

	return ctx, nil
}

func (m *Machine) unaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// apid routes first; only the node that handles the request authorizes it
		mode, targets, err := m.director(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}

		if mode != routeLocal {
			return m.proxyUnary(ctx, info.FullMethod, req, mode, targets)
		}

		ctx, err = m.authorize(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}

		return handler(ctx, req)
	}
}

type wrappedStream struct {
	grpc.ServerStream

	ctx context.Context //nolint:containedctx // grpc stream wrapper
}

func (w *wrappedStream) Context() context.Context { return w.ctx }

func (m *Machine) streamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		mode, targets, err := m.director(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}

		if mode != routeLocal {
			return m.proxyStream(ss, info.FullMethod, mode, targets)
		}

		ctx, err := m.authorize(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}

		return handler(srv, &wrappedStream{ServerStream: ss, ctx: ctx})
	}
}
