package talosemu

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	genoptional "github.com/siderolabs/gen/optional"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	cfgiface "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/imager/quirks"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	talosproto "github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// Resources Talos derives from the running config and the machine's state. Each function
// names the Talos v1.14 controller that fills the resource on a real node; the emulator
// writes the same IDs and the fields that follow from the config and the emulated state.

// refreshDerived rewrites the config-derived resources after the running config changed or the
// machine booted: discovery config, kubelet and control plane component configs, bootstrap
// manifests, volumes. Resources that no longer apply (maintenance, worker) are removed.
func (m *Machine) refreshDerived(ctx context.Context) error {
	m.mu.Lock()
	cfg := m.active
	installed, systemDisk := m.p.Installed, m.p.SystemDisk
	disks := m.p.Hardware.Disks
	m.mu.Unlock()

	if cfg != nil && cfg.Machine() == nil {
		cfg = nil
	}

	if err := setDiscoveryConfig(ctx, m.st, cfg); err != nil {
		return err
	}

	if err := setKubeletConfig(ctx, m.st, cfg); err != nil {
		return err
	}

	cpCfg := cfg
	if cfg == nil || !cfg.Machine().Type().IsControlPlane() {
		cpCfg = nil
	}

	if err := setControlPlaneConfigs(ctx, m.st, cpCfg); err != nil {
		return err
	}

	if !installed {
		cfg = nil
	}

	if err := setVolumeStatuses(ctx, m.st, cfg, disks, systemDisk); err != nil {
		return err
	}

	m.world.discoveryChanged(m)

	return nil
}

// setDiscoveryConfig fills cluster.Config (DiscoveryConfigs.cluster.talos.dev, id "cluster")
// as t:internal/app/machined/pkg/controllers/cluster/config.go does: the discovery service
// endpoints of the config (the v1alpha1 cluster.discovery registry and DiscoveryServiceConfig
// documents both surface through DiscoveryServiceConfigs) with the cluster ID and secret,
// and the Kubernetes registry when discovery is enabled and that registry is not disabled.
func setDiscoveryConfig(ctx context.Context, st state.State, cfg talosconfig.Provider) error {
	md := resource.NewMetadata(config.NamespaceName, cluster.ConfigType, cluster.ConfigID, resource.VersionUndefined)

	if cfg == nil || cfg.Cluster() == nil {
		return destroyIfExists(ctx, st, md)
	}

	return put(ctx, st, cluster.NewConfig(config.NamespaceName, cluster.ConfigID), func(r *cluster.Config) {
		spec := r.TypedSpec()
		*spec = cluster.ConfigSpec{}

		for _, d := range cfg.DiscoveryServiceConfigs() {
			u := d.Endpoint()
			host := u.Host

			if u.Port() == "" {
				host += ":443"
			}

			spec.ServiceEndpoints = append(spec.ServiceEndpoints, cluster.ServiceEndpoint{Name: d.Name(), Endpoint: host, Insecure: u.Scheme == "http"})
		}

		if len(spec.ServiceEndpoints) > 0 {
			if id := cfg.DiscoveryIdentityConfig(); id != nil {
				spec.ServiceClusterID = id.ClusterID()
			}

			spec.RegistryServiceEnabled = true                       //nolint:staticcheck // Talos still fills the legacy fields
			spec.ServiceEndpoint = spec.ServiceEndpoints[0].Endpoint //nolint:staticcheck // see above
		}

		if cfg.Cluster().Discovery().Enabled() {
			spec.RegistryKubernetesEnabled = cfg.Cluster().Discovery().Registries().Kubernetes().Enabled()
		}
	})
}

// discoveryPublishes is true when Talos's LocalAffiliateController publishes this machine
// (t:internal/app/machined/pkg/controllers/cluster/local_affiliate.go: a registry is enabled).
func discoveryPublishes(cfg talosconfig.Provider) bool {
	if cfg == nil || cfg.Cluster() == nil || cfg.Machine() == nil {
		return false
	}

	if len(cfg.DiscoveryServiceConfigs()) > 0 {
		return true
	}

	return cfg.Cluster().Discovery().Enabled() && cfg.Cluster().Discovery().Registries().Kubernetes().Enabled()
}

// setKubeletConfig fills KubeletConfig (k8s namespace, id "kubelet") as
// t:internal/app/machined/pkg/controllers/k8s/kubelet_config.go does, on every configured
// machine. The static pod list URL points at machined's local static pod server, whose port
// Talos picks at random; the emulator derives one.
func setKubeletConfig(ctx context.Context, st state.State, cfg talosconfig.Provider) error {
	md := resource.NewMetadata(k8s.NamespaceName, k8s.KubeletConfigType, k8s.KubeletID, resource.VersionUndefined)

	if cfg == nil || cfg.K8sKubeletConfig() == nil || cfg.K8sNetworkConfig() == nil {
		return destroyIfExists(ctx, st, md)
	}

	return put(ctx, st, k8s.NewKubeletConfig(k8s.NamespaceName, k8s.KubeletID), func(r *k8s.KubeletConfig) {
		kc := cfg.K8sKubeletConfig()
		spec := r.TypedSpec()

		spec.Image = kc.Image()
		spec.ClusterDNS = kc.ClusterDNS()

		if len(spec.ClusterDNS) == 0 {
			for _, a := range k8s.DNSServiceAddrs(cfg.K8sNetworkConfig().ServiceCIDRs()) {
				spec.ClusterDNS = append(spec.ClusterDNS, a.String())
			}
		}

		spec.ClusterDomain = cfg.K8sNetworkConfig().DNSDomain()
		spec.ExtraArgs = argValues(kc.ExtraArgs())
		spec.ExtraMounts = kc.ExtraMounts()
		spec.ExtraConfig = kc.ExtraConfig()
		spec.CloudProviderExternal = cfg.Cluster() != nil && cfg.Cluster().ExternalCloudProvider().Enabled()
		spec.DefaultRuntimeSeccompEnabled = kc.DefaultRuntimeSeccompProfileEnabled()
		spec.SkipNodeRegistration = cfg.K8sNodeConfig() != nil && cfg.K8sNodeConfig().SkipNodeRegistration()
		spec.StaticPodListURL = "http://127.0.0.1:45615"
		spec.DisableManifestsDirectory = kc.DisableManifestsDirectory()
		spec.EnableFSQuotaMonitoring = cfg.Machine().Features().DiskQuotaSupportEnabled()

		if cfg.K8sNodeConfig() != nil {
			spec.RegisterWithTaints = cfg.K8sNodeConfig().Taints()
		}

		spec.CredentialProviderConfig = nil
		if cp := cfg.K8sCredentialProviderConfig(); cp != nil {
			spec.CredentialProviderConfig = cp.Configuration()
		}
	})
}

func argValues(in map[string][]string) map[string]k8s.ArgValues {
	out := make(map[string]k8s.ArgValues, len(in))
	for k, v := range in {
		out[k] = k8s.ArgValues{Values: v}
	}

	return out
}

func extraVolumes(in []cfgiface.VolumeMount) []k8s.ExtraVolume {
	out := make([]k8s.ExtraVolume, 0, len(in))
	for _, v := range in {
		out = append(out, k8s.ExtraVolume{Name: v.Name(), HostPath: v.HostPath(), MountPath: v.MountPath(), ReadOnly: v.ReadOnly()})
	}

	return out
}

func podResources(in cfgiface.Resources) k8s.Resources {
	out := k8s.Resources{Requests: map[string]string{}, Limits: map[string]string{}}

	if in == nil {
		return out
	}

	if v := in.CPURequests(); v != "" {
		out.Requests["cpu"] = v
	}

	if v := in.MemoryRequests(); v != "" {
		out.Requests["memory"] = v
	}

	if v := in.CPULimits(); v != "" {
		out.Limits["cpu"] = v
	}

	if v := in.MemoryLimits(); v != "" {
		out.Limits["memory"] = v
	}

	return out
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}

	return out
}

// setControlPlaneConfigs fills, on control planes, the controlplane namespace as
// t:internal/app/machined/pkg/controllers/k8s/control_plane.go does (APIServerConfig,
// ControllerManagerConfig, SchedulerConfig with id "kube-apiserver" etc.,
// BootstrapManifestsConfig "manifests"), the "final-" variants of
// t:…/k8s/control_plane_final.go (the same spec; Args, the merged command line, is left empty:
// the emulator's processes run with the arguments described in README.md) and the Manifest
// resources (bootstrap_manifests.go). Workers have none of them.
func setControlPlaneConfigs(ctx context.Context, st state.State, cfg talosconfig.Provider) error {
	ptrs := []resource.Pointer{
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.APIServerConfigID, resource.VersionUndefined),
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.APIServerConfigType, k8s.FinalAPIServerConfigID, resource.VersionUndefined),
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ControllerManagerConfigType, k8s.ControllerManagerConfigID, resource.VersionUndefined),
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ControllerManagerConfigType, k8s.FinalControllerManagerConfigID, resource.VersionUndefined),
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.SchedulerConfigType, k8s.SchedulerConfigID, resource.VersionUndefined),
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.SchedulerConfigType, k8s.FinalSchedulerConfigID, resource.VersionUndefined),
		resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.BootstrapManifestsConfigType, k8s.BootstrapManifestsConfigID, resource.VersionUndefined),
	}

	if cfg == nil || cfg.K8sAPIServerConfig() == nil || cfg.K8sNetworkConfig() == nil || cfg.K8sClusterConfig() == nil {
		for _, p := range ptrs {
			if err := destroyIfExists(ctx, st, p); err != nil {
				return err
			}
		}

		return setManifests(ctx, st, nil)
	}

	api := cfg.K8sAPIServerConfig()
	cloudProvider := ""

	if cfg.Cluster().ExternalCloudProvider().Enabled() {
		cloudProvider = "external"
	}

	advertised := "$(POD_IP)"
	if cfg.K8sNodeConfig() != nil && cfg.K8sNodeConfig().SkipNodeRegistration() {
		advertised = ""
	}

	apiSpec := k8s.APIServerConfigSpec{
		Image:                   api.Image(),
		CloudProvider:           cloudProvider,
		ControlPlaneEndpoint:    cfg.K8sClusterConfig().ClusterEndpoint().String(),
		EtcdServers:             []string{"https://127.0.0.1:2379"},
		LocalPort:               api.APIPort(),
		ServiceCIDRs:            prefixStrings(cfg.K8sNetworkConfig().ServiceCIDRs()),
		ExtraArgs:               argValues(api.ExtraArgs()),
		ExtraVolumes:            extraVolumes(api.ExtraVolumes()),
		EnvironmentVariables:    api.Env(),
		AdvertisedAddress:       advertised,
		Resources:               podResources(api.Resources()),
		StartupProbesEnabled:    api.StartupProbesEnabled(),
		UseAuthenticationConfig: api.UseAuthenticationConfig(),
	}

	for _, id := range []string{k8s.APIServerConfigID, k8s.FinalAPIServerConfigID} {
		if err := put(ctx, st, k8s.NewAPIServerConfig(id), func(r *k8s.APIServerConfig) { *r.TypedSpec() = apiSpec }); err != nil {
			return err
		}
	}

	if cm := cfg.K8sControllerManagerConfig(); cm != nil {
		cmSpec := k8s.ControllerManagerConfigSpec{
			Enabled:              cm.Enabled(),
			Image:                cm.Image(),
			CloudProvider:        cloudProvider,
			PodCIDRs:             prefixStrings(cfg.K8sNetworkConfig().PodCIDRs()),
			ServiceCIDRs:         prefixStrings(cfg.K8sNetworkConfig().ServiceCIDRs()),
			ExtraArgs:            argValues(cm.ExtraArgs()),
			ExtraVolumes:         extraVolumes(cm.ExtraVolumes()),
			EnvironmentVariables: cm.Env(),
			Resources:            podResources(cm.Resources()),
			NodeCIDRMaskSizeIPv4: cfg.K8sNetworkConfig().NodeCIDRMaskSizeIPv4(),
			NodeCIDRMaskSizeIPv6: cfg.K8sNetworkConfig().NodeCIDRMaskSizeIPv6(),
		}

		for _, id := range []string{k8s.ControllerManagerConfigID, k8s.FinalControllerManagerConfigID} {
			if err := put(ctx, st, k8s.NewControllerManagerConfig(id), func(r *k8s.ControllerManagerConfig) { *r.TypedSpec() = cmSpec }); err != nil {
				return err
			}
		}
	}

	if sc := cfg.K8sSchedulerConfig(); sc != nil {
		scSpec := k8s.SchedulerConfigSpec{
			Enabled:              sc.Enabled(),
			Image:                sc.Image(),
			ExtraArgs:            argValues(sc.ExtraArgs()),
			ExtraVolumes:         extraVolumes(sc.ExtraVolumes()),
			EnvironmentVariables: sc.Env(),
			Resources:            podResources(sc.Resources()),
			Config:               sc.Config(),
		}

		for _, id := range []string{k8s.SchedulerConfigID, k8s.FinalSchedulerConfigID} {
			if err := put(ctx, st, k8s.NewSchedulerConfig(id), func(r *k8s.SchedulerConfig) { *r.TypedSpec() = scSpec }); err != nil {
				return err
			}
		}
	}

	bmc := bootstrapManifestsConfig(cfg)

	if err := put(ctx, st, k8s.NewBootstrapManifestsConfig(), func(r *k8s.BootstrapManifestsConfig) { *r.TypedSpec() = bmc }); err != nil {
		return err
	}

	return setManifests(ctx, st, cfg)
}

// setManifests writes the Manifest resources (controlplane namespace) Talos renders: the
// bootstrap manifests (t:internal/app/machined/pkg/controllers/k8s/manifest.go) and one
// "99-<name>" per inline manifest (t:…/k8s/extra_manifest.go); stale ones are removed.
func setManifests(ctx context.Context, st state.State, cfg talosconfig.Provider) error {
	want := map[string][]k8s.SingleManifest{}

	if cfg != nil {
		rendered, err := renderManifests(cfg)
		if err != nil {
			return err
		}

		for _, r := range rendered {
			items := make([]k8s.SingleManifest, 0, len(r.objs))
			for _, o := range r.objs {
				items = append(items, k8s.SingleManifest{Object: o.Object})
			}

			want[r.id] = items
		}
	}

	existing, err := safe.StateListAll[*k8s.Manifest](ctx, st)
	if err != nil {
		return err
	}

	for r := range existing.All() {
		if _, ok := want[r.Metadata().ID()]; !ok {
			if err := destroyIfExists(ctx, st, r.Metadata()); err != nil {
				return err
			}
		}
	}

	for id, items := range want {
		if err := put(ctx, st, k8s.NewManifest(k8s.ControlPlaneNamespaceName, id), func(r *k8s.Manifest) { r.TypedSpec().Items = items }); err != nil {
			return err
		}
	}

	return nil
}

// systemVolume is one partition of Talos's system disk layout for UEFI (sd-boot) installs
// (t:internal/pkg/partition/partition.go: EFI, META, STATE, EPHEMERAL, sized by
// m:imager/quirks PartitionSizes).
type systemVolume struct {
	id    string
	size  uint64
	fs    block.FilesystemType
	mount string
}

// setVolumeStatuses fills VolumeStatus (runtime namespace) of a configured, installed machine
// as t:internal/app/machined/pkg/controllers/block/internal/volumes (locate.go, partition.go,
// grow.go) reports them once provisioned: phase ready, the partition, its disk, size,
// filesystem and mount point.
//
//   - A volume that exists is located by its label and kept where and as large as it is,
//     whatever its document now says (locate.go: discovered volumes are matched by the
//     locator before the disk selector is read; a partition never shrinks).
//   - EFI, META and STATE are on the system disk; EPHEMERAL on the disk its VolumeConfig
//     selects (the system disk by default, volumeconfig/system_volumes.go), before user
//     volumes (the system disk's wave comes first), taking its maxSize of the free space or,
//     without one, all of it (grow defaults to true).
//   - Each UserVolumeConfig ("u-<name>") and RawVolumeConfig ("r-<name>") is placed on the
//     first disk its CEL selector matches (celenv.DiskLocator over the Disk resource, with
//     system_disk) that has free space, sized by maxSize (bytes, a percentage of the free
//     space, or negative: space to leave free, PartitionSpec.ResolveMaxSize) or its minSize;
//     a volume no disk matches is failed, as Talos reports "no disks matched for volume".
func setVolumeStatuses(ctx context.Context, st state.State, cfg talosconfig.Provider, disks []diskHW, systemDisk string) error {
	want := map[string]block.VolumeStatusSpec{}

	if cfg != nil {
		p, err := newVolumePlacer(ctx, st, disks, systemDisk)
		if err != nil {
			return err
		}

		if p != nil {
			want = p.place(cfg)
		}
	}

	existing, err := safe.StateListAll[*block.VolumeStatus](ctx, st)
	if err != nil {
		return err
	}

	for r := range existing.All() {
		if _, ok := want[r.Metadata().ID()]; !ok {
			if err := destroyIfExists(ctx, st, r.Metadata()); err != nil {
				return err
			}
		}
	}

	for id, spec := range want {
		if err := put(ctx, st, block.NewVolumeStatus(block.NamespaceName, id), func(r *block.VolumeStatus) { *r.TypedSpec() = spec }); err != nil {
			return err
		}
	}

	return nil
}

// volumePlacer places a machine's volumes on its disks.
type volumePlacer struct {
	disks      []diskHW
	systemDisk string
	protos     map[string]*blockpb.DiskSpec
	existing   map[string]block.VolumeStatusSpec
	used       map[string]uint64
	next       map[string]int
	out        map[string]block.VolumeStatusSpec
}

// newVolumePlacer reads the Disk resources and the volumes that exist; nil without a system disk.
func newVolumePlacer(ctx context.Context, st state.State, disks []diskHW, systemDisk string) (*volumePlacer, error) {
	p := &volumePlacer{
		disks: disks, systemDisk: systemDisk, protos: map[string]*blockpb.DiskSpec{},
		existing: map[string]block.VolumeStatusSpec{}, used: map[string]uint64{}, next: map[string]int{},
		out: map[string]block.VolumeStatusSpec{},
	}

	found := false

	for _, d := range disks {
		found = found || d.Name == systemDisk
		p.used[d.Name] = 1 << 20 // GPT and alignment
		p.next[d.Name] = 1

		r, err := safe.StateGetByID[*block.Disk](ctx, st, d.Name)
		if err != nil {
			continue
		}

		var spec blockpb.DiskSpec
		if err := talosproto.ResourceSpecToProto(r, &spec); err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}

		p.protos[d.Name] = &spec
	}

	if !found {
		return nil, nil
	}

	vols, err := safe.StateListAll[*block.VolumeStatus](ctx, st)
	if err != nil {
		return nil, err
	}

	for v := range vols.All() {
		s := *v.TypedSpec()
		if s.Phase != block.VolumePhaseReady || s.ParentLocation == "" {
			continue
		}

		name := strings.TrimPrefix(s.ParentLocation, "/dev/")
		if _, ok := p.used[name]; !ok {
			continue
		}

		p.existing[v.Metadata().ID()] = s
	}

	return p, nil
}

func (p *volumePlacer) place(cfg talosconfig.Provider) map[string]block.VolumeStatusSpec {
	// what exists stays: account for its space first
	for id, s := range p.existing {
		if !p.wanted(cfg, id) {
			continue
		}

		name := strings.TrimPrefix(s.ParentLocation, "/dev/")
		p.used[name] += s.Size
		p.next[name] = max(p.next[name], s.PartitionIndex+1)
		p.out[id] = s
	}

	ps := quirks.New("").PartitionSizes()
	for _, v := range []systemVolume{
		{id: "EFI", size: ps.UKIEFISize(), fs: block.FilesystemTypeVFAT},
		{id: constants.MetaPartitionLabel, size: ps.METASize(), fs: block.FilesystemTypeNone},
		{id: constants.StatePartitionLabel, size: ps.StateSize(), fs: block.FilesystemTypeXFS, mount: constants.StateMountPoint},
	} {
		p.put(v, p.systemDisk)
	}

	eph := systemVolume{id: constants.EphemeralPartitionLabel, fs: block.FilesystemTypeXFS, mount: constants.EphemeralMountPoint}

	var ephProv cfgiface.VolumeProvisioningConfig

	if vc, ok := cfg.Volumes().ByName(constants.EphemeralPartitionLabel); ok {
		ephProv = vc.Provisioning()
	}

	p.putSelected(eph, ephProv, true)

	for _, uv := range cfg.UserVolumeConfigs() {
		p.putSelected(systemVolume{
			id: constants.UserVolumePrefix + uv.Name(), fs: block.FilesystemTypeXFS, mount: constants.UserVolumeMountPoint + "/" + uv.Name(),
		}, uv.Provisioning(), false)
	}

	for _, rv := range cfg.RawVolumeConfigs() {
		p.putSelected(systemVolume{id: constants.RawVolumePrefix + rv.Name(), fs: block.FilesystemTypeNone}, rv.Provisioning(), false)
	}

	return p.out
}

// wanted reports whether the config still has volume id.
func (p *volumePlacer) wanted(cfg talosconfig.Provider, id string) bool {
	switch id {
	case "EFI", constants.MetaPartitionLabel, constants.StatePartitionLabel, constants.EphemeralPartitionLabel:
		return true
	}

	for _, uv := range cfg.UserVolumeConfigs() {
		if id == constants.UserVolumePrefix+uv.Name() {
			return true
		}
	}

	for _, rv := range cfg.RawVolumeConfigs() {
		if id == constants.RawVolumePrefix+rv.Name() {
			return true
		}
	}

	return false
}

// putSelected places v on the first disk its selector matches with free space
// (the system disk without a selector when systemDefault), sized from prov.
func (p *volumePlacer) putSelected(v systemVolume, prov cfgiface.VolumeProvisioningConfig, systemDefault bool) {
	if _, ok := p.out[v.id]; ok {
		return
	}

	var sel genoptional.Optional[cel.Expression]
	if prov != nil {
		sel = prov.DiskSelector()
	}

	expr, hasSel := sel.Get()

	for _, d := range p.disks {
		free := p.free(d.Name)
		if free == 0 {
			continue
		}

		if !hasSel {
			if !systemDefault || d.Name != p.systemDisk {
				continue
			}
		} else {
			spec := p.protos[d.Name]
			if spec == nil {
				continue
			}

			ok, err := expr.EvalBool(celenv.DiskLocator(), map[string]any{"disk": spec, "system_disk": d.Name == p.systemDisk})
			if err != nil || !ok {
				continue
			}
		}

		def := uint64(1 << 30)
		if systemDefault {
			def = free // EPHEMERAL grows into what is free
		}

		v.size = resolveVolumeSize(prov, free, def)
		if v.size == 0 {
			continue
		}

		p.put(v, d.Name)

		return
	}

	if hasSel || !systemDefault {
		p.out[v.id] = block.VolumeStatusSpec{Phase: block.VolumePhaseFailed, Type: block.VolumeTypePartition, ErrorMessage: "no disks matched for volume"}
	}
}

// free is the unallocated space of disk name.
func (p *volumePlacer) free(name string) uint64 {
	for _, d := range p.disks {
		if d.Name == name && d.Size > p.used[name] {
			return d.Size - p.used[name]
		}
	}

	return 0
}

// resolveVolumeSize is a volume's size on a disk with free bytes available:
// maxSize in bytes (capped by what is free), a percentage of the free space,
// or, negative, the free space less that much (t:pkg/machinery/resources/block
// PartitionSpec.ResolveMaxSize); else minSize, else def.
func resolveVolumeSize(prov cfgiface.VolumeProvisioningConfig, free, def uint64) uint64 {
	if prov == nil {
		return min(def, free)
	}

	if v, ok := prov.MaxSize().Get(); ok && v > 0 {
		if prov.MaxSizeNegative() {
			return free - min(v, free)
		}

		return min(v, free)
	}

	if v, ok := prov.RelativeMaxSize().Get(); ok && v > 0 {
		if prov.MaxSizeNegative() {
			return free - free*v/100
		}

		return free * v / 100
	}

	if v, ok := prov.MinSize().Get(); ok && v > 0 {
		return min(v, free)
	}

	return min(def, free)
}

// put places v (already sized) as the next partition of disk name.
func (p *volumePlacer) put(v systemVolume, name string) {
	if _, ok := p.out[v.id]; ok {
		return
	}

	idx := p.next[name]
	p.next[name]++
	p.used[name] += v.size
	part := partitionPath(name, idx)

	spec := block.VolumeStatusSpec{
		Phase:          block.VolumePhaseReady,
		Type:           block.VolumeTypePartition,
		Location:       part,
		MountLocation:  part,
		PartitionIndex: idx,
		ParentLocation: "/dev/" + name,
		UUID:           seed(name+v.id, "fs-uuid")[:36],
		PartitionUUID:  seed(name+v.id, "part-uuid")[:36],
		Size:           v.size,
		PrettySize:     humanSize(v.size),
		Filesystem:     v.fs,
	}

	if v.mount != "" {
		spec.MountSpec = block.MountSpec{TargetPath: v.mount}
	}

	p.out[v.id] = spec
}

// partitionPath is the Linux device of partition idx of disk: nvme0n1p1, sda1, vda1.
func partitionPath(disk string, idx int) string {
	if strings.HasPrefix(disk, "nvme") || strings.HasPrefix(disk, "mmcblk") {
		return fmt.Sprintf("/dev/%sp%d", disk, idx)
	}

	return fmt.Sprintf("/dev/%s%d", disk, idx)
}

// setRoutes fills RouteStatus (network namespace) for the machine's addresses, as the kernel
// reports them through t:internal/app/machined/pkg/controllers/network/route_status.go: the
// connected /24 of the first link's address (scope link, protocol kernel), a default route
// via the subnet's .254 (protocol static, metric 1024) and the link-local fe80::/64 of each
// link (protocol kernel, metric 256), all in the main table. IDs are
// m:resources/network/network.go RouteID.
func setRoutes(ctx context.Context, st state.State, ip netip.Addr, links []linkHW, indexes map[string]uint32) error {
	want := map[string]network.RouteStatusSpec{}

	if ip.IsValid() && ip.Is4() && len(links) > 0 {
		first := links[0].Name
		subnet := netip.PrefixFrom(ip, 24).Masked()
		gw := subnet.Addr().As4()
		gw[3] = 254

		connected := network.RouteStatusSpec{
			Family: nethelpers.FamilyInet4, Destination: subnet, Source: ip, OutLinkIndex: indexes[first], OutLinkName: first,
			Table: nethelpers.TableMain, Scope: nethelpers.ScopeLink, Type: nethelpers.TypeUnicast, Protocol: nethelpers.ProtocolKernel,
		}
		want[network.RouteID(connected.Table, connected.Family, connected.Destination, connected.Gateway, connected.Priority, first)] = connected

		def := network.RouteStatusSpec{
			Family: nethelpers.FamilyInet4, Source: ip, Gateway: netip.AddrFrom4(gw), OutLinkIndex: indexes[first], OutLinkName: first,
			Table: nethelpers.TableMain, Priority: 1024, Scope: nethelpers.ScopeGlobal, Type: nethelpers.TypeUnicast, Protocol: nethelpers.ProtocolStatic,
		}
		want[network.RouteID(def.Table, def.Family, def.Destination, def.Gateway, def.Priority, first)] = def
	}

	for _, l := range links {
		ll := network.RouteStatusSpec{
			Family: nethelpers.FamilyInet6, Destination: netip.MustParsePrefix("fe80::/64"), OutLinkIndex: indexes[l.Name], OutLinkName: l.Name,
			Table: nethelpers.TableMain, Priority: 256, Scope: nethelpers.ScopeGlobal, Type: nethelpers.TypeUnicast, Protocol: nethelpers.ProtocolKernel,
		}
		want[network.RouteID(ll.Table, ll.Family, ll.Destination, ll.Gateway, ll.Priority, l.Name)] = ll
	}

	existing, err := safe.StateListAll[*network.RouteStatus](ctx, st)
	if err != nil {
		return err
	}

	for r := range existing.All() {
		if _, ok := want[r.Metadata().ID()]; !ok {
			if err := destroyIfExists(ctx, st, r.Metadata()); err != nil {
				return err
			}
		}
	}

	for id, spec := range want {
		if err := put(ctx, st, network.NewRouteStatus(network.NamespaceName, id), func(r *network.RouteStatus) { *r.TypedSpec() = spec }); err != nil {
			return err
		}
	}

	return nil
}
