package talosemu

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// resourceTypes are the resource definitions each machine registers. Talos's State API
// refuses types without a ResourceDefinition and namespaces without a Namespace in `meta`
// (t:internal/app/resources/access.go AccessPolicy).
var resourceTypes = []meta.ResourceDefinitionProvider{
	&meta.Namespace{}, &meta.ResourceDefinition{},
	&runtime.MachineStatus{}, &runtime.Version{}, &runtime.SecurityState{},
	&runtime.ImageFactorySchematic{}, &runtime.ExtensionStatus{},
	&hardware.SystemInformation{}, &hardware.Processor{}, &hardware.MemoryModule{},
	&block.Disk{}, &block.SystemDisk{},
	&network.LinkStatus{}, &network.AddressStatus{}, &network.HostnameStatus{}, &network.NodeAddress{},
	&config.MachineConfig{}, &config.MachineType{},
	&k8s.Nodename{},
	&etcdres.Member{},
	&cluster.Identity{},
	// talosres.go, discovery.go, staticpods.go
	&cluster.Config{}, &cluster.Affiliate{}, &cluster.Member{},
	&k8s.KubeletConfig{}, &k8s.StaticPodStatus{}, &k8s.KubePrismStatuses{},
	&k8s.APIServerConfig{}, &k8s.ControllerManagerConfig{}, &k8s.SchedulerConfig{},
	&k8s.BootstrapManifestsConfig{}, &k8s.Manifest{},
	&network.RouteStatus{}, &block.VolumeStatus{}, &runtime.Diagnostic{},
}

var namespaces = []struct {
	name resource.Namespace
	desc string
}{
	{meta.NamespaceName, "Metadata namespace which contains resource definitions and namespaces."},
	{runtime.NamespaceName, "Talos runtime."},
	{hardware.NamespaceName, "Hardware resources."},
	{network.NamespaceName, "Networking resources."},
	{config.NamespaceName, "Talos node configuration."},
	{k8s.NamespaceName, "Kubernetes all node types resources."},
	{k8s.ControlPlaneNamespaceName, "Kubernetes control plane resources."},
	{cluster.NamespaceName, "Cluster configuration and discovery resources."},
	{etcdres.NamespaceName, "etcd resources."},
}

// newMachineState builds the COSI state of one machine with its namespaces and resource
// definitions registered.
func newMachineState(ctx context.Context) (state.State, error) {
	build := inmem.NewStateWithOptions(
		inmem.WithHistoryInitialCapacity(4),
		inmem.WithHistoryMaxCapacity(64),
		inmem.WithHistoryGap(4),
	)

	st := state.WrapCore(namespaced.NewState(func(ns resource.Namespace) state.CoreState { return build(ns) }))

	for _, ns := range namespaces {
		if err := st.Create(ctx, meta.NewNamespace(ns.name, meta.NamespaceSpec{Description: ns.desc})); err != nil {
			return nil, err
		}
	}

	for _, p := range resourceTypes {
		rd, err := meta.NewResourceDefinition(p.ResourceDefinition())
		if err != nil {
			return nil, err
		}

		if err := st.Create(ctx, rd); err != nil {
			return nil, err
		}
	}

	return st, nil
}

// accessPolicy mirrors Talos's filter on the State API (t:internal/app/resources/access.go):
// no writes at all, types and namespaces must be registered, sensitive types need os:admin.
func accessPolicy(st state.State) state.FilteringRule {
	return func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Error(codes.PermissionDenied, "write access is not allowed")
		}

		rd, err := safe.StateGet[*meta.ResourceDefinition](ctx, st, resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, strings.ToLower(access.ResourceType), resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("resource type %q is not supported", access.ResourceType))
			}

			return err
		}

		if rd.TypedSpec().Sensitivity == meta.Sensitive && !rolesFrom(ctx).Includes(role.Admin) {
			return errNotAuthorized
		}

		_, err = safe.StateGet[*meta.Namespace](ctx, st, resource.NewMetadata(meta.NamespaceName, meta.NamespaceType, access.ResourceNamespace, resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Error(codes.PermissionDenied, fmt.Sprintf("namespace %q is not supported", access.ResourceNamespace))
			}

			return err
		}

		return nil
	}
}

// put creates or replaces a resource's spec.
func put[T resource.Resource](ctx context.Context, st state.State, r T, fill func(T)) error {
	return safe.StateModify(ctx, st, r, func(r T) error {
		fill(r)

		return nil
	})
}

func destroyIfExists(ctx context.Context, st state.State, md resource.Pointer) error {
	if err := st.Destroy(ctx, md); err != nil && !state.IsNotFoundError(err) {
		return err
	}

	return nil
}

// seedHardware writes the resources that describe the hardware (SystemInformation, Disk,
// LinkStatus, SecurityState), present from boot in any mode.
func seedHardware(ctx context.Context, st state.State, hw hwSpec) error {
	if err := put(ctx, st, hardware.NewSystemInformation(hardware.SystemInformationID), func(r *hardware.SystemInformation) {
		*r.TypedSpec() = hardware.SystemInformationSpec{
			Manufacturer: hw.Manufacturer,
			ProductName:  hw.ProductName,
			SerialNumber: hw.Serial,
			UUID:         hw.UUID,
			WakeUpType:   "Power Switch",
			Version:      "1.0",
			BIOSVersion:  "talosemu-1",
		}
	}); err != nil {
		return err
	}

	if err := put(ctx, st, hardware.NewProcessorInfo("_CPU0"), func(r *hardware.Processor) {
		*r.TypedSpec() = hardware.ProcessorSpec{
			Socket: "CPU 0", Manufacturer: "Emulated", ProductName: "talosemu vCPU",
			MaxSpeed: 3000, BootSpeed: 3000, Status: 65, CoreCount: 4, CoreEnabled: 4, ThreadCount: 8,
		}
	}); err != nil {
		return err
	}

	if err := put(ctx, st, hardware.NewMemoryModuleInfo("DIMM 0"), func(r *hardware.MemoryModule) {
		*r.TypedSpec() = hardware.MemoryModuleSpec{
			Size: 8192, DeviceLocator: "DIMM 0", BankLocator: "BANK 0", Speed: 3200, Manufacturer: "Emulated",
		}
	}); err != nil {
		return err
	}

	for i, d := range hw.Disks {
		if err := put(ctx, st, block.NewDisk(block.NamespaceName, d.Name), func(r *block.Disk) {
			spec := r.TypedSpec()
			spec.DevPath = "/dev/" + d.Name
			spec.Size = d.Size
			spec.PrettySize = humanSize(d.Size)
			spec.IOSize = 512
			spec.SectorSize = 512
			spec.Model = d.Model
			spec.Serial = d.Serial
			spec.WWID = d.WWID
			spec.SubSystem = "/sys/class/block"

			switch d.Type {
			case DiskNVMe:
				spec.Transport = "nvme"
				spec.Modalias = "nvme:v1B36d0010"
				spec.BusPath = fmt.Sprintf("/pci0000:00/0000:00:%02x.0/nvme", 4+i)
			case DiskSATA:
				spec.Transport = "sata"
				spec.BusPath = fmt.Sprintf("/pci0000:00/0000:00:1f.2/ata%d/host%d/target%d:0:0/%d:0:0:0", i+1, i, i, i)
			case DiskVirtio:
				spec.Transport = "virtio"
				spec.Modalias = "virtio:d00000002v00001AF4"
				spec.BusPath = fmt.Sprintf("/pci0000:00/0000:00:%02x.0/virtio%d", 4+i, i)
			}

			if d.WWID != "" {
				spec.Symlinks = append(spec.Symlinks, "/dev/disk/by-id/"+strings.ReplaceAll(d.WWID, ":", "-"))
			}

			spec.Symlinks = append(spec.Symlinks, "/dev/disk/by-path/pci-"+d.Name)
		}); err != nil {
			return err
		}
	}

	for i, l := range hw.Links {
		mac, err := net.ParseMAC(l.MAC)
		if err != nil {
			return fmt.Errorf("link %s: %w", l.Name, err)
		}

		if err := put(ctx, st, network.NewLinkStatus(network.NamespaceName, l.Name), func(r *network.LinkStatus) {
			spec := r.TypedSpec()
			spec.Index = uint32(i + 2) //nolint:gosec // tiny
			spec.Type = nethelpers.LinkEther
			spec.Kind = ""
			spec.HardwareAddr = nethelpers.HardwareAddr(mac)
			spec.PermanentAddr = nethelpers.HardwareAddr(mac)
			spec.BroadcastAddr = nethelpers.HardwareAddr(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
			spec.MTU = 1500
			spec.OperationalState = nethelpers.OperStateUp
			spec.LinkState = true
			spec.Driver = "virtio_net"
			spec.BusPath = fmt.Sprintf("0000:00:%02x.0", 3+i)
			spec.PCIID = "1AF4:1000"
			spec.SpeedMegabits = 10000
			spec.Duplex = nethelpers.Full
			spec.Flags = nethelpers.LinkFlags(0x1 | 0x2 | 0x1000 | 0x40) // up, broadcast, multicast, running
		}); err != nil {
			return err
		}
	}

	if err := put(ctx, st, runtime.NewSecurityStateSpec(runtime.NamespaceName), func(r *runtime.SecurityState) {
		r.TypedSpec().SecureBoot = hw.SecureBoot
	}); err != nil {
		return err
	}

	return put(ctx, st, network.NewNodeAddress(network.NamespaceName, network.NodeAddressDefaultID), func(r *network.NodeAddress) {
		r.TypedSpec().Addresses = nil
	})
}

// setVersionResources reports the running version and schematic: runtime.Version, the
// ExtensionStatus named "schematic" whose version is the schematic ID, and the
// ImageFactorySchematic derived from it (talos-api.md §2).
func setVersionResources(ctx context.Context, st state.State, version, schematic string) error {
	if err := put(ctx, st, runtime.NewVersion(), func(r *runtime.Version) {
		r.TypedSpec().Version = version
		r.TypedSpec().Name = "Talos"
	}); err != nil {
		return err
	}

	if err := put(ctx, st, runtime.NewExtensionStatus(runtime.NamespaceName, "0"), func(r *runtime.ExtensionStatus) {
		r.TypedSpec().Image = "0.sqsh"
		r.TypedSpec().Metadata = extensions.Metadata{
			Name:        "schematic",
			Version:     schematic,
			Description: "",
		}
	}); err != nil {
		return err
	}

	return put(ctx, st, runtime.NewImageFactorySchematic(runtime.NamespaceName, runtime.ImageFactorySchematicID), func(r *runtime.ImageFactorySchematic) {
		r.TypedSpec().SchematicID = schematic
		r.TypedSpec().Flavor = "installer"
		r.TypedSpec().APIURL = "https://factory.talos.dev"
	})
}

func setStage(ctx context.Context, st state.State, stage runtime.MachineStage, ready bool, unmet []runtime.UnmetCondition) error {
	return put(ctx, st, runtime.NewMachineStatus(), func(r *runtime.MachineStatus) {
		r.TypedSpec().Stage = stage
		r.TypedSpec().Status.Ready = ready
		r.TypedSpec().Status.UnmetConditions = unmet
	})
}

// setConfigResources stores the active and persistent configs the way Talos does
// (config.MachineConfig IDs v1alpha1 and persistent) and derives MachineType and Nodename.
func setConfigResources(ctx context.Context, st state.State, active, persistent talosconfig.Provider, hostname string) error {
	if active == nil {
		for _, p := range []resource.Pointer{
			resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.ActiveID, resource.VersionUndefined),
			resource.NewMetadata(config.NamespaceName, config.MachineConfigType, config.PersistentID, resource.VersionUndefined),
			resource.NewMetadata(config.NamespaceName, config.MachineTypeType, config.MachineTypeID, resource.VersionUndefined),
			resource.NewMetadata(k8s.NamespaceName, k8s.NodenameType, k8s.NodenameID, resource.VersionUndefined),
		} {
			if err := destroyIfExists(ctx, st, p); err != nil {
				return err
			}
		}

		return nil
	}

	if err := replaceConfig(ctx, st, config.ActiveID, active); err != nil {
		return err
	}

	if persistent != nil {
		if err := replaceConfig(ctx, st, config.PersistentID, persistent); err != nil {
			return err
		}
	}

	if active.Machine() != nil {
		if err := put(ctx, st, config.NewMachineType(), func(r *config.MachineType) {
			r.SetMachineType(active.Machine().Type())
		}); err != nil {
			return err
		}
	}

	return put(ctx, st, k8s.NewNodename(k8s.NamespaceName, k8s.NodenameID), func(r *k8s.Nodename) {
		r.TypedSpec().Nodename = hostname
		r.TypedSpec().HostnameVersion = "1"
	})
}

func replaceConfig(ctx context.Context, st state.State, id resource.ID, cfg talosconfig.Provider) error {
	if err := destroyIfExists(ctx, st, resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined)); err != nil {
		return err
	}

	return st.Create(ctx, config.NewMachineConfigWithID(cfg, id))
}

func setHostname(ctx context.Context, st state.State, hostname string) error {
	return put(ctx, st, network.NewHostnameStatus(network.NamespaceName, network.HostnameID), func(r *network.HostnameStatus) {
		r.TypedSpec().Hostname = hostname
		r.TypedSpec().Domainname = ""
	})
}

func setIdentity(ctx context.Context, st state.State, nodeID string) error {
	return put(ctx, st, cluster.NewIdentity(cluster.NamespaceName, cluster.LocalIdentity), func(r *cluster.Identity) {
		r.TypedSpec().NodeID = nodeID
	})
}

func humanSize(b uint64) string {
	const unit = 1000

	if b < unit {
		return fmt.Sprintf("%d B", b)
	}

	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}

	return fmt.Sprintf("%.0f %cB", float64(b)/float64(div), "kMGTPE"[exp])
}
